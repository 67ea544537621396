"""Readings of the deployment rule's ``max_drop`` on validation rows alone: choose on one half, score on the other.

An export's ``report.json`` keeps every variant's predictions over the validation rows (``val_predictions``). This
script splits those rows in two at random, many times; on one half (A) it applies each reading of the rule under the
same ``max_ms`` and ``max_drop``, and on the other half (B) it scores what each reading picked against the variant
that half A found best. A reading keeps its promise when the pick is at most ``max_drop`` points below that variant
on rows it never saw. The readings:

- ``shown`` (the rule :mod:`domainbert.deploy.recommend` applies): the fastest whose paired 95% bootstrap interval
  against the best lies at or above ``-max_drop``;
- ``not_shown_worse``: the fastest whose interval reaches ``-max_drop`` (ship unless shown to lose more);
- ``point``: the fastest whose observed drop is at most ``max_drop``.

    python examples/benchmarks/deploy_rule_split.py runs/pipeline/minilm_debian/export --max_ms_of teacher
    python examples/benchmarks/deploy_rule_split.py EXPORT --max_ms 8.5 --max_drop 2 --splits 300

Test scores are never read. The last line holds the figures as ``key=value``: per reading, the mean drop on B
(points, negative: below), the share of splits where it is more than ``max_drop``, and the pick's mean ms/example.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import random
import sys
from pathlib import Path

import numpy as np

from domainbert.core.stats import macro_f1
from domainbert.deploy.recommend import EPSILON, POINTS, PREDICTIONS, first_within, gap, label, slower_conversions
from domainbert.errors import DomainBertError

READINGS = ("shown", "not_shown_worse", "point")


def read_rows(export: Path) -> list[dict]:
    """The variants of ``export`` (a folder or its ``report.json``) that carry validation predictions and a latency.

    Raises:
        DomainBertError: no such report, or fewer than two variants with predictions over the same rows.
    """
    path = export / "report.json" if export.is_dir() else export
    if not path.is_file():
        raise DomainBertError(f"{path}: no such file; expected an export's report.json (domainbert export --val)")
    rows = [
        r
        for r in json.loads(path.read_text()).get("variants", [])
        if r.get(PREDICTIONS) and r.get("latency_ms_b32") is not None
    ]
    if len(rows) < 2 or any(r[PREDICTIONS]["gold"] != rows[0][PREDICTIONS]["gold"] for r in rows):
        raise DomainBertError(
            f"{path}: expected two or more variants with val_predictions over the same rows (domainbert export --val)"
        )
    return rows


def half(rows: list[dict], index: list[int]) -> list[dict]:
    """``rows`` restricted to the validation rows ``index``: their predictions and macro-F1 on those rows alone."""
    out = []
    for row in rows:
        p = row[PREDICTIONS]
        k = int(p.get("labels") or max(p["gold"]) + 1)
        gold, pred = [p["gold"][i] for i in index], [p["pred"][i] for i in index]
        score = macro_f1(np.asarray(gold), np.asarray(pred), k)
        out.append({**row, "val_f1_macro": score, PREDICTIONS: {**p, "gold": gold, "pred": pred}})
    return out


def pick(rows: list[dict], reading: str, max_drop: float, max_ms: float | None, resamples: int) -> dict:
    """The variant ``reading`` ships among ``rows`` (scored on their ``val_f1_macro``).

    ``shown`` is :func:`domainbert.deploy.recommend.first_within`, the rule's own choice; the other two readings
    walk the same order (fastest first, the best always qualifying) with their own test.
    """
    allowed = [r for r in rows if max_ms is None or r["latency_ms_b32"] <= max_ms]
    if not allowed:
        raise DomainBertError(f"no variant is at most {max_ms} ms/example at batch 32")
    best = max(allowed, key=lambda r: (r["val_f1_macro"], -r["latency_ms_b32"]))
    if reading == "shown":  # the rule itself, as recommend() applies it
        return first_within(allowed, best, "val_f1_macro", "validation", max_drop, resamples)[0]
    for row in sorted(allowed, key=lambda r: (r["latency_ms_b32"], -r["val_f1_macro"])):
        if row is best:
            return row
        if reading == "point":
            if (row["val_f1_macro"] - best["val_f1_macro"]) * POINTS >= -max_drop - EPSILON * POINTS:
                return row
            continue
        found = gap(row, best, "val_f1_macro", "validation", resamples)
        if reading == "not_shown_worse":
            found = dataclasses.replace(found, low=found.high)  # the interval's top end decides
        if found.within(max_drop):
            return row
    return best


def compare(
    rows: list[dict], max_drop: float, max_ms: float | None, splits: int, resamples: int, seed: int
) -> dict[str, dict]:
    """Per reading: the pick's drop on half B below half A's best (points), how often more than ``max_drop``, its ms.

    The conversions no faster than their own model are left out first, as the rule leaves them out (latencies do not
    depend on the half).
    """
    slow = {id(r) for r in slower_conversions(rows)}
    rows = [r for r in rows if id(r) not in slow]
    n = len(rows[0][PREDICTIONS]["gold"])
    rng = random.Random(seed)
    found = {r: {"drop": [], "ms": [], "picks": collections.Counter()} for r in READINGS}
    for _ in range(splits):
        order = list(range(n))
        rng.shuffle(order)
        a, b = half(rows, sorted(order[: n // 2])), half(rows, sorted(order[n // 2 :]))
        allowed = [r for r in a if max_ms is None or r["latency_ms_b32"] <= max_ms]
        best_a = max(allowed, key=lambda r: (r["val_f1_macro"], -r["latency_ms_b32"]))["variant"]
        on_b = {r["variant"]: r["val_f1_macro"] for r in b}
        for reading in READINGS:
            chosen = pick(a, reading, max_drop, max_ms, resamples)
            found[reading]["drop"].append((on_b[chosen["variant"]] - on_b[best_a]) * POINTS)
            found[reading]["ms"].append(chosen["latency_ms_b32"])
            found[reading]["picks"][label(chosen)] += 1
    return {
        reading: {
            "drop": float(np.mean(f["drop"])),
            "over": float(np.mean(np.asarray(f["drop"]) < -max_drop - EPSILON * POINTS)),
            "ms": float(np.mean(f["ms"])),
            "picks": f["picks"].most_common(3),
        }
        for reading, f in found.items()
    }


def main(argv: list[str] | None = None) -> dict:
    """Run the comparison, print its table and the ``key=value`` line; return the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("export", type=Path, help="an export folder (domainbert export --val) or its report.json")
    parser.add_argument("--max_drop", type=float, default=1.0, help="macro-F1 points (default 1.0)")
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--max_ms", type=float, default=None, help="ms/example at batch 32 (default: no limit)")
    budget.add_argument("--max_ms_of", default=None, help="the budget is this variant's ms/example (teacher)")
    parser.add_argument("--splits", type=int, default=300, help="random halvings of the validation rows")
    parser.add_argument("--resamples", type=int, default=300, help="bootstrap resamples per interval")
    parser.add_argument("--seed", type=int, default=0, help="the halvings' seed")
    args = parser.parse_args(argv)
    rows = read_rows(args.export)
    max_ms = args.max_ms
    if args.max_ms_of is not None:
        named = [r for r in rows if r["variant"] == args.max_ms_of]
        if not named:
            raise DomainBertError(f"--max_ms_of {args.max_ms_of}: no such variant in {args.export}")
        max_ms = named[0]["latency_ms_b32"]
    n = len(rows[0][PREDICTIONS]["gold"])
    print(
        f"# {args.export}: {len(rows)} variants, {n} validation rows, {args.splits} halvings "
        f"({n // 2} rows choose, {n - n // 2} score); max_drop {args.max_drop:g}, max_ms {max_ms}"
    )
    result = compare(rows, args.max_drop, max_ms, args.splits, args.resamples, args.seed)
    print(f"| reading | drop on the other half | share over {args.max_drop:g} | ms/example | picks |")
    print("|---|---|---|---|---|")
    for reading, f in result.items():
        picks = ", ".join(f"{name} {count}" for name, count in f["picks"])
        print(f"| {reading} | {f['drop']:+.2f} | {f['over']:.2f} | {f['ms']:.2f} | {picks} |")
    figures = {f"{key}_{reading}": round(f[key], 4) for reading, f in result.items() for key in ("drop", "over", "ms")}
    print(" ".join(f"{k}={v}" for k, v in figures.items()))
    return figures


if __name__ == "__main__":
    try:
        main()
    except DomainBertError as err:
        sys.exit(f"error: {err}")
