"""Sequence classification data: single texts or text pairs, one label or several per row."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import datasets

from domainbert.data import token_cache
from domainbert.data.augment import Augmenter, AugmentSettings, as_settings
from domainbert.data.batching import EncodedRows
from domainbert.data.labelled import LabelledDataModule
from domainbert.data.labels import label_text, split_labels
from domainbert.data.masking import IGNORE_INDEX
from domainbert.data.transfer import TransferSet, as_transfer, transfer_rows
from domainbert.data.windows import Windows, tokenize_windows, window_settings
from domainbert.errors import DomainBertError

log = logging.getLogger(__name__)


def soft_target(value, label: str, label2id: dict[str, int]) -> list[float]:
    """A row's training target as probabilities in label-id order: ``value`` normalised, else one-hot of ``label``.

    Args:
        value: the row's soft-label cell, a mapping of label name to probability (missing names count 0), or
            None for a row with a gold label only.
        label: the row's label (used when ``value`` is None).
        label2id: label name -> id.
    """
    if value is None:
        row = [0.0] * len(label2id)
        row[label2id[label]] = 1.0
        return row
    row = [float(value.get(name) or 0.0) for name in label2id]
    total = sum(row)
    return [v / total for v in row]


def soft_label_problem(value, label2id: dict[str, int]) -> str | None:
    """What is wrong with one soft-label cell (None if nothing): it must map known labels to probabilities."""
    if value is None:
        return None
    if not isinstance(value, dict):
        return f"expected a mapping of label name to probability, found {value!r}"
    unknown = sorted(str(k) for k, v in value.items() if k not in label2id and v is not None)
    if unknown:
        return f"names labels {unknown} outside the label set"
    numbers = [v for v in value.values() if v is not None]
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 for v in numbers):
        return f"expected probabilities (numbers >= 0), found {value!r}"
    if sum(numbers) <= 0:
        return "the probabilities sum to 0"
    return None


@dataclass
class ClassificationEncoder:
    """Tokenize text (and text pairs) and turn labels into ids or multi-hot vectors; used with ``Dataset.map``.

    Attributes:
        tokenizer: the connected fast tokenizer.
        text_column: the column with the text.
        text_pair_column: the column with the second text of a pair; None for single texts.
        label_column: the column with the label(s).
        label2id: label name -> id; None encodes no labels (predict).
        multi_label: encode labels as multi-hot vectors instead of ids.
        max_length: longest tokenized input; longer ones are truncated.
        separator: for multi-label string cells, the separator between labels.
        soft_label_column: the column of soft targets (label name -> probability; None on gold rows); its rows
            train towards those probabilities, the others towards one-hot vectors of their label.
        windows: cut long texts into windows (:mod:`domainbert.data.windows`): each row then holds a list of windows
            per model input; None truncates at ``max_length``.
    """

    tokenizer: Any
    text_column: str
    text_pair_column: str | None
    label_column: str
    label2id: dict[str, int] | None
    multi_label: bool
    max_length: int
    separator: str | None
    soft_label_column: str | None = None
    windows: Windows | None = None

    def __call__(self, batch: dict[str, list]) -> dict[str, list]:
        texts = batch[self.text_column]
        if self.windows is not None:
            enc = tokenize_windows(self.tokenizer, texts, self.windows)
        else:
            pairs = batch[self.text_pair_column] if self.text_pair_column else None
            enc = dict(self.tokenizer(texts, pairs, truncation=True, max_length=self.max_length))
        if self.label2id is not None and self.label_column in batch:
            values = batch[self.label_column]
            if self.multi_label:
                n = len(self.label2id)
                hot = []
                for v in values:
                    row = [0.0] * n
                    for label in split_labels(v, self.separator):
                        row[self.label2id[label]] = 1.0
                    hot.append(row)
                enc["labels"] = hot
            elif self.soft_label_column:
                soft = batch.get(self.soft_label_column) or [None] * len(values)
                enc["labels"] = [soft_target(p, label_text(v), self.label2id) for p, v in zip(soft, values)]
            else:  # a transfer-set row has no label (see domainbert.data.transfer)
                enc["labels"] = [IGNORE_INDEX if v is None else self.label2id[label_text(v)] for v in values]
        return enc


class ClassificationDataModule(LabelledDataModule):
    """Labelled text (or text pairs) from CSV/TSV, JSONL, Parquet or ``datasets`` folders.

    The label set comes from the training split (sorted) unless ``labels`` gives it; the CLI links
    ``num_labels`` and ``label_names`` into the model. A validation or test label outside the set is
    an error naming the file, the row and the value. Under ``domainbert predict`` a batch holds rows of similar
    length (see ``TaskDataModule.sorts_predict``); the predictions are written in the file's order all the same.
    With ``long_text: windows`` a text longer than ``max_length`` is read in overlapping windows, averaged by the
    model (:mod:`domainbert.data.windows`); ``batch_size`` still counts texts.
    """

    predict_by_length = True

    def __init__(
        self,
        text_column: str = "text",
        text_pair_column: str | None = None,
        label_column: str = "label",
        soft_label_column: str | None = None,
        multi_label: bool = False,
        label_separator: str | None = None,
        augment: AugmentSettings | None = None,
        long_text: str | None = None,
        stride: int | None = None,
        max_windows: int | None = None,
        transfer: TransferSet | None = None,
        **kwargs,
    ) -> None:
        """Configure the columns and the augmentation.

        Args:
            text_column: the column with the text.
            text_pair_column: the column with the second text of a pair (sentence-pair tasks); None for single texts.
            label_column: the column with the label (multi-label: a list of labels, or a string split on
                ``label_separator``).
            soft_label_column: a training column of soft targets, e.g. a teacher's class probabilities as written by
                ``domainbert pseudolabel --soft true``: a mapping of label name to probability, or empty on rows
                with a gold label only. Those rows learn the probabilities (cross-entropy against them, the
                distillation loss of Hinton et al. 2015), the others their label. Single-label only.
            multi_label: rows may carry several labels (sigmoid outputs, multi-hot targets).
            label_separator: for multi-label string cells, the separator between labels (e.g. ``|``).
            augment: augmentation of training text, applied on the fly with its own ``augment.seed`` (see
                ``domainbert.data.augment``).
            long_text: ``truncate``: a text is cut at ``max_length`` tokens; ``windows``: a longer text is cut into
                windows of ``max_length`` tokens overlapping by ``stride``, each encoded, and the windows' pooled
                vectors averaged before the head (in training, evaluation and prediction; memory and time grow with
                the windows per batch, up to ``max_windows`` times). Not for text pairs. None (the default):
                ``windows`` when the model was fine-tuned with windows (its ``config.json`` records them, and
                their stride and cap, which are then the defaults here), else ``truncate``.
            stride: with windows, tokens of overlap between consecutive windows (default ``max_length // 4``, 32 of
                128: a text cut at a window's edge is seen whole in the next window up to about a sentence, for
                about a third more windows than without overlap).
            max_windows: with windows, the most windows read per text, the first ones (default 8: 784 tokens
                at ``max_length`` 128 and the default stride), which bounds the cost of a very long text.
            transfer: for distillation: unlabelled documents of the domain corpus appended to the training split,
                which the teacher labels (:mod:`domainbert.data.transfer`); e.g.
                ``--data.transfer.path corpus.txt.gz --data.transfer.documents 8000``. Single texts, single-label
                and without augmentation or soft labels.
            **kwargs: the label set and the options every task takes (split files, batching...), documented in
                :class:`~domainbert.data.labelled.LabelledDataModule` and :class:`~domainbert.data.base.TaskDataModule`.
        """
        super().__init__(**kwargs)
        self.text_column = text_column
        self.text_pair_column = text_pair_column
        self.label_column = label_column
        self.soft_label_column = soft_label_column
        self.multi_label = multi_label
        self.label_separator = label_separator
        self.augment = as_settings(augment)
        self.long_text, self.stride, self.max_windows = long_text, stride, max_windows
        self.windows = window_settings(long_text, self.max_length, stride, max_windows, text_pair_column)
        labels = self._label_names
        if labels is not None and len(labels) < 2 and not multi_label:
            raise DomainBertError(f"data.labels={labels}: classification needs at least two labels")
        if soft_label_column and multi_label:
            raise DomainBertError("data.soft_label_column is for single-label data; unset it or data.multi_label")
        self.transfer = as_transfer(transfer)
        self._check_transfer()

    def _check_transfer(self) -> None:
        """Refuse a transfer set beside the options it does not combine with (see ``transfer``)."""
        if self.transfer is None:
            return
        clash = [
            name
            for name, on in (
                ("data.text_pair_column", self.text_pair_column),
                ("data.multi_label", self.multi_label),
                ("data.soft_label_column", self.soft_label_column),
                ("data.augment", self.augment is not None),
                ("data.long_text: windows", self.windows is not None),
            )
            if on
        ]
        if clash:
            raise DomainBertError(
                f"data.transfer adds unlabelled single texts for the teacher to label; it does not combine with "
                f"{', '.join(clash)}"
            )

    def use_windows(self, windows: Windows) -> None:
        """Read long texts in the model's ``windows`` (see ``long_text``); a stride or cap given here is kept.

        The model's stride holds for windows of its length; windows of another ``max_length`` take the default.

        Splits already encoded are dropped and encoded again when next loaded.
        """
        same = windows.max_length == self.max_length
        stride = self.stride if self.stride is not None else windows.stride if same else None  # None: the default
        cap = windows.max_windows if self.max_windows is None else self.max_windows
        ours = window_settings("windows", self.max_length, stride, cap, self.text_pair_column)
        if not same:
            log.warning(
                "the model was fine-tuned on windows of %d tokens; these are of data.max_length=%d",
                windows.max_length,
                self.max_length,
            )
        if ours != self.windows:
            log.info("long texts read in windows, as the model was fine-tuned: %s", ours)
            self.long_text, self.windows = "windows", ours
            self.datasets.clear()

    def lengths(self, ds) -> list[int]:
        """Row lengths for length grouping; with windows, a text's tokens over all its windows."""
        if self.windows is None or isinstance(ds, EncodedRows):
            return super().lengths(ds)
        return [sum(len(w) for w in row) for row in ds["input_ids"]]

    def columns(self, split: str) -> list[str]:
        cols = [self.text_column] + ([self.text_pair_column] if self.text_pair_column else [])
        if split == "predict":
            return cols
        return cols + [self.label_column] + ([self.soft_label_column] if self._soft(split) else [])

    def _soft(self, split: str) -> bool:
        """Whether ``split`` reads soft targets: the training split, when ``soft_label_column`` is set."""
        return split == "train" and bool(self.soft_label_column)

    def order_labels(self, found: set[str]) -> list[str]:
        """The sorted label set of the training split; a single class is an error (unless multi-label)."""
        names = super().order_labels(found)
        if len(names) < 2 and not self.multi_label:
            rows = len(self.raw("train"))
            raise DomainBertError(
                f"{self.paths['train']}: column {self.label_column!r} holds a single label ({names[0]!r}) in all "
                f"{rows} rows: classification needs at least two classes (check the file, or give data.labels the "
                "full set)"
            )
        return names

    def row_labels(self, value) -> list[str]:
        if value is None:
            return []
        if self.multi_label:
            return split_labels(value, self.label_separator)
        if isinstance(value, (list, tuple)):
            raise ValueError(f"holds lists of labels ({value!r}); set data.multi_label: true")
        return [label_text(value)]

    def check_rows(self, split: str, ds: datasets.Dataset) -> None:
        self.check_text(split, ds, [c for c in (self.text_column, self.text_pair_column) if c])

    def check_labels(self, split: str) -> None:
        """The label checks, and on the training split each soft-label cell (see ``soft_label_column``)."""
        super().check_labels(split)
        if not self._soft(split):
            return
        for row, value in enumerate(self.raw(split)[self.soft_label_column], 1):
            problem = soft_label_problem(value, self.label2id)
            if problem:
                raise DomainBertError(f"{self.path(split)}: row {row}: column {self.soft_label_column!r} {problem}")

    def encoder(self, split: str) -> Callable[[dict], dict]:
        return ClassificationEncoder(
            self.tokenizer,
            self.text_column,
            self.text_pair_column,
            self.label_column,
            None if split == "predict" else self.label2id,
            self.multi_label,
            self.max_length,
            self.label_separator,
            self.soft_label_column if self._soft(split) else None,
            self.windows,
        )

    def build(self, split: str):
        """Read, check and encode one split; the training split with the transfer set's rows after the task's."""
        ds = super().build(split)
        if split != "train" or self.transfer is None:
            return ds
        rows = transfer_rows(self.transfer, self.task_texts(), self.text_column, self.label_column)
        extra = token_cache.tokenize(
            rows,
            self.encoder(split),
            str(self.transfer.path),
            batched=True,
            num_proc=self.num_proc,
            remove_columns=rows.column_names,
            desc="Tokenizing the transfer set",
        )
        return datasets.concatenate_datasets([ds, extra.cast(ds.features)])

    def task_texts(self) -> list[str]:
        """The texts of every labelled split given (training, validation, test)."""
        texts: list[str] = []
        for split in ("train", "validation", "test"):
            if self.paths.get(split):
                texts += self.raw(split)[self.text_column]
        return texts

    def encode(self, split: str, ds: datasets.Dataset):
        if split == "train" and self.augment is not None:
            augmenter = Augmenter(self.augment)
            if augmenter.active:
                fields = [c for c in (self.text_column, self.text_pair_column) if c]
                return EncodedRows(ds, self.encoder(split), AugmentRow(augmenter, fields))
        return super().encode(split, ds)


@dataclass
class AugmentRow:
    """Augment the text fields of a row, seeded by the row and the epoch.

    Attributes:
        augmenter: the configured augmenter.
        fields: the text columns to augment.
    """

    augmenter: Augmenter
    fields: list[str]

    def __call__(self, row: dict, index: int, epoch: int) -> dict:
        for field in self.fields:
            row[field] = self.augmenter(row[field], self.augmenter.rng(epoch, index, field))
        return row
