"""What the labelled datamodules share: split files, the label set, checks, padding and batching.

A subclass names its columns and label handling (:meth:`LabelledDataModule.columns`,
:meth:`LabelledDataModule.row_labels`, :meth:`LabelledDataModule.encoder`); this base reads each split
through :func:`domainbert.data.readers.read`, takes the label set from the training split (or from
``labels``), rejects a validation/test label outside it with the file, row and value, tokenizes with
``Dataset.map`` (cached on disk by ``datasets``), and serves dynamically padded batches, optionally
grouped by length.

The tokenizer comes late: the CLI calls ``connect(tokenizer=model.tokenizer)`` after building both.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import datasets
import lightning.pytorch as L
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler
from transformers import DataCollatorWithPadding

from domainbert.data.readers import is_plain_text, read
from domainbert.errors import DomainBertError

log = logging.getLogger(__name__)

#: the shortest ``max_length`` accepted: the special tokens plus a few tokens of text.
MIN_LENGTH = 8

#: split name -> the constructor argument holding its path.
SPLIT_ARGS = {"train": "train", "validation": "val", "test": "test", "predict": "predict"}
STAGE_SPLITS = {
    "fit": ("train", "validation"),
    "validate": ("validation",),
    "test": ("test",),
    "predict": ("predict",),
}


def natural_sorted(values) -> list[str]:
    """Sort label strings, numerically when they all look like integers."""
    values = list(values)
    if values and all(re.fullmatch(r"-?\d+", v) for v in values):
        return sorted(values, key=int)
    return sorted(values)


# -- batching -----------------------------------------------------------------------------------------


class EpochSampler(DistributedSampler):
    """Indices in a fresh seeded order each epoch (Lightning calls :meth:`set_epoch`), sharded across ranks.

    With ``lengths``, indices are grouped by length: the shuffled order is cut into chunks of
    ``50 * batch_size``, each sorted by decreasing length, so a batch holds rows of similar length and
    pads little, while the order of batches stays random. With ``with_epoch`` it yields
    ``(index, epoch)`` pairs, for datasets that draw per-epoch augmentations.

    Under DDP every rank computes the same global order and takes every ``num_replicas``-th index from its
    rank on (as ``DistributedSampler`` does; the order is padded by repeating its head to a multiple of the
    world size). It *is* a ``DistributedSampler``, so Lightning neither wraps it (a wrapper would swallow
    ``set_epoch``, giving every epoch the same order) nor shuffles it again.
    """

    def __init__(
        self,
        size: int,
        seed: int = 0,
        shuffle: bool = True,
        lengths: Sequence[int] | None = None,
        batch_size: int = 1,
        with_epoch: bool = False,
        num_replicas: int | None = None,
        rank: int | None = None,
    ) -> None:
        """Configure the order.

        Args:
            size: number of rows.
            seed: base seed; epoch ``e`` uses ``seed + e``.
            shuffle: shuffle (else keep file order).
            lengths: per-row lengths, to group rows of similar length.
            batch_size: the batch size (sets the grouping chunk).
            with_epoch: yield ``(index, epoch)`` instead of ``index``.
            num_replicas: number of ranks (default: the initialised process group's world size, else 1).
            rank: this rank (default: the process group's rank, else 0).
        """
        dist_on = torch.distributed.is_available() and torch.distributed.is_initialized()
        self.num_replicas = num_replicas or (torch.distributed.get_world_size() if dist_on else 1)
        self.rank = rank if rank is not None else (torch.distributed.get_rank() if dist_on else 0)
        self.size = size
        self.seed = seed
        self.shuffle = shuffle
        self.lengths = list(lengths) if lengths is not None else None
        self.batch_size = max(1, batch_size)
        self.with_epoch = with_epoch
        self.epoch = 0
        self.drop_last = False
        self.num_samples = math.ceil(size / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas

    def set_epoch(self, epoch: int) -> None:
        """Use the order of ``epoch``."""
        self.epoch = epoch

    def order(self) -> list[int]:
        """The indices of the current epoch, in global order (all ranks)."""
        g = torch.Generator().manual_seed(self.seed + self.epoch)
        idx = torch.randperm(self.size, generator=g).tolist() if self.shuffle else list(range(self.size))
        if self.lengths is None:
            return idx
        chunk = 50 * self.batch_size * self.num_replicas
        out: list[int] = []
        for start in range(0, len(idx), chunk):
            out += sorted(idx[start : start + chunk], key=lambda i: -self.lengths[i])
        # shuffle whole (global) batches, so that long batches do not always come first in each chunk
        step = self.batch_size * self.num_replicas
        batches = [out[i : i + step] for i in range(0, len(out), step)]
        perm = torch.randperm(len(batches), generator=g).tolist() if self.shuffle else range(len(batches))
        return [i for b in perm for i in batches[b]]

    def __iter__(self) -> Iterator:
        order = self.order()
        if self.num_replicas > 1:
            order = (order * math.ceil(self.total_size / max(1, len(order))))[: self.total_size]
            order = order[self.rank : self.total_size : self.num_replicas]
        for i in order:
            yield (i, self.epoch) if self.with_epoch else i

    def __len__(self) -> int:
        return self.num_samples


class Collator:
    """Dynamic padding: model inputs through ``DataCollatorWithPadding``, per-token labels with -100.

    Keys of a row:
    - the tokenizer's ``model_input_names`` are padded to the longest row of the batch;
    - ``token_keys`` (per-token labels) are padded with -100 to the same width;
    - ``tensor_keys`` (labels, start/end positions) become one tensor;
    - anything else is kept as Python values under ``batch["meta"]``, one dict per row.
    """

    def __init__(
        self,
        tokenizer,
        token_keys: Sequence[str] = (),
        tensor_keys: Sequence[str] = ("labels",),
        pad_to_multiple_of: int | None = None,
    ) -> None:
        """Build the collator.

        Args:
            tokenizer: the connected fast tokenizer.
            token_keys: per-token label keys, padded with -100.
            tensor_keys: per-row numeric keys stacked into tensors.
            pad_to_multiple_of: round the padded width up to a multiple of this.
        """
        self.inputs = list(tokenizer.model_input_names)
        self.pad = DataCollatorWithPadding(tokenizer, pad_to_multiple_of=pad_to_multiple_of, return_tensors="pt")
        self.left = tokenizer.padding_side == "left"
        self.token_keys = list(token_keys)
        self.tensor_keys = list(tensor_keys)

    def __call__(self, rows: list[dict]) -> dict[str, Any]:  # noqa: D102
        rows = [dict(r) for r in rows]
        model_rows = [{k: r.pop(k) for k in self.inputs if k in r} for r in rows]
        batch = dict(self.pad(model_rows))
        width = batch["input_ids"].shape[1]
        for key in self.token_keys:
            if key in rows[0]:
                seqs = [list(r.pop(key))[:width] for r in rows]
                pad = [[-100] * (width - len(s)) for s in seqs]
                batch[key] = torch.tensor([p + s if self.left else s + p for s, p in zip(seqs, pad)], dtype=torch.long)
        for key in self.tensor_keys:
            if key in rows[0]:
                batch[key] = torch.tensor([r.pop(key) for r in rows])
        if rows and rows[0]:
            batch["meta"] = rows
        return batch


class EncodedRows(Dataset):
    """Rows encoded on access, after an optional per-epoch transform (training-time augmentation)."""

    def __init__(self, raw: datasets.Dataset, encoder: Callable, transform: Callable | None = None) -> None:
        """Wrap raw rows.

        Args:
            raw: the raw split.
            encoder: the batched encoder used with ``Dataset.map`` (a dict of lists in, a dict of lists out).
            transform: ``transform(row, index, epoch) -> row``, applied before encoding.
        """
        self.raw = raw
        self.encoder = encoder
        self.transform = transform

    def __len__(self) -> int:
        return len(self.raw)

    def __getitem__(self, key) -> dict:
        index, epoch = key if isinstance(key, tuple) else (key, 0)
        row = dict(self.raw[int(index)])
        if self.transform is not None:
            row = self.transform(row, int(index), int(epoch))
        enc = self.encoder({k: [v] for k, v in row.items()})
        return {k: v[0] for k, v in enc.items()}


# -- the datamodule base ------------------------------------------------------------------------------


class LabelledDataModule(L.LightningDataModule):
    """Base of the labelled datamodules (see the module docstring); subclasses define the task."""

    #: the column holding each row's label(s); subclasses set it in ``__init__``.
    label_column: str = "label"
    #: per-token label keys for the collator.
    token_keys: tuple[str, ...] = ()
    #: per-row numeric keys for the collator.
    tensor_keys: tuple[str, ...] = ("labels",)

    def __init__(
        self,
        train: str | None = None,
        val: str | None = None,
        test: str | None = None,
        predict: str | None = None,
        labels: list[str] | None = None,
        batch_size: int = 32,
        eval_batch_size: int | None = None,
        max_length: int = 128,
        group_by_length: bool = False,
        num_workers: int = 0,
        num_proc: int | None = None,
        cache_dir: str | None = None,
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.paths = {"train": train, "validation": val, "test": test, "predict": predict}
        if labels is not None:
            labels = [str(x) for x in labels]
            dupes = sorted({x for x in labels if labels.count(x) > 1})
            if not labels or dupes:
                raise DomainBertError(f"data.labels: expected distinct label names, got {labels}")
        self._label_names = labels
        self._label_source = "data.labels" if labels else f"the training split {train}"
        for key, size in (("batch_size", batch_size), ("eval_batch_size", eval_batch_size)):
            if size is not None and size < 1:
                raise DomainBertError(f"data.{key}={size}: expected at least 1 example per batch")
        if max_length < MIN_LENGTH:
            raise DomainBertError(
                f"data.max_length={max_length}: expected at least {MIN_LENGTH} tokens (the special tokens alone take "
                "2 or 3; shorter inputs leave nothing to learn from)"
            )
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size or batch_size
        self.max_length = max_length
        self.group_by_length = group_by_length
        self.num_workers = num_workers
        self.num_proc = num_proc
        self.cache_dir = cache_dir
        self.seed = seed
        self._tokenizer = None
        self._raw: dict[str, datasets.Dataset] = {}
        self.datasets: dict[str, Any] = {}

    # -- late binding ---------------------------------------------------------------------------------
    def connect(self, tokenizer) -> None:
        """Receive the model's tokenizer (called by the CLI once model and data exist)."""
        if tokenizer is not self._tokenizer:
            self.datasets.clear()
        self._tokenizer = tokenizer

    @property
    def tokenizer(self):
        """The connected tokenizer."""
        if self._tokenizer is None:
            raise DomainBertError(
                f"{type(self).__name__} has no tokenizer: run it through `domainbert fit/test/predict`, which "
                "connects the model's tokenizer, or call datamodule.connect(tokenizer=...) first"
            )
        return self._tokenizer

    # -- to be defined by the task --------------------------------------------------------------------
    def columns(self, split: str) -> list[str]:
        """Columns a split must have (the label column is not required for ``predict``)."""
        raise NotImplementedError

    def row_labels(self, value) -> list[str]:
        """The label strings in one row's label cell; raise ``ValueError`` for a cell of the wrong kind."""
        raise NotImplementedError

    def order_labels(self, found: set[str]) -> list[str]:
        """The label list built from the labels found in the training split."""
        return natural_sorted(found)

    def encoder(self, split: str) -> Callable[[dict], dict]:
        """A picklable batched function turning raw rows into model features for ``split``."""
        raise NotImplementedError

    def check_rows(self, split: str, ds: datasets.Dataset) -> None:
        """Extra checks of a raw split (wrong cell types); raise DomainBertError naming the row."""

    # -- reading --------------------------------------------------------------------------------------
    def path(self, split: str) -> str:
        """The path given for ``split``, or a clear error naming the option to set."""
        path = self.paths.get(split)
        if not path:
            raise DomainBertError(f"no {split} data: set data.{SPLIT_ARGS[split]} (or --data.{SPLIT_ARGS[split]})")
        return path

    def raw(self, split: str) -> datasets.Dataset:
        """The raw rows of ``split``, read once; a plain-text predict file goes through :meth:`text_rows`."""
        if split not in self._raw:
            text = split == "predict" and is_plain_text(self.path(split))
            columns = () if text else self.columns(split)
            ds = read(self.path(split), columns=columns, split=split, cache_dir=self.cache_dir)
            if text:
                ds = self.text_rows(ds)
            if len(ds) == 0:
                raise DomainBertError(f"{self.path(split)}: the {split} split has no rows")
            self._raw[split] = ds
        return self._raw[split]

    def text_rows(self, ds: datasets.Dataset) -> datasets.Dataset:
        """Rows of a ``.txt`` predict file: one example a line (blank lines skipped), numbered as ``line``.

        The text goes into the task's text column; a task that needs several columns (text pairs, QA) raises.
        """
        cols = self.columns("predict")
        if len(cols) != 1:
            raise DomainBertError(
                f"{self.path('predict')}: a .txt file holds one text a line, but this task reads the columns {cols}; "
                "give data.predict as JSONL or CSV"
            )
        ds = ds.map(lambda b, idx: {"line": [i + 1 for i in idx]}, batched=True, with_indices=True)
        ds = ds.filter(lambda b: [bool(t.strip()) for t in b["text"]], batched=True)
        ds = ds.select_columns(["line", "text"])
        return ds if cols[0] == "text" else ds.rename_column("text", cols[0])

    # -- labels ---------------------------------------------------------------------------------------
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

    # -- Lightning hooks ------------------------------------------------------------------------------
    def setup(self, stage: str | None = None) -> None:  # noqa: D102
        splits = STAGE_SPLITS.get(stage or "fit", ("train", "validation"))
        for split in splits:
            if split == "validation" and stage == "fit" and not self.paths["validation"]:
                continue
            if split not in self.datasets:
                self.datasets[split] = self.build(split)

    def build(self, split: str):
        """Read, check and encode one split."""
        tokenizer = self.tokenizer
        ds = self.raw(split)
        self.check_rows(split, ds)
        if split != "predict":
            self.check_labels(split)
        limit = getattr(tokenizer, "model_max_length", None)
        if limit and limit < 10**6 and self.max_length > limit:
            raise DomainBertError(f"data.max_length={self.max_length} is beyond the tokenizer's limit of {limit}")
        return self.encode(split, ds)

    def encode(self, split: str, ds: datasets.Dataset):
        """Tokenize with ``Dataset.map`` (cached on disk); predict rows keep their raw columns as ``meta``.

        A label column in the predict split is kept as ``gold``, beside the prediction.
        """
        if split == "predict" and self.label_column in ds.column_names and "gold" not in ds.column_names:
            ds = ds.rename_column(self.label_column, "gold")
        remove = [] if split == "predict" else ds.column_names
        return ds.map(
            self.encoder(split),
            batched=True,
            num_proc=self.num_proc,
            remove_columns=remove,
            desc=f"Tokenizing {split}",
        )

    def _loader(self, split: str, train: bool = False) -> DataLoader:
        ds = self.datasets.get(split)
        if ds is None:
            self.setup({"train": "fit", "validation": "validate"}.get(split, split))
            ds = self.datasets[split]
        collate = Collator(self.tokenizer, token_keys=self.token_keys, tensor_keys=self.tensor_keys)
        kwargs: dict[str, Any] = {
            "collate_fn": collate,
            "num_workers": self.num_workers,
            "persistent_workers": self.num_workers > 0,
        }
        if train:
            lengths = self.lengths(ds) if self.group_by_length else None
            sampler = EpochSampler(
                len(ds),
                seed=self.seed,
                lengths=lengths,
                batch_size=self.batch_size,
                with_epoch=isinstance(ds, EncodedRows),
            )
            return DataLoader(ds, batch_size=self.batch_size, sampler=sampler, **kwargs)
        return DataLoader(ds, batch_size=self.eval_batch_size, shuffle=False, **kwargs)

    def lengths(self, ds) -> list[int]:
        """Row lengths for length grouping (token counts, or word counts of raw text)."""
        if isinstance(ds, EncodedRows):
            cols = [c for c in self.columns("train") if c != self.label_column]
            return [sum(len(str(r[c]).split()) for c in cols if r.get(c)) for r in ds.raw]
        return [len(x) for x in ds["input_ids"]]

    def train_dataloader(self) -> DataLoader:  # noqa: D102
        return self._loader("train", train=True)

    def val_dataloader(self):  # noqa: D102
        if not self.paths["validation"]:
            return []
        return self._loader("validation")

    def test_dataloader(self) -> DataLoader:  # noqa: D102
        return self._loader("test")

    def predict_dataloader(self) -> DataLoader:  # noqa: D102
        return self._loader("predict")

    # -- reporting ------------------------------------------------------------------------------------
    def describe(self) -> str:
        """One line: each given split's path and row count."""
        parts = []
        for split, path in self.paths.items():
            if not path:
                continue
            try:
                n = f"{len(self.raw(split)):,} rows"
            except DomainBertError:
                n = "unreadable"
            parts.append(f"{split}: {path} ({n})")
        labels = f"; {len(self._label_names)} labels" if self._label_names else ""
        return f"{type(self).__name__}: " + ", ".join(parts) + labels
