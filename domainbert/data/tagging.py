"""Token tagging data (BIO tags): each row a list of words and a list of tags of the same length.

Each word's tag goes on its first sub-token; the other sub-tokens (and special tokens) get -100 and
are ignored by the loss and the metric. Words cut off by ``max_length`` are dropped from training and
evaluation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import datasets

from domainbert.data.labelled import LabelledDataModule
from domainbert.data.masking import IGNORE_INDEX
from domainbert.data.tags import bio_order, split_tag
from domainbert.errors import DomainBertError


@dataclass
class TaggingEncoder:
    """Tokenize pre-split words and put each word's tag id on its first sub-token (-100 elsewhere).

    Attributes:
        tokenizer: the connected fast tokenizer.
        tokens_column: the column with each row's list of words.
        tags_column: the column with each row's list of tags.
        label2id: tag -> id; None encodes no tags (predict: every word start gets 0).
        max_length: longest tokenized input; words beyond it are dropped.
        keep_word_starts: also return each row's word start positions and word count (predict).
    """

    tokenizer: Any
    tokens_column: str
    tags_column: str
    label2id: dict[str, int] | None
    max_length: int
    keep_word_starts: bool = False

    def __call__(self, batch: dict[str, list]) -> dict[str, list]:
        words = batch[self.tokens_column]
        enc = self.tokenizer(words, is_split_into_words=True, truncation=True, max_length=self.max_length)
        tags = batch.get(self.tags_column) if self.label2id is not None else None
        labels, starts = [], []
        for i in range(len(words)):
            row, first, prev = [], [], None
            for w in enc.word_ids(i):
                if w is None or w == prev:
                    row.append(IGNORE_INDEX)
                else:
                    row.append(self.label2id[tags[i][w]] if tags is not None else 0)
                    first.append(w)
                prev = w
            labels.append(row)
            starts.append(first)
        out = dict(enc)
        out["labels"] = labels
        if self.keep_word_starts:
            out["word_starts"] = starts
            out["num_words"] = [len(w) for w in words]
        return out


class TaggingDataModule(LabelledDataModule):
    """BIO-tagged words from JSONL, Parquet or ``datasets`` folders (columns of lists).

    The tag set comes from the training split (``O``, then ``B-``/``I-`` per type) unless ``labels``
    gives it; a validation or test tag outside it is an error naming the file, row and tag.
    """

    token_keys = ("labels",)
    tensor_keys = ()
    predict_by_length = True

    def __init__(self, tokens_column: str = "tokens", tags_column: str = "tags", **kwargs) -> None:
        """Configure the columns.

        Args:
            tokens_column: the column with each row's list of words.
            tags_column: the column with each row's list of BIO tags (``O``, ``B-TYPE``, ``I-TYPE``).
            **kwargs: the tag set (``labels``) and the options every task takes (split files, batching...),
                documented in :class:`~domainbert.data.labelled.LabelledDataModule` and
                :class:`~domainbert.data.base.TaskDataModule`.
        """
        super().__init__(**kwargs)
        for tag in self._label_names or ():
            try:
                split_tag(tag)
            except ValueError as err:
                raise DomainBertError(f"data.labels: {err}") from None
        self.tokens_column = tokens_column
        self.tags_column = tags_column
        self.label_column = tags_column

    def columns(self, split: str) -> list[str]:
        return [self.tokens_column] if split == "predict" else [self.tokens_column, self.tags_column]

    def row_labels(self, value) -> list[str]:
        return [str(v) for v in value or []]

    def text_rows(self, ds: datasets.Dataset) -> datasets.Dataset:
        """Rows of a ``.txt`` predict file: one sentence a line, split into words at whitespace."""
        ds = super().text_rows(ds)
        col = self.tokens_column
        return ds.map(lambda b: {col: [t.split() for t in b[col]]}, batched=True)

    def order_labels(self, found: set[str]) -> list[str]:
        return bio_order(found)

    def check_rows(self, split: str, ds: datasets.Dataset) -> None:
        path = self.path(split)
        words_col = ds[self.tokens_column]
        tags_col = ds[self.tags_column] if self.tags_column in ds.column_names else None
        for row, words in enumerate(words_col, 1):
            if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
                raise DomainBertError(
                    f"{path}: row {row}: column {self.tokens_column!r} should hold a list of words, found {words!r}"
                )
            if tags_col is None:
                continue
            tags = tags_col[row - 1]
            if not isinstance(tags, list) or len(tags) != len(words):
                n = len(tags) if isinstance(tags, list) else "no list of"
                raise DomainBertError(
                    f"{path}: row {row}: {len(words)} words but {n} tags (column {self.tags_column!r})"
                )
            for tag in tags:
                try:
                    split_tag(str(tag))
                except ValueError as err:
                    raise DomainBertError(f"{path}: row {row}: {err}") from None

    def encoder(self, split: str) -> Callable[[dict], dict]:
        predict = split == "predict"
        return TaggingEncoder(
            self.tokenizer,
            self.tokens_column,
            self.tags_column,
            None if predict else self.label2id,
            self.max_length,
            keep_word_starts=predict,
        )
