"""Hugging Face model cards for every ``hf/`` export: what the model is and how it was made."""

from __future__ import annotations

import json
import sys
from typing import Any


def _metrics(module) -> dict[str, float]:
    trainer = getattr(module, "_trainer", None)
    if trainer is None:
        return {}
    out = {}
    for k, v in trainer.callback_metrics.items():
        try:
            out[k] = round(float(v), 5)
        except (TypeError, ValueError):
            continue
    return out


def model_card(module, extra: dict[str, Any] | None = None) -> str:
    """Render a model card from a module's hyperparameters and last metrics."""
    hp = dict(module.hparams) if hasattr(module, "hparams") else {}
    base = hp.get("init_from") or hp.get("student") or hp.get("teacher") or "unknown"
    stage = type(module).__name__
    dm = None
    trainer = getattr(module, "_trainer", None)
    if trainer is not None:
        dm = getattr(trainer, "datamodule", None)
    data_desc = getattr(dm, "describe", lambda: None)() if dm is not None else None
    metrics = _metrics(module)
    keys = {k: v for k, v in hp.items() if isinstance(v, (int, float, str, bool)) or v is None}
    lines = [
        "---",
        f"base_model: {base}",
        "library_name: transformers",
        "tags: [domainbert]",
        "---",
        "",
        f"# {stage} export",
        "",
        f"- **Base model:** `{base}`",
        f"- **Stage:** {stage}",
        f"- **Data:** {data_desc or 'see the run config'}",
        "",
        "## Hyperparameters",
        "",
        "```json",
        json.dumps(keys, indent=2, sort_keys=True, default=str),
        "```",
        "",
        "## Metrics (last logged: validation at the end of training; test where it was run)",
        "",
    ]
    lines += [f"| {k} | {v} |" for k, v in sorted(metrics.items())] or ["(none logged)"]
    if metrics:
        lines.insert(len(lines) - len(metrics), "| metric | value |\n|---|---|")
    lines += ["", "## Reproduce", "", "```", "domainbert " + " ".join(sys.argv[1:]) if sys.argv else "", "```", ""]
    for k, v in (extra or {}).items():
        lines += [f"## {k}", "", str(v), ""]
    return "\n".join(lines)
