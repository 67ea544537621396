"""Which variant to ship: the fastest shown to be at most ``max_drop`` macro-F1 points below the best's.

The rule, in one sentence: among the variants within ``max_ms`` (ms/example at batch 32), ship the fastest whose
95% paired bootstrap interval of (variant − best) over the validation rows lies at or above ``-max_drop`` points,
that is whose drop is shown to be at most ``max_drop``; the best itself always qualifies, so something ships
whenever a variant is within ``max_ms``.

This is the non-inferiority reading of a margin: a faster variant must show that it loses at most ``max_drop``. Its
reverse, "ship unless shown to lose more", ships whatever the rows cannot tell apart from the best, and on a few
hundred validation rows the interval between two different models spans several points; the benchmark page
``docs/benchmarks/larger-teacher.md`` measures both readings by choosing on one half of the validation rows and
scoring on the other. Variants of one model (its int8, its ONNX int8) agree on most rows, so their intervals are
narrow and they can qualify; a smaller model needs more validation rows, or a larger ``max_drop``.

A conversion (int8, ONNX int8, bf16: a row whose ``format`` is not ``fp32``) that is no faster at batch 32 than the
fp32 row of its own ``role`` is left out before the rule runs: a conversion exists to be faster, and where it is not,
its validation difference from the model it was made from is the conversion's noise, not a better model. On a CPU
with AMX, where bf16 runs the fp32 folders and the int8 kernels do not use the tiles, this keeps a teacher's int8 that
scores 0.05 points above the teacher from being chosen over the faster teacher.

The interval needs each variant's predictions over the same rows (``val_predictions``, which
``domainbert export --val`` records); a variant without them is compared by its point estimate
(``drop <= max_drop``), and the recommendation says so. The scores are the validation ones (``--val``) when every
scored row has one, else those on ``--data``, and the recommendation says which. It warns when the variant it names
scores below the frozen-embedding probe.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass
from typing import Any

from domainbert.errors import DomainBertError

#: Points per unit of macro-F1.
POINTS = 100.0
#: Slack on the drop's comparison, so that a row exactly ``max_drop`` points below the best counts as within it.
EPSILON = 1e-9
#: The row key of a variant's predictions over the validation rows: ``{"gold", "pred", "labels"}`` (label ids in the
#: file's order, and the number of labels).
PREDICTIONS = "val_predictions"
#: The bootstrap's resamples and coverage.
RESAMPLES, LEVEL = 1000, 0.95
#: The ``format`` of a model's row as trained; a row of another format and the same ``role`` is a conversion of it.
SOURCE_FORMAT = "fp32"


def check_rule(max_drop: float | None, max_ms: float | None) -> None:
    """Refuse a rule that cannot choose: a negative drop, a latency limit that is not positive."""
    if max_drop is not None and (not math.isfinite(max_drop) or max_drop < 0):
        raise DomainBertError(f"max_drop={max_drop}: expected macro-F1 points at or above 0 (or null: no limit)")
    if max_ms is not None and (not math.isfinite(max_ms) or max_ms <= 0):
        raise DomainBertError(f"max_ms={max_ms}: expected ms/example at batch 32 above 0 (or null: no limit)")


def slug(role: str) -> str:
    """A role as the stem of its variants' names: ``larger teacher`` -> ``larger_teacher``."""
    return "_".join(role.split())


def label(row: dict) -> str:
    """A row's name in the reports: its model's role, then its format (``teacher int8``); ``variant`` otherwise."""
    role, variant = row.get("role"), row["variant"]
    if not role:
        return variant
    if variant in ("student", "teacher", "probe") or variant in (role, slug(role)):
        return role
    return f"{role} {variant.removeprefix(slug(role) + '_')}"


def scored_on(rows: list[dict], metric: str = "f1_macro") -> tuple[str, str]:
    """``(the rows' key the rule reads, the split's name)``.

    ``val_<metric>`` (validation) when every scored row has it, else ``<metric>`` on the export's ``--data`` (test).
    """
    scored = [r for r in rows if r.get(metric) is not None]
    if scored and all(r.get(f"val_{metric}") is not None for r in scored):
        return f"val_{metric}", "validation"
    return metric, "test"


def rule_text(max_drop: float | None, max_ms: float | None) -> str:
    """The rule in words: ``shown to be at most 1 macro-F1 points below the best, at most 5 ms/example...``."""
    parts = []
    if max_drop is not None:
        parts.append(f"shown to be at most {max_drop:g} macro-F1 points below the best")
    if max_ms is not None:
        parts.append(f"at most {max_ms:g} ms/example at batch 32")
    return ", ".join(parts) or "any score"


@dataclass(frozen=True)
class Gap:
    """A variant's macro-F1 against the best variant's, in points, with its paired bootstrap interval if any."""

    label: str
    """The variant's label."""
    latency_ms_b32: float
    """Its ms/example at batch 32."""
    score: float
    """Its macro-F1 on the split the rule reads."""
    diff: float
    """Its score minus the best's, in points."""
    low: float | None = None
    """The interval's low end in points (None: no interval, the point estimate decides)."""
    high: float | None = None
    """The interval's high end in points."""
    rows: int | None = None
    """The rows the interval resampled."""
    held_by: str | None = None
    """The label that holds at least half of the drop, when one does (:func:`held_by`); None otherwise."""

    def within(self, max_drop: float | None) -> bool:
        """Whether the drop is shown to be at most ``max_drop`` points (no limit: always).

        Shown: the interval's low end, else the point estimate, at or above ``-max_drop``.
        """
        if max_drop is None:
            return True
        bottom = self.diff if self.low is None else self.low
        return bottom >= -max_drop - EPSILON * POINTS

    def verdict(self, max_drop: float) -> str:
        """Why it is not within ``max_drop``, in words.

        ``more than 1 points below`` (point estimate) or ``not shown to be within 1 points (its interval reaches
        -4.09)``.
        """
        if self.low is None:
            return f"more than {max_drop:g} points below"
        return f"not shown to be within {max_drop:g} points (its interval reaches {self.low:+.2f})"

    def text(self) -> str:
        """``-2.10 points [-4.52, +0.31]`` (or ``-2.10 points (no interval)``)."""
        if self.high is None:
            return f"{self.diff:+.2f} points (point estimate: no predictions to pair)"
        return f"{self.diff:+.2f} points [{self.low:+.2f}, {self.high:+.2f}]"


def gap(row: dict, best: dict, key: str, split: str, resamples: int = RESAMPLES) -> Gap:
    """``row``'s :class:`Gap` to ``best`` on ``key``: with the paired bootstrap when both carry predictions there.

    The interval (:func:`domainbert.core.stats.paired_bootstrap`, macro-F1, 95%) needs both rows' predictions over the
    same rows with the same gold labels (:data:`PREDICTIONS`), and the rule to read validation.
    """
    from domainbert.core.stats import paired_bootstrap

    found = Gap(label(row), row["latency_ms_b32"], row[key], (row[key] - best[key]) * POINTS)
    mine, theirs = row.get(PREDICTIONS), best.get(PREDICTIONS)
    if split != "validation" or not _paired(mine, theirs):
        return found
    k = max(int(mine.get("labels") or 0), int(theirs.get("labels") or 0), max(mine["gold"]) + 1)
    ci = paired_bootstrap(mine["gold"], [theirs["pred"]], [mine["pred"]], k, resamples=resamples, level=LEVEL)
    low, high = ci.low * POINTS, ci.high * POINTS
    return dataclasses.replace(found, low=low, high=high, rows=len(mine["gold"]), held_by=held_by(mine, theirs, k))


def held_by(mine: dict, theirs: dict, k: int) -> str | None:
    """The label that holds at least half of ``mine``'s macro-F1 drop below ``theirs`` on the same rows, in words.

    Macro-F1 is the mean of the labels' F1 over the labels a split has, so a label of few rows that one model
    never gets right costs it ``1 / labels`` of its score on that split alone: a 3-layer student that misses a rare
    era on validation can be 6 points under its teacher there and level on test. The line says when that is so.
    Each label's share is its F1 difference over the number of labels the rows hold (a label no row holds is left
    out), so the shares add up to the drop unless a model predicts a label the rows lack.

    Returns:
        ``label `x` holds 3.9 of the 5.9 points (F1 0.00 against 0.71 on its 4 rows)`` (the name from the
        predictions' ``names``, else ``label <id>``), or None when ``mine`` is not below ``theirs`` or no label holds
        half of the drop.

    Examples:
        >>> mine = {"gold": [0, 0, 1, 1, 2], "pred": [0, 0, 1, 1, 1], "names": ["a", "b", "c"]}
        >>> held_by(mine, {"gold": mine["gold"], "pred": [0, 0, 1, 1, 2]}, 3)
        'label `c` holds 33.3 of the 40.0 points (F1 0.00 against 1.00 on its 1 row)'
    """
    import torch
    from torchmetrics.functional.classification import multiclass_f1_score

    gold = torch.tensor(mine["gold"])
    per_label = [multiclass_f1_score(torch.tensor(m["pred"]), gold, k, average="none") for m in (mine, theirs)]
    counts = torch.bincount(gold, minlength=k)
    present = counts > 0
    share = (per_label[0] - per_label[1]) * POINTS / int(present.sum())
    share[~present] = 0.0
    total = float(share.sum())
    worst = int(share.argmin())
    if total >= 0 or float(share[worst]) > total / 2:
        return None
    names, rows = mine.get("names") or [], int(counts[worst])
    name = f"`{names[worst]}`" if worst < len(names) else str(worst)
    mine_f1, their_f1 = float(per_label[0][worst]), float(per_label[1][worst])
    return (
        f"label {name} holds {-float(share[worst]):.1f} of the {-total:.1f} points (F1 {mine_f1:.2f} against "
        f"{their_f1:.2f} on its {rows} row{'s' * (rows != 1)})"
    )


def _paired(a: dict | None, b: dict | None) -> bool:
    """Whether two predictions records cover the same rows with the same gold labels."""
    if not isinstance(a, dict) or not isinstance(b, dict) or not a.get("gold"):
        return False
    return a.get("gold") == b.get("gold") and len(a.get("pred", ())) == len(b.get("pred", ())) == len(a["gold"])


@dataclass(frozen=True)
class Best:
    """The best allowed variant: the one a faster variant's drop is measured from."""

    variant: str
    """Its variant's name (``teacher_int8``)."""
    label: str
    """Its label (``teacher int8``)."""
    score: float
    """Its macro-F1 on the split the rule reads."""


@dataclass(frozen=True)
class Top:
    """The best variant of all, when ``max_ms`` kept it out."""

    label: str
    """Its label."""
    score: float
    """Its macro-F1 on the split the rule reads."""
    latency_ms_b32: float
    """Its ms/example at batch 32, over ``max_ms``."""


@dataclass(frozen=True)
class Recommendation:
    """The variant to ship under the rule (see the module), and why; the export's ``report.json`` holds it.

    ``variant`` and the fields of the pick are None when no variant meets the rule (``why`` says why).
    """

    key: str
    """The rows' key the rule reads (``val_f1_macro`` or ``f1_macro``)."""
    split: str
    """The split the choice is made on: ``validation`` or ``test``."""
    rule: str
    """The rule in words (:func:`rule_text`)."""
    why: str
    """Why this variant, or why none (a sentence)."""
    data: str | None = None
    """The file of that split."""
    max_drop: float | None = None
    """The rule's drop limit in macro-F1 points (None: any)."""
    max_ms: float | None = None
    """The rule's latency limit in ms/example at batch 32 (None: any)."""
    variant: str | None = None
    """The pick's variant (None: no variant meets the rule)."""
    label: str | None = None
    """The pick's label."""
    path: str | None = None
    """The pick's folder."""
    score: float | None = None
    """The pick's macro-F1 on ``split``."""
    latency_ms_b32: float | None = None
    """The pick's ms/example at batch 32."""
    best: Best | None = None
    """The best allowed variant."""
    top: Top | None = None
    """The best variant of all, when ``max_ms`` kept it out."""
    interval: Gap | None = None
    """The pick's gap to the best (None: the pick is the best)."""
    faster: tuple[Gap, ...] = ()
    """The faster variants that lost, and their gaps."""
    probe: float | None = None
    """The frozen-embedding probe's score on ``split`` (None: no probe row)."""
    below_probe: bool = False
    """Whether the pick scores below the probe."""
    left_out: tuple[str, ...] = ()
    """The labels of the conversions left out as no faster than the model they were made from."""

    def to_json(self) -> dict[str, Any]:
        """Its JSON object (the export's ``report.json``'s ``recommendation``)."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any, where: str) -> Recommendation:
        """The recommendation ``data`` holds (read from ``where``).

        Raises:
            DomainBertError: a field of another type (one line naming ``where`` and the field).
        """
        from domainbert.core.json_record import from_json

        return from_json(cls, data, where)


def recommend(
    rows: list[dict], max_drop: float | None = 1.0, max_ms: float | None = None, resamples: int = RESAMPLES
) -> Recommendation:
    """The variant to ship under the rule (see the module), and why.

    Args:
        rows: the export's rows (``variant``, ``latency_ms_b32``, ``f1_macro``, maybe ``val_f1_macro`` and
            ``val_predictions``, ``role``).
        max_drop: macro-F1 points below the best that a faster variant may be, beyond noise; None: any.
        max_ms: ms/example at batch 32 allowed; None: any.
        resamples: the bootstrap's resamples.
    """
    check_rule(max_drop, max_ms)
    key, split = scored_on(rows)
    data = next((r.get("val" if split == "validation" else "data") for r in rows if r.get("data")), None)
    rule = rule_text(max_drop, max_ms)
    none = Recommendation(key, split, rule, "", data=data, max_drop=max_drop, max_ms=max_ms)
    scored = [r for r in rows if r.get("latency_ms_b32") is not None and r.get(key) is not None]
    slow = {id(r) for r in slower_conversions(scored)}
    none = dataclasses.replace(none, left_out=tuple(label(r) for r in scored if id(r) in slow))
    scored = [r for r in scored if id(r) not in slow]
    if not scored:
        why = "no variant has both a latency and a task metric (give --data with labels)"
        return dataclasses.replace(none, why=why)
    allowed = [r for r in scored if max_ms is None or r["latency_ms_b32"] <= max_ms]
    if not allowed:
        fastest = min(scored, key=lambda r: r["latency_ms_b32"])
        why = f"no variant is {rule} (the fastest, {label(fastest)}, takes {fastest['latency_ms_b32']} ms)"
        return dataclasses.replace(none, why=why)
    best = max(allowed, key=lambda r: (r[key], -r["latency_ms_b32"]))
    top = max(scored, key=lambda r: (r[key], -r["latency_ms_b32"]))
    pick, interval, faster = first_within(allowed, best, key, split, max_drop, resamples)
    probe = next((r[key] for r in rows if r.get("role") == "probe" and r.get(key) is not None), None)
    rec = dataclasses.replace(
        none,
        variant=pick["variant"],
        label=label(pick),
        path=pick.get("path"),
        score=pick[key],
        latency_ms_b32=pick["latency_ms_b32"],
        best=Best(best["variant"], label(best), best[key]),
        top=Top(label(top), top[key], top["latency_ms_b32"]) if top is not best and top[key] > best[key] else None,
        interval=interval,
        faster=tuple(faster),
        probe=probe,
        below_probe=probe is not None and pick[key] < probe,
    )
    return dataclasses.replace(rec, why=why_line(rec))


def slower_conversions(rows: list[dict]) -> list[dict]:
    """The conversions no faster at batch 32 than the fp32 row of their own ``role`` (see the module).

    A role with no fp32 row, or with more than one, leaves its conversions in.

    Examples:
        >>> rows = [
        ...     {"role": "teacher", "format": "fp32", "latency_ms_b32": 3.5},
        ...     {"role": "teacher", "format": "int8", "latency_ms_b32": 5.1},
        ...     {"role": "student", "format": "fp32", "latency_ms_b32": 1.7},
        ...     {"role": "student", "format": "onnx_int8", "latency_ms_b32": 1.2},
        ... ]
        >>> [(r["role"], r["format"]) for r in slower_conversions(rows)]
        [('teacher', 'int8')]
    """
    sources: dict[str, list[dict]] = {}
    for row in rows:
        if row.get("format") == SOURCE_FORMAT and row.get("role") and row.get("latency_ms_b32") is not None:
            sources.setdefault(row["role"], []).append(row)
    slow = []
    for row in rows:
        source = sources.get(row.get("role"), [])
        if row.get("format") in (None, SOURCE_FORMAT) or len(source) != 1 or row.get("latency_ms_b32") is None:
            continue
        if row["latency_ms_b32"] >= source[0]["latency_ms_b32"]:
            slow.append(row)
    return slow


def first_within(
    allowed: list[dict], best: dict, key: str, split: str, max_drop: float | None, resamples: int
) -> tuple[dict, Gap | None, list[Gap]]:
    """The fastest allowed row within ``max_drop`` of ``best`` (ties: the better), its gap, the faster that lost.

    The gap is None when the pick is ``best`` itself.
    """
    lost = []
    for row in sorted(allowed, key=lambda r: (r["latency_ms_b32"], -r[key])):
        if row is best:
            return row, None, lost
        found = gap(row, best, key, split, resamples)
        if found.within(max_drop):
            return row, found, lost
        lost.append(found)
    return best, None, lost


def why_line(rec: Recommendation) -> str:
    """Why the recommended variant: what it is against the best, why the faster ones and the better ones lost."""
    drop, best, interval = rec.max_drop, rec.best, rec.interval
    on = f"{rec.split} macro-F1"
    if interval is None:
        head = f"the best {on} ({rec.score:.4f}) of the variants" + (
            f" at most {rec.max_ms:g} ms/example at batch 32" if rec.max_ms is not None else ""
        )
    else:
        limit = "any drop allowed" if drop is None else f"shown to be at most {drop:g} points below"
        head = (
            f"the fastest at batch 32 whose {on} is {limit} the best ({best.label}, {best.score:.4f}): "
            f"{interval.text()}" + (f" over {interval.rows} rows" if interval.rows else "")
        )
    parts = [head]
    if rec.faster:
        closest = max(rec.faster, key=lambda g: g.score)
        parts.append(
            f"the faster {closest.label} ({closest.latency_ms_b32} ms) is {closest.text()}, {closest.verdict(drop)}"
            + (f" ({_others(len(rec.faster) - 1)} lost too)" if len(rec.faster) > 1 else "")
            + (f": {closest.held_by}" if closest.held_by else "")
        )
    if interval is not None:
        parts.append(f"the better {best.label} is slower")
    if rec.top is not None:
        top = rec.top
        parts.append(
            f"the better {top.label} ({top.score:.4f}) takes {top.latency_ms_b32} ms, over max_ms {rec.max_ms:g}"
        )
    if rec.left_out:
        parts.append(f"left out as no faster than the model each converts: {', '.join(rec.left_out)}")
    return "; ".join(parts)


def _others(count: int) -> str:
    """``1 other faster variant``, ``8 other faster variants``."""
    return f"{count} other faster variant" + ("s" if count > 1 else "")


def below_probe_line(rec: Recommendation) -> str | None:
    """The one-line warning when the recommended variant scores below the frozen-embedding probe; else None."""
    if not rec.below_probe:
        return None
    return (
        f"WARNING: the recommended {rec.label} scores {rec.score:.4f} {rec.split} macro-F1, below the "
        f"frozen-embedding probe's {rec.probe:.4f}"
    )
