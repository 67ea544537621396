"""The BIO tag scheme: parse a tag, order a tag set, find the entity spans of a tag sequence.

Tags are ``O`` (outside any entity), ``B-TYPE`` (an entity's first word) and ``I-TYPE`` (the following words);
``_`` is accepted for ``-`` (``B_PER``). The tagging datamodule checks and orders tags with these helpers, and
the entity-level F1 (:class:`domainbert.modules.metrics.EntityF1`) matches spans with :func:`get_entities`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def split_tag(tag: str) -> tuple[str, str]:
    """``"B-PER"`` -> ``("B", "PER")``; ``"O"`` -> ``("O", "")``.

    Raises:
        ValueError: a tag that is neither ``O`` nor ``B-``/``I-`` followed by a type.
    """
    if tag == "O":
        return "O", ""
    if len(tag) > 2 and tag[0] in "BI" and tag[1] in "-_":
        return tag[0], tag[2:]
    raise ValueError(f"tag {tag!r} is not in BIO form (O, B-TYPE or I-TYPE)")


def bio_order(found: Iterable[str]) -> list[str]:
    """``O`` first, then per entity type ``B-TYPE``, ``I-TYPE`` (both, even if only one was seen)."""
    types = sorted({split_tag(t)[1] for t in found if t != "O"})
    return ["O"] + [f"{p}-{t}" for t in types for p in ("B", "I")]


def get_entities(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """Entity spans ``(type, first, last)`` (inclusive) of one BIO sequence, by conlleval/seqeval rules.

    An entity starts at ``B-X``, or at ``I-X`` when the previous tag is ``O`` or of another type; it
    continues over ``I-X`` of the same type and ends before anything else.
    """
    out: list[tuple[str, int, int]] = []
    start, kind = None, ""
    for i, tag in enumerate(tags):
        prefix, typ = split_tag(tag)
        begins = prefix == "B" or (prefix == "I" and (start is None or typ != kind))
        if start is not None and (prefix == "O" or begins):
            out.append((kind, start, i - 1))
            start = None
        if begins:
            start, kind = i, typ
    if start is not None:
        out.append((kind, start, len(tags) - 1))
    return out
