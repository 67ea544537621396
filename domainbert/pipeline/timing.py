"""Where a stage's seconds go: its parts, from the timestamps its run recorded, and the report's table of them.

A stage runs from ``started`` (the pipeline launches its process, or calls it in its own) to ``finished`` (the
process exited, or the call returned). Its run records wall-clock timestamps (``time.time()``, one clock for the
pipeline's process and the stage's) in its *marks*:

- ``ready``: the stage's own work begins; before it, start-up (the process's start, imports, command-line parsing,
  the model's load);
- ``end``: its work is over (its record is written); after it, ``other`` (the process's exit, memory freed);
- ``train``, ``eval``, ``export``: lists of ``[start, end]`` intervals (training from the first training batch to
  the end of training; every validation and test pass; the export of the model);
- ``work``: the part the rest of ``[ready, end]`` counts as: ``data`` for a training stage (the data module's set-up,
  tokenizing, embedding, the data loaders, up to the first training batch), and for a tool stage the part its work
  is (:data:`TOOL_PARTS`).

Where intervals overlap, evaluation wins over export, export over training (a validation pass inside training is
evaluation). The parts sum to the stage's seconds.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

#: The file of a stage's marks, in its folder (``<out>/<stage>/marks.json``), beside its log.
MARKS = "marks.json"

#: The parts of a stage, in the report's order.
PARTS = ("startup", "data", "train", "eval", "export", "other")

#: The report's column heading of each part.
HEADINGS = {
    "startup": "start-up",
    "data": "data",
    "train": "training",
    "eval": "evaluation",
    "export": "export",
    "other": "other",
}

#: The part a tool stage's work (its start-up apart) counts as, by tool: embedding, tokenizing or labelling texts is
#: data preparation; a seed soup's averaging makes its model; the export writes deployment variants.
TOOL_PARTS = {
    "probe": "data",
    "select": "data",
    "vocab": "data",
    "pseudolabel": "data",
    "soup": "train",
    "export": "export",
}

#: The intervals a stage's marks may hold, the first winning where they overlap.
INTERVALS = ("eval", "export", "train")


def _clip(spans, low: float, high: float) -> list[tuple[float, float]]:
    """The ``[start, end]`` pairs of ``spans`` cut to ``[low, high]``; empty ones left out."""
    out = []
    for start, end in spans or []:
        start, end = max(float(start), low), min(float(end), high)
        if end > start:
            out.append((start, end))
    return out


def stage_parts(marks: dict, started: float, finished: float) -> dict[str, float]:
    """The seconds of each part (:data:`PARTS`) of a stage that ran from ``started`` to ``finished``.

    Args:
        marks: the timestamps the stage's run recorded (see the module's docstring); a missing ``ready`` means no
            start-up was seen, a missing ``end`` that the work lasted to ``finished``.
        started: when the pipeline launched the stage.
        finished: when the stage's process exited (or its call returned).

    Returns:
        ``{part: seconds}`` for every part; they sum to ``finished - started``.
    """
    finished = max(finished, started)
    spans = {name: _clip(marks.get(name), started, finished) for name in INTERVALS}
    ready = min(max(float(marks.get("ready", started)), started), finished)
    end = min(max(float(marks.get("end", finished)), ready), finished)
    work = marks.get("work", "data")
    work = work if work in PARTS else "other"
    cuts = sorted({started, finished, ready, end, *(t for s in spans.values() for span in s for t in span)})
    parts = dict.fromkeys(PARTS, 0.0)
    for low, high in zip(cuts, cuts[1:]):
        mid = (low + high) / 2
        part = next((name for name in INTERVALS if any(a <= mid < b for a, b in spans[name])), None)
        if part is None:
            part = "startup" if mid < ready else work if mid < end else "other"
        parts[part] += high - low
    return parts


def rounded(parts: dict[str, float], digits: int = 1) -> dict[str, float]:
    """``parts`` rounded to ``digits`` decimals so that they still sum to their total rounded the same way.

    Each part is rounded down, and the units left over go to the parts that lost the most (largest remainders; ties
    to the earlier part in :data:`PARTS`). No part turns negative.
    """
    scale = 10**digits
    names = [p for p in PARTS if p in parts] + [p for p in parts if p not in PARTS]
    scaled = {p: max(float(parts[p]), 0.0) * scale for p in names}
    units = {p: math.floor(v + 1e-9) for p, v in scaled.items()}
    left = round(sum(scaled.values())) - sum(units.values())
    for p in sorted(names, key=lambda p: -(scaled[p] - units[p]))[: max(left, 0)]:
        units[p] += 1
    return {p: units[p] / scale for p in names}


def record_parts(marks: dict | None, started: float, finished: float) -> dict[str, float] | None:
    """A stage record's ``parts``: :func:`stage_parts` in seconds to one decimal (None without marks)."""
    if not marks:
        return None
    return rounded(stage_parts(marks, started, finished))


def stage_order(state: dict[str, dict], stages: Iterable[str] | None = None) -> list[str]:
    """The stages of ``state`` to show: ``stages`` (once each, those in ``state``), else all by when they finished."""
    if stages is not None:
        return [s for s in dict.fromkeys(stages) if s in state]
    return sorted(state, key=lambda s: float(state[s].get("finished") or math.inf))


def _minutes(seconds: float | None) -> str:
    return "–" if seconds is None else f"{seconds / 60:.1f}"


def part_lines(state: dict[str, dict], stages: Iterable[str] | None = None) -> list[str]:
    """The report's section on the stages: each stage's minutes, split into its parts, and the totals.

    Args:
        state: the pipeline's stage records (``state.json``: ``seconds``, ``parts``, ``hf`` or ``result``).
        stages: the stages to show, in this order (the pipeline's ``runner.called``); None: every stage of
            ``state``, by when it finished.

    Returns:
        Markdown lines: a heading, a sentence on the parts, and the table (``–`` where a stage recorded no parts).
    """
    names = stage_order(state, stages)
    heads = [HEADINGS[p] for p in PARTS]
    lines = [
        "## Stages and their cost",
        "",
        "Minutes of each stage, split into start-up (process start, imports, options, model load), data preparation "
        "(data set-up, tokenizing, embedding), training, evaluation (validation and test passes), export, and the "
        "rest (process exit); a tool stage's work is the part it serves (the probe's embedding is data).",
        "",
        "| stage | minutes | " + " | ".join(heads) + " | output |",
        "|---|---|" + "---|" * len(heads) + "---|",
    ]
    totals = dict.fromkeys(PARTS, 0.0)
    for name in names:
        entry = state[name]
        parts = entry.get("parts") or {}
        for p in PARTS:
            totals[p] += float(parts.get(p) or 0.0)
        cells = [_minutes(float(entry.get("seconds") or 0))]
        cells += [_minutes(float(parts.get(p) or 0.0) if parts else None) for p in PARTS]
        out = entry.get("hf") or entry.get("result") or ""
        lines.append(f"| {name} | " + " | ".join(cells) + f" | `{out}` |")
    total = sum(float(state[n].get("seconds") or 0) for n in names)
    cells = [f"**{_minutes(totals[p])}**" for p in PARTS]
    lines.append(f"| **total** | **{_minutes(total)}** | " + " | ".join(cells) + " | |")
    return [*lines, ""]
