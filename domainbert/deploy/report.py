"""The export's reports: one row per variant, each folder's ``report.json``/``report.md``, and the summary of all."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import torch

from domainbert.core.files import atomic_write_text
from domainbert.deploy.bench import weights_size

COLUMNS = [
    ("variant", "variant"),
    ("params", "params"),
    ("size_mb", "size (MB)"),
    ("latency_ms_b1", "ms/example b1"),
    ("latency_ms_b32", "ms/example b32"),
    ("accuracy", "accuracy"),
    ("f1_macro", "macro-F1"),
]


def _table(rows: list[dict], columns=COLUMNS) -> str:
    head = "| " + " | ".join(t for _, t in columns) + " |"
    sep = "|" + "|".join("---" for _ in columns) + "|"
    body = ["| " + " | ".join("" if r.get(k) is None else str(r.get(k)) for k, _ in columns) + " |" for r in rows]
    return "\n".join([head, sep, *body])


def variant_row(
    variant: str, path: str | Path, weights: Path, params: int, measured: dict, common: dict, extra: dict | None = None
) -> dict[str, Any]:
    """One variant's report row: what and where it is, its size, its measurements and the run's settings.

    Args:
        variant: the variant's name (``student``, ``int8``, ...).
        path: where the variant is (its final folder).
        weights: the folder whose weight files give the size (the folder being written, or ``path`` itself).
        params: its parameter count.
        measured: its latencies and task metrics (:func:`domainbert.deploy.bench.measure`).
        common: the fields every row of the run carries (examples, data, threads, max_length).
        extra: the variant's own fields (pruned heads, int8 backend, ONNX check, ...).
    """
    row = {"variant": variant, "path": str(path), "params": params, "size_mb": round(weights_size(weights) / 1e6, 3)}
    return {**row, **measured, **common, **(extra or {})}


def progress(row: dict) -> str:
    """The one line printed when a variant is done."""
    keys = ("params", "size_mb", "latency_ms_b1", "latency_ms_b32", "f1_macro")
    return f"[{row['variant']}] " + " ".join(f"{k}={row[k]}" for k in keys if row.get(k) is not None)


def write_report(folder: Path, report: dict) -> None:
    """``report.json`` and ``report.md`` of one variant, in ``folder`` (atomically)."""
    atomic_write_text(folder / "report.json", json.dumps(report, indent=2, sort_keys=True) + "\n")
    extra = {k: v for k, v in report.items() if k not in dict(COLUMNS)}
    lines = [f"# {report['variant']}", "", _table([report]), ""]
    lines += [f"- **{k}:** {json.dumps(v) if not isinstance(v, str) else v}" for k, v in sorted(extra.items())]
    atomic_write_text(folder / "report.md", "\n".join(lines) + "\n")


def with_ratios(rows: list[dict], base: str) -> list[dict]:
    """Add speed-up, size and F1 columns relative to the row named ``base``."""
    ref = next((r for r in rows if r["variant"] == base), None)
    if ref is None:
        return rows
    out = []
    for r in rows:
        r = dict(r)
        for k in ("latency_ms_b1", "latency_ms_b32"):
            if r.get(k) and ref.get(k):
                r[f"speedup_{k[-3:].strip('_')}_vs_{base}"] = round(ref[k] / r[k], 2)
        if r.get("size_mb") and ref.get("size_mb"):
            r[f"size_vs_{base}"] = round(r["size_mb"] / ref["size_mb"], 3)
        if r.get("f1_macro") is not None and ref.get("f1_macro"):
            r[f"f1_vs_{base}"] = round(r["f1_macro"] / ref["f1_macro"], 4)
        out.append(r)
    return out


def summary(rows: list[dict], base: str = "student") -> dict:
    """The side-by-side report: every row with ratio columns, and which of bf16 / int8 is faster at batch 32."""
    rows = with_ratios(rows, base)
    if any(r["variant"] == "teacher" for r in rows):
        rows = with_ratios(rows, "teacher")
    result: dict[str, Any] = {"variants": rows, "base": base}
    by = {r["variant"]: r for r in rows}
    if "int8" in by and "bf16" in by:
        i, b = by["int8"]["latency_ms_b32"], by["bf16"]["latency_ms_b32"]
        result["faster_at_b32"] = "int8" if i < b else "bf16"
        result["verdict"] = (
            f"at batch 32 {result['faster_at_b32']} is faster on this CPU: int8 {i} ms/example, bf16 {b} ms/example"
            f" ({_cpu_note()})"
        )
    return result


def _cpu_note() -> str:
    flags = ""
    with contextlib.suppress(OSError):
        flags = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    feats = [f for f in ("amx_bf16", "avx512_bf16", "avx512_vnni", "avx512f", "avx2") if f" {f}" in flags]
    return f"{torch.get_num_threads()} threads; CPU features: {', '.join(feats) or 'unknown'}"


def summary_markdown(result: dict) -> str:
    """The Markdown of :func:`summary`."""
    rows = result["variants"]
    base = result["base"]
    cols = list(COLUMNS) + [
        (f"speedup_b32_vs_{base}", f"speed-up b32 vs {base}"),
        (f"size_vs_{base}", f"size vs {base}"),
        (f"f1_vs_{base}", f"F1 vs {base}"),
    ]
    if any(r["variant"] == "teacher" for r in rows):
        cols += [("speedup_b32_vs_teacher", "speed-up b32 vs teacher"), ("f1_vs_teacher", "F1 vs teacher")]
    lines = ["# Deployment variants", "", _scope(rows), "", _table(rows, cols), ""]
    if "verdict" in result:
        lines += [f"**bf16 or int8:** {result['verdict']}.", ""]
    return "\n".join(lines)


def _scope(rows: list[dict]) -> str:
    """What the variants were measured on: the data, its examples, and ``--limit`` when one cut it short."""
    first = rows[0] if rows else {}
    data = first.get("data") or "no labelled data"
    limit = first.get("limit")
    cut = f" (cut to `--limit {limit}`)" if limit else " (all of it)"
    return f"Measured on {first.get('examples', 0)} examples of {data}{cut}."


def write_summary(out: Path, result: dict) -> None:
    """The top-level ``report.json`` and ``report.md`` of :func:`summary`, in ``out`` (atomically)."""
    atomic_write_text(out / "report.json", json.dumps(result, indent=2, sort_keys=True) + "\n")
    atomic_write_text(out / "report.md", summary_markdown(result))
