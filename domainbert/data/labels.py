"""Label cells read as label names: the one home of this rule, light enough for tools that load no datamodule.

The probe reads its splits with :func:`label_text` without importing Lightning; the classification datamodule
reads training rows with the same rule.
"""

from __future__ import annotations


def label_text(value) -> str:
    """One label as text: a string, or an integer (``3`` and ``3.0`` are both ``"3"``).

    Raises:
        ValueError: for booleans, non-integral numbers, and dicts, lists or other structures.
    """
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    raise ValueError(f"expected a label name (a string) or an integer class id, found {value!r}")


def split_labels(value, separator: str | None) -> list[str]:
    """The labels of one multi-label cell: a list, or a string split on ``separator``."""
    if isinstance(value, (list, tuple)):
        return [label_text(v) for v in value]
    if separator is not None and isinstance(value, str):
        return [v.strip() for v in value.split(separator) if v.strip()]
    return [label_text(value)]
