"""Tasks with a label set (classification, tagging): the set, its ids, and checks of every row's labels.

A subclass says how to read one row's label cell (:meth:`LabelledDataModule.row_labels`) and how to order the
labels found (:meth:`LabelledDataModule.order_labels`). The label set comes from ``labels`` or from the training
split; a validation/test label outside it is an error naming the file, the row and the value. The CLI links
``num_labels`` and ``label_names`` into the model (see :mod:`domainbert.data.contract`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from domainbert.data.base import TaskDataModule
from domainbert.data.batching import Collator, EncodedRows, EpochSampler
from domainbert.errors import DomainBertError

# the batching classes lived here before domainbert.data.batching; kept importable from here
__all__ = ["Collator", "EncodedRows", "EpochSampler", "LabelledDataModule", "natural_sorted"]


def natural_sorted(values) -> list[str]:
    """Sort label strings, numerically when they all look like integers."""
    values = list(values)
    if values and all(re.fullmatch(r"-?\d+", v) for v in values):
        return sorted(values, key=int)
    return sorted(values)


class LabelledDataModule(TaskDataModule):
    """Base of the datamodules with a label set (see the module docstring).

    Args:
        labels: the label set, in id order; by default every label of the training split, in the task's order
            (classification: sorted; tagging: ``O``, then ``B-``/``I-`` per type).
    """

    def __init__(self, labels: list[str] | None = None, **kwargs) -> None:
        """Keep the label set, if given, and hand the other options to :class:`TaskDataModule`."""
        if labels is not None:
            labels = [str(x) for x in labels]
            dupes = sorted({x for x in labels if labels.count(x) > 1})
            if not labels or dupes:
                raise DomainBertError(f"data.labels: expected distinct label names, got {labels}")
        super().__init__(**kwargs)
        self._label_names = labels
        self._label_source = "data.labels" if labels else f"the training split {self.paths['train']}"

    # -- to be defined by the task --------------------------------------------------------------------
    def row_labels(self, value) -> list[str]:
        """The label strings in one row's label cell; raise ``ValueError`` for a cell of the wrong kind."""
        raise NotImplementedError

    def order_labels(self, found: set[str]) -> list[str]:
        """The label list built from the labels found in the training split."""
        return natural_sorted(found)

    # -- the label set --------------------------------------------------------------------------------
    @property
    def label_names(self) -> list[str] | None:
        """The label set: ``labels`` if given, else every label seen in the training split.

        None while unknown (no training split and no ``labels``): the model then brings its own label set
        (``model.init_from`` an export with ``id2label``), handed over through :meth:`use_labels`.
        """
        if self._label_names is None:
            if not self.paths["train"]:
                return None
            found: set[str] = set()
            for row, value in enumerate(self.raw("train")[self.label_column], 1):
                found.update(self.labels_of_row("train", row, value))
            if not found:
                raise DomainBertError(f"{self.paths['train']}: column {self.label_column!r} holds no labels")
            self._label_names = self.order_labels(found)
        return list(self._label_names)

    @property
    def num_labels(self) -> int | None:
        """The number of labels (linked into the model's ``num_labels``); None while the label set is unknown."""
        names = self.label_names
        return None if names is None else len(names)

    @property
    def label2id(self) -> dict[str, int]:
        """Label name -> id."""
        names = self.label_names
        if names is None:
            raise DomainBertError(
                "no label set: give data.train (labels are read from it) or data.labels, or a model that has one "
                "(model.init_from a fine-tuned export)"
            )
        return {name: i for i, name in enumerate(names)}

    def use_labels(self, names: Sequence[str], source: str = "the model") -> None:
        """Encode labels as ``names`` (the model's ids), e.g. a checkpoint's ``id2label`` order.

        Splits already encoded are dropped and encoded again with the new ids when next loaded.
        """
        names = [str(x) for x in names]
        if names != self._label_names:
            self._label_names = names
            self._label_source = source
            self.datasets.clear()

    # -- checks ---------------------------------------------------------------------------------------
    def check_labels(self, split: str) -> None:
        """Raise on the first label of ``split`` outside the label set, naming file, row and value."""
        ds = self.raw(split)
        if self.label_column not in ds.column_names:
            if split == "predict":
                return
            raise DomainBertError(f"{self.path(split)}: no column {self.label_column!r}")
        known = self.label2id
        for row, value in enumerate(ds[self.label_column], 1):
            if value is None:
                raise DomainBertError(f"{self.path(split)}: row {row}: column {self.label_column!r} is empty")
            for label in self.labels_of_row(split, row, value):
                if label not in known:
                    shown = ", ".join(list(known)[:20]) + (", ..." if len(known) > 20 else "")
                    raise DomainBertError(
                        f"{self.path(split)}: row {row}: label {label!r} (column {self.label_column!r}) is not in "
                        f"the label set taken from {self._label_source}: [{shown}]"
                    )

    def labels_of_row(self, split: str, row: int, value) -> list[str]:
        """:meth:`row_labels` of one cell; a cell it rejects (``ValueError``) is an error naming file and row."""
        try:
            return self.row_labels(value)
        except ValueError as err:
            raise DomainBertError(f"{self.path(split)}: row {row}: column {self.label_column!r}: {err}") from None

    def label_counts(self) -> list[int]:
        """How many training rows carry each label, in ``label_names`` order."""
        counts = dict.fromkeys(self.label2id, 0)
        for value in self.raw("train")[self.label_column]:
            for label in self.row_labels(value):
                if label in counts:
                    counts[label] += 1
        return list(counts.values())

    # -- reporting ------------------------------------------------------------------------------------
    def describe(self) -> str:
        """One line: each given split's path and row count, and the number of labels once known."""
        labels = f"; {len(self._label_names)} labels" if self._label_names else ""
        return super().describe() + labels
