"""Which variant to ship: the fastest at batch 32 among those within a macro-F1 drop (and a latency) of the best.

The rule reads every row of the export (the model's variants, the teacher's, the probe): among the rows whose
macro-F1 is at most ``max_drop`` points below the best row's, and (with ``max_ms``) whose ms/example at batch 32 is
at most ``max_ms``, the fastest at batch 32 (a tie: the better score, then the earlier row). The scores are the
validation ones (``--val``) when every scored row has one, else those on ``--data``, and the recommendation says
which. It warns when the variant it names scores below the frozen-embedding probe.
"""

from __future__ import annotations

import math

from domainbert.errors import DomainBertError

#: Points per unit of macro-F1.
POINTS = 100.0
#: Slack on the drop's comparison, so that a row exactly ``max_drop`` points below the best counts as within it.
EPSILON = 1e-9


def check_rule(max_drop: float | None, max_ms: float | None) -> None:
    """Refuse a rule that cannot choose: a negative drop, a latency limit that is not positive."""
    if max_drop is not None and (not math.isfinite(max_drop) or max_drop < 0):
        raise DomainBertError(f"max_drop={max_drop}: expected macro-F1 points at or above 0 (or null: no limit)")
    if max_ms is not None and (not math.isfinite(max_ms) or max_ms <= 0):
        raise DomainBertError(f"max_ms={max_ms}: expected ms/example at batch 32 above 0 (or null: no limit)")


def label(row: dict) -> str:
    """A row's name in the reports: its model's role, then its format (``teacher int8``); ``variant`` otherwise."""
    role, variant = row.get("role"), row["variant"]
    if not role:
        return variant
    if variant in ("student", "teacher", "probe") or variant == role:
        return role
    return f"{role} {variant.removeprefix(role + '_')}"


def scored_on(rows: list[dict], metric: str = "f1_macro") -> tuple[str, str]:
    """``(the rows' key the rule reads, the split's name)``.

    ``val_<metric>`` (validation) when every scored row has it, else ``<metric>`` on the export's ``--data`` (test).
    """
    scored = [r for r in rows if r.get(metric) is not None]
    if scored and all(r.get(f"val_{metric}") is not None for r in scored):
        return f"val_{metric}", "validation"
    return metric, "test"


def rule_text(max_drop: float | None, max_ms: float | None) -> str:
    """The rule in words: ``within 1.0 macro-F1 points of the best, at most 5 ms/example at batch 32``."""
    parts = []
    if max_drop is not None:
        parts.append(f"within {max_drop:g} macro-F1 points of the best")
    if max_ms is not None:
        parts.append(f"at most {max_ms:g} ms/example at batch 32")
    return ", ".join(parts) or "any score"


def recommend(rows: list[dict], max_drop: float | None = 1.0, max_ms: float | None = None) -> dict:
    """The variant to ship under the rule, and why.

    Args:
        rows: the export's rows (``variant``, ``latency_ms_b32``, ``f1_macro``, maybe ``val_f1_macro``, ``role``).
        max_drop: macro-F1 points below the best row's allowed; None: any.
        max_ms: ms/example at batch 32 allowed; None: any.

    Returns:
        ``variant`` (None when no row meets the rule), ``label``, ``path``, ``score``, ``latency_ms_b32``, ``key``
        and ``split`` (what it was chosen on: ``validation`` or ``test``), ``data`` (that file), ``best``
        (the best row's label and score), ``rule``, ``why`` (a sentence), and ``probe`` / ``below_probe``.
    """
    check_rule(max_drop, max_ms)
    key, split = scored_on(rows)
    timed = [r for r in rows if r.get("latency_ms_b32") is not None]
    data = next((r.get("val" if split == "validation" else "data") for r in rows if r.get("data")), None)
    out = {"variant": None, "key": key, "split": split, "data": data, "rule": rule_text(max_drop, max_ms)}
    out.update(max_drop=max_drop, max_ms=max_ms)
    scored = [r for r in timed if r.get(key) is not None]
    if not scored:
        return {**out, "why": "no variant has both a latency and a task metric (give --data with labels)"}
    best = max(scored, key=lambda r: r[key])
    out["best"] = {"variant": best["variant"], "label": label(best), "score": best[key]}
    floor = -math.inf if max_drop is None else best[key] - max_drop / POINTS - EPSILON
    within = [r for r in scored if r[key] >= floor and (max_ms is None or r["latency_ms_b32"] <= max_ms)]
    if not within:
        fastest = min(scored, key=lambda r: r["latency_ms_b32"])
        why = f"no variant is {out['rule']} (the fastest, {label(fastest)}, takes {fastest['latency_ms_b32']} ms)"
        return {**out, "why": why}
    pick = min(within, key=lambda r: (r["latency_ms_b32"], -r[key]))
    out.update(variant=pick["variant"], label=label(pick), path=pick.get("path"), score=pick[key])
    out["latency_ms_b32"] = pick["latency_ms_b32"]
    drop = (best[key] - pick[key]) * POINTS
    on = f"{split} macro-F1" + (f" ({data})" if data else "")
    out["why"] = (
        f"the fastest at batch 32 ({pick['latency_ms_b32']} ms/example) of the {len(within)} variant(s) "
        f"{out['rule']}: {on} {pick[key]:.4f}, {drop:.1f} points below the best ({label(best)}, {best[key]:.4f})"
    )
    probe = next((r for r in rows if r.get("role") == "probe" and r.get(key) is not None), None)
    out["probe"] = probe[key] if probe else None
    out["below_probe"] = bool(probe and pick[key] < probe[key])
    return out


def below_probe_line(rec: dict) -> str | None:
    """The one-line warning when the recommended variant scores below the frozen-embedding probe; else None."""
    if not rec.get("below_probe"):
        return None
    return (
        f"WARNING: the recommended {rec['label']} scores {rec['score']:.4f} {rec['split']} macro-F1, below the "
        f"frozen-embedding probe's {rec['probe']:.4f}"
    )
