"""A transfer set for distillation: unlabelled domain text that the teacher labels, beside the task's own rows.

A student distilled on the labelled rows alone learns only what those few thousand texts show of its teacher.
Distilling on unlabelled text from the task's domain is where the literature finds the student's accuracy: Turc
et al. 2019 ("Well-Read Students Learn Better"), TinyBERT (Jiao et al. 2020), Hinton et al. 2015. The domain
corpus a user already has for continued pretraining is such text.

:class:`TransferSet` names the corpus and how many of its documents to add; :func:`transfer_rows` reads them.
The datamodule appends them to the training split with no label (``-100``): the soft-target and hidden-state
terms of :class:`~domainbert.distill.module.DistillationModule` read every row, the hard-label term only the
labelled ones. Documents that are also a task text (training, validation or test) are left out, so that the
student never learns the teacher's answer on a row it is scored on.

Example:
    >>> TransferSet("corpus.txt.gz", documents=4000)
    TransferSet(path='corpus.txt.gz', documents=4000, text_column='text', seed=0)
    >>> TransferSet("corpus.txt.gz", documents=0)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    domainbert.errors.DomainBertError: data.transfer.documents=0: expected a positive number of documents, ...
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable
from dataclasses import dataclass

import datasets

from domainbert.data import readers
from domainbert.errors import DomainBertError

log = logging.getLogger(__name__)


@dataclass
class TransferSet:
    """Unlabelled domain text added to a distillation's training split.

    Attributes:
        path: the corpus: a ``.txt`` file (one document a line, ``.gz`` too), ``.jsonl``, ``.csv`` or Parquet,
            a glob, a folder or a list of them (as every data option reads).
        documents: how many documents: a seeded random sample of the corpus; None takes all of them.
        text_column: the corpus column holding the text (``.txt`` files have only ``text``).
        seed: the sample's seed.
    """

    path: str | list[str]
    documents: int | None = 8000
    text_column: str = "text"
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.path:
            raise DomainBertError("data.transfer.path: give the corpus file (or glob, or folder) to read")
        bad = isinstance(self.documents, bool) or not isinstance(self.documents, (int, type(None)))
        if bad or (self.documents is not None and self.documents < 1):
            raise DomainBertError(
                f"data.transfer.documents={self.documents!r}: expected a positive number of documents, or null "
                "for all of them"
            )


def as_transfer(value: TransferSet | dict | str | None) -> TransferSet | None:
    """A :class:`TransferSet` from a typed value, a mapping of its fields, or a bare corpus path."""
    if value is None or isinstance(value, TransferSet):
        return value
    if isinstance(value, str):
        return TransferSet(value)
    if isinstance(value, dict):
        unknown = sorted(set(value) - {"path", "documents", "text_column", "seed"})
        if unknown:
            raise DomainBertError(
                f"data.transfer: unknown keys {unknown} (expected path, documents, text_column, seed)"
            )
        return TransferSet(**value)
    raise DomainBertError(f"data.transfer={value!r}: expected a corpus path or {{path, documents, ...}}")


def normalised(text: str) -> str:
    """A text with its whitespace collapsed and its case folded: the key that finds a task text in the corpus."""
    return " ".join(text.split()).casefold()


def transfer_rows(
    settings: TransferSet, exclude: Iterable[str], text_column: str, label_column: str
) -> datasets.Dataset:
    """The transfer set's documents as unlabelled rows of the task: ``{text_column: text, label_column: None}``.

    Args:
        settings: the corpus and how many of its documents.
        exclude: the task's texts (every split), left out of the transfer set wherever the corpus holds them.
        text_column: the task's text column (the rows are named as the task's are).
        label_column: the task's label column (None in every row).

    Raises:
        DomainBertError: the corpus cannot be read, or holds no document that is not a task text.
    """
    ds = readers.read(settings.path, columns=[settings.text_column])
    texts = [t for t in ds[settings.text_column] if isinstance(t, str) and t.strip()]
    known = {normalised(t) for t in exclude}
    kept = [t for t in texts if normalised(t) not in known]
    if not kept:
        raise DomainBertError(
            f"data.transfer.path={settings.path}: no document in column {settings.text_column!r} that is not "
            f"already a task text ({len(texts)} non-empty documents read)"
        )
    n = len(kept) if settings.documents is None else min(settings.documents, len(kept))
    chosen = kept if n == len(kept) else random.Random(settings.seed).sample(kept, n)
    log.info(
        "transfer set: %d documents of %s (%d read, %d left out as task texts)",
        n,
        settings.path,
        len(texts),
        len(texts) - len(kept),
    )
    if settings.documents is not None and settings.documents > len(kept):
        log.warning(
            "data.transfer.documents=%d: the corpus has only %d usable documents; all of them are used",
            settings.documents,
            len(kept),
        )
    return datasets.Dataset.from_dict({text_column: chosen, label_column: [None] * n})
