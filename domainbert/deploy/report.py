"""The export's reports: one row per variant, each folder's ``report.json``/``report.md``, and the summary of all."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from domainbert.core.files import atomic_write_text
from domainbert.deploy.bench import weights_size
from domainbert.errors import DomainBertError

if TYPE_CHECKING:
    from domainbert.deploy.recommend import Recommendation

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


#: Row fields kept in ``report.json`` but not listed in a variant's ``report.md`` (a value per row of the data).
BULKY = frozenset({"val_predictions"})


def write_report(folder: Path, report: dict) -> None:
    """``report.json`` and ``report.md`` of one variant, in ``folder`` (atomically)."""
    atomic_write_text(folder / "report.json", json.dumps(report, indent=2, sort_keys=True) + "\n")
    extra = {k: v for k, v in report.items() if k not in dict(COLUMNS) and k not in BULKY}
    lines = [f"# {report['variant']}", "", _table([report]), ""]
    lines += [f"- **{k}:** {json.dumps(v) if not isinstance(v, str) else v}" for k, v in sorted(extra.items())]
    atomic_write_text(folder / "report.md", "\n".join(lines) + "\n")


def with_ratios(rows: list[dict], base: str) -> list[dict]:
    """Add speed-up and size columns relative to the row named ``base`` (its ``variant``)."""
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
        out.append(r)
    return out


def with_points(rows: list[dict], base: str, metric: str = "f1_macro") -> list[dict]:
    """Add ``<metric>_points_vs_<base>``: the difference from the row ``base``'s score, in points (× 100)."""
    ref = next((r for r in rows if r["variant"] == base and r.get(metric) is not None), None)
    if ref is None:
        return rows
    key = f"{metric}_points_vs_{base}"
    return [{**r, key: round((r[metric] - ref[metric]) * 100, 2)} if r.get(metric) is not None else r for r in rows]


def slower_at_b32(rows: list[dict]) -> list[str]:
    """The rows slower per example at batch 32 than at batch 1 (their ``variant``): batching does not pay for them."""
    return [
        r["variant"]
        for r in rows
        if r.get("latency_ms_b32") and r.get("latency_ms_b1") and r["latency_ms_b32"] > r["latency_ms_b1"]
    ]


#: The fields :func:`summary` derives from the other rows: left out of a joined row, and derived again.
DERIVED_PREFIXES = ("speedup_", "size_vs_", "label")


def joined_rows(folders: list[str]) -> list[dict]:
    """The rows of other exports' summaries (``<folder>/report.json``), named to sit beside this export's.

    Only each export's own model's rows are joined (not its teacher's nor its probe's, which this export measures
    itself): its fp32 row is named after its role (``larger teacher`` -> variant ``larger_teacher``), the others
    ``<role>_<format>`` (``larger_teacher_int8``); their label is ``<role> <format>`` as ever. Columns derived from
    the other export's own rows (speed-ups, sizes, points) are left out: :func:`summary` derives them again.

    Raises:
        DomainBertError: a folder without a readable summary, or whose rows' names are taken by another's.
    """
    from domainbert.deploy.recommend import slug

    out: list[dict] = []
    for folder in folders:
        path = Path(folder) / "report.json"
        try:
            variants = json.loads(path.read_text(encoding="utf-8"))["variants"]
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as err:
            raise DomainBertError(f"export --join: {path}: not an export's summary ({err})") from None
        for row in variants:
            role = row.get("role") or "model"
            if role in ("teacher", "probe"):
                continue
            name = slug(role) if row["variant"] == "student" else f"{slug(role)}_{row['variant']}"
            kept = {k: v for k, v in row.items() if not k.startswith(DERIVED_PREFIXES) and "_points_vs_" not in k}
            out.append({**kept, "variant": name, "role": role, "joined": str(folder)})
    names = [r["variant"] for r in out]
    taken = sorted({n for n in names if names.count(n) > 1})
    if taken:
        raise DomainBertError(f"export --join: two joined exports name rows {taken}; give each model its own --role")
    return out


def summary(rows: list[dict], base: str = "student", max_drop: float | None = 1.0, max_ms: float | None = None):
    """The side-by-side report: every row with its label and comparison columns, the recommendation, the verdicts.

    Args:
        rows: the variants' rows.
        base: the row the speed-up and size columns compare with (the model's own fp32 folder, ``student``).
        max_drop: the recommendation's drop limit in macro-F1 points (:func:`~domainbert.deploy.recommend.recommend`).
        max_ms: its latency limit in ms/example at batch 32.

    Returns:
        ``variants``, ``base``, ``points_vs``, ``recommendation`` (its
        :class:`~domainbert.deploy.recommend.Recommendation`: :func:`write_summary` writes its JSON), and the
        verdicts (``faster_at_b32``, ``verdict``, ``slower_at_b32``) when there are some.
    """
    from domainbert.deploy.recommend import label, recommend

    names = [r["variant"] for r in rows]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise DomainBertError(f"export: two rows are named {twice}; give a joined export's model another --role")
    rows = [{**r, "label": label(r)} for r in with_ratios(rows, base)]
    teacher = any(r["variant"] == "teacher" for r in rows)
    if teacher:
        rows = with_ratios(rows, "teacher")
    rows = with_points(rows, "teacher" if teacher else base)
    result: dict[str, Any] = {"variants": rows, "base": base, "points_vs": "teacher" if teacher else base}
    result["recommendation"] = recommend(rows, max_drop=max_drop, max_ms=max_ms)
    by = {r["variant"]: r for r in rows}
    if "int8" in by and "bf16" in by:
        i, b = by["int8"]["latency_ms_b32"], by["bf16"]["latency_ms_b32"]
        result["faster_at_b32"] = "int8" if i < b else "bf16"
        result["verdict"] = (
            f"at batch 32 {result['faster_at_b32']} is faster on this CPU: int8 {i} ms/example, bf16 {b} ms/example"
            f" ({_cpu_note()})"
        )
    slower = slower_at_b32(rows)
    if slower:
        result["slower_at_b32"] = slower
    return result


def _cpu_note() -> str:
    from domainbert.core.hardware import cpu_flags

    flags = cpu_flags()
    feats = [f for f in ("amx_bf16", "avx512_bf16", "avx512_vnni", "avx512f", "avx2") if f in flags]
    return f"{torch.get_num_threads()} threads; CPU features: {', '.join(feats) or 'unknown'}"


def summary_markdown(result: dict) -> str:
    """The Markdown of :func:`summary`: the table, the recommendation and its rule, the notes, the plot."""
    lines = ["# Deployment variants", "", *variants_markdown(result)]
    lines += recommendation_lines(result.get("recommendation"))
    if result.get("plot"):
        lines += [f"![latency against macro-F1]({result['plot']})", ""]
    return "\n".join(lines)


def variants_markdown(result: dict) -> list[str]:
    """What was measured and the table of :func:`summary`, then its notes: each a paragraph, blank lines between.

    A line that touches a table is read as one of its rows by GitHub-style renderers, so every paragraph ends with
    a blank line. The pipeline's report shows these lines too.
    """
    rows = result["variants"]
    by = {r["variant"]: r for r in rows}
    lines = [_scope(rows), "", _table(rows, _summary_columns(result)), ""]
    if "verdict" in result:
        lines += [f"**bf16 or int8:** {result['verdict']}.", ""]
    for variant in result.get("slower_at_b32", []):
        lines += [slower_note(by[variant]), ""]
    return lines


def _summary_columns(result: dict) -> list[tuple[str, str]]:
    """The summary table's columns: sizes and latencies, the scores (the one that chooses named), the ratios."""
    rows, base = result["variants"], result["base"]
    by = {r["variant"]: r for r in rows}
    base_label = by[base]["label"] if base in by else base
    cols = [("label", "variant")] + COLUMNS[1:5]
    rec = result.get("recommendation")
    validation = rec is not None and rec.split == "validation"
    if any(r.get("val_f1_macro") is not None for r in rows):
        cols.append(("val_f1_macro", "val macro-F1 (chooses)" if validation else "val macro-F1"))
    cols += [("accuracy", "test accuracy"), ("f1_macro", "test macro-F1" + (" (reported)" if validation else ""))]
    points = result.get("points_vs", base)
    points_label = by[points]["label"] if points in by else points
    cols += [(f"speedup_b32_vs_{base}", f"speed-up b32 vs {base_label}"), (f"size_vs_{base}", f"size vs {base_label}")]
    if "teacher" in by:
        cols.append(("speedup_b32_vs_teacher", "speed-up b32 vs teacher"))
    cols.append((f"f1_macro_points_vs_{points}", f"Δ test macro-F1 (points) vs {points_label}"))
    return cols


def recommendation_lines(rec: Recommendation | None) -> list[str]:
    """The recommendation's paragraph (and its warning below the probe), for the export's and pipeline's reports."""
    from domainbert.deploy.recommend import below_probe_line

    if rec is None:
        return []
    if rec.variant is None:
        return [f"**Recommended:** none: {rec.why}.", ""]
    where = f" (`{rec.path}`)" if rec.path else ""
    lines = [f"**Recommended:** **{rec.label}**{where}: {rec.why}."]
    if rec.split == "test":
        on = f" `{rec.data}`" if rec.data else ""
        lines.append(
            f"The variants have no validation scores (`--val`), so this choice is made on the export's test data{on}."
        )
    warning = below_probe_line(rec)
    if warning:
        lines.append(f"> **{warning}**.")
    return [*lines, ""]


def slower_note(row: dict) -> str:
    """The note on a row slower per example at batch 32 than at batch 1, timed in the batches ``classify`` serves.

    Such a variant gains nothing from batching on this CPU: its users may serve it one text at a time.
    """
    pad = row.get("b32_padding")
    served = "in batches of rows of similar length, as `classify` and `domainbert predict` serve them"
    padding = f"; {pad:.0%} padding" if pad is not None else ""
    return (
        f"**Note:** {row['label']} takes {row['latency_ms_b32']} ms/example at batch 32 ({served}{padding}) against "
        f"{row['latency_ms_b1']} at batch 1: batching does not speed it up on this CPU."
    )


def _scope(rows: list[dict]) -> str:
    """What the variants were measured on: the data, its examples, and ``--limit`` when one cut it short."""
    first = rows[0] if rows else {}
    data = first.get("data") or "no labelled data"
    limit = first.get("limit")
    cut = f" (cut to `--limit {limit}`)" if limit else " (all of it)"
    val = f" Validation scores on {first['val']}{' (cut likewise)' if limit else ''}." if first.get("val") else ""
    return f"Measured on {first.get('examples', 0)} examples of {data}{cut}.{val}"


def write_summary(out: Path, result: dict) -> None:
    """The top-level ``report.json``, ``report.md`` and ``tradeoff.png`` of :func:`summary`, in ``out`` (atomically)."""
    from domainbert.deploy.plot import write_plot

    rec = result.get("recommendation")
    plot = write_plot(result["variants"], out, rec.variant if rec is not None else None)
    if plot is not None:
        result["plot"] = plot.name
    written = {**result, "recommendation": rec.to_json() if rec is not None else None}
    atomic_write_text(out / "report.json", json.dumps(written, indent=2, sort_keys=True) + "\n")
    atomic_write_text(out / "report.md", summary_markdown(result))
