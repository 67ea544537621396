"""What the task datamodules share: split files, reading and checks, tokenizing, padded batches.

A subclass names its columns and its encoding (:meth:`TaskDataModule.columns`, :meth:`TaskDataModule.encoder`,
optionally :meth:`TaskDataModule.check_rows` and :meth:`TaskDataModule.check_labels`); this base reads each
split through :func:`domainbert.data.readers.read`, tokenizes with ``Dataset.map`` (cached on disk by
``datasets``), and serves dynamically padded batches, optionally grouped by length (for prediction: see
:meth:`TaskDataModule.sorts_predict`). Tasks with a label set (classification, tagging) extend
:class:`domainbert.data.labelled.LabelledDataModule`; question answering extends this base directly.

The options every task takes (the split files, batching, tokenizing processes, seed) are the arguments of
:class:`TaskDataModule`'s constructor, documented once in its docstring. A task's constructor takes its own options
(its columns) and hands the rest up with ``**kwargs``; LightningCLI (jsonargparse) follows ``**kwargs`` into this
signature, so ``--help`` and the YAML keys (``data.init_args.batch_size``) list exactly the task's options. A task
names a shared option in its own signature only to give it another default (QA's ``batch_size`` and ``max_length``).

The tokenizer comes late: the CLI calls ``connect(tokenizer=model.tokenizer)`` after building both.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import datasets
import lightning.pytorch as L
from torch.utils.data import DataLoader

from domainbert.core.prediction import PredictionWriter
from domainbert.data import token_cache
from domainbert.data.batching import Collator, EncodedRows, EpochSampler, LengthSortedSampler
from domainbert.data.readers import is_plain_text, read
from domainbert.errors import DomainBertError

if TYPE_CHECKING:
    from domainbert.data.transfer import TransferSet
    from domainbert.data.windows import Windows

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


def check_sizes(batch_size: int, eval_batch_size: int | None, max_length: int) -> None:
    """Reject batch sizes below 1 and a ``max_length`` too short to hold any text.

    Raises:
        DomainBertError: naming the option and what it expects.
    """
    for key, size in (("batch_size", batch_size), ("eval_batch_size", eval_batch_size)):
        if size is not None and size < 1:
            raise DomainBertError(f"data.{key}={size}: expected at least 1 example per batch")
    if max_length < MIN_LENGTH:
        raise DomainBertError(
            f"data.max_length={max_length}: expected at least {MIN_LENGTH} tokens (the special tokens alone "
            "take 2 or 3; shorter inputs leave nothing to learn from)"
        )


class TaskDataModule(L.LightningDataModule):
    """Base of the task datamodules (see the module docstring); subclasses define the task.

    Args:
        train: training file(s): a path, glob, folder or saved ``datasets`` folder.
        val: validation file(s).
        test: test file(s).
        predict: file(s) for ``domainbert predict`` (a label column, if present, is kept as ``gold``), or a
            ``.txt`` file of one text a line (tagging splits it into words; not for text pairs or QA).
        batch_size: training batch size (QA: in windows).
        eval_batch_size: batch size for validation, test and predict (default: ``batch_size``).
        max_length: longest tokenized input; longer ones are truncated (tagging drops the words beyond it; QA cuts
            a long context into windows of this length, the question included).
        group_by_length: batch rows of similar length together (less padding, faster).
        num_workers: dataloader worker processes.
        num_proc: processes for tokenizing with ``Dataset.map``.
        cache_dir: ``datasets`` cache folder for the read files.
        seed: seed of the training order.
    """

    #: the column holding each row's target (label, tags or answers); subclasses set it in ``__init__``.
    label_column: str = "label"
    #: per-token label keys for the collator.
    token_keys: tuple[str, ...] = ()
    #: per-row numeric keys for the collator.
    tensor_keys: tuple[str, ...] = ("labels",)
    #: batch predict rows of similar length (:class:`LengthSortedSampler`) when a writer puts them back in file order
    #: (see :meth:`TaskDataModule.sorts_predict`); only for tasks whose ``predict_step`` returns one row per input.
    #: Validation and test rows of such a task are batched so too (see :meth:`TaskDataModule.sorts_evaluation`).
    predict_by_length: bool = False
    #: the column of each row's teacher probabilities (classification's ``soft_label_column``; None: none)
    soft_label_column: str | None = None
    #: the column of each row's second text (classification's ``text_pair_column``; None: single texts)
    text_pair_column: str | None = None
    #: the windows long texts are read in (classification's ``long_text: windows``; None: truncated)
    windows: Windows | None = None
    #: unlabelled documents added for a distillation teacher to label (classification's ``transfer``; None: none)
    transfer: TransferSet | None = None

    def __init__(
        self,
        train: str | None = None,
        val: str | None = None,
        test: str | None = None,
        predict: str | None = None,
        batch_size: int = 32,
        eval_batch_size: int | None = None,
        max_length: int = 128,
        group_by_length: bool = False,
        num_workers: int = 0,
        num_proc: int | None = None,
        cache_dir: str | None = None,
        seed: int = 0,
    ) -> None:
        """Keep the options; nothing is read before ``setup`` (or a first look at the data)."""
        super().__init__()
        check_sizes(batch_size, eval_batch_size, max_length)
        self.paths = {"train": train, "validation": val, "test": test, "predict": predict}
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

    def encoder(self, split: str) -> Callable[[dict], dict]:
        """A picklable batched function turning raw rows into model features for ``split``."""
        raise NotImplementedError

    def check_rows(self, split: str, ds: datasets.Dataset) -> None:
        """Extra checks of a raw split (wrong cell types); raise DomainBertError naming the row."""

    def check_labels(self, split: str) -> None:
        """Check the targets of a split with targets (not ``predict``); raise DomainBertError naming the row."""

    def check_text(self, split: str, ds: datasets.Dataset, columns: Sequence[str], blank: bool = True) -> None:
        """Raise naming the row when a cell of ``columns`` is not text (or, unless ``blank``, is blank)."""
        for col in columns:
            for row, value in enumerate(ds[col], 1):
                if not isinstance(value, str) or not (blank or value.strip()):
                    raise DomainBertError(
                        f"{self.path(split)}: row {row}: column {col!r} should hold text, found {value!r}"
                    )

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

    # -- Lightning hooks ------------------------------------------------------------------------------
    def setup(self, stage: str | None = None) -> None:
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
        """Tokenize with ``Dataset.map``; predict rows keep their raw columns as ``meta``.

        The result is cached on disk and shared by every stage and seed (:mod:`domainbert.data.token_cache`). A label
        column in the predict split is kept as ``gold``, beside the prediction.
        """
        if split == "predict" and self.label_column in ds.column_names and "gold" not in ds.column_names:
            ds = ds.rename_column(self.label_column, "gold")
        remove = [] if split == "predict" else ds.column_names
        return token_cache.tokenize(
            ds,
            self.encoder(split),
            self.path(split),
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
        if (split == "predict" and self.sorts_predict()) or (split != "predict" and self.sorts_evaluation(split)):
            sampler = LengthSortedSampler(self.lengths(ds), self.eval_batch_size)
            return DataLoader(ds, batch_size=self.eval_batch_size, sampler=sampler, **kwargs)
        return DataLoader(ds, batch_size=self.eval_batch_size, shuffle=False, **kwargs)

    def sorts_predict(self) -> bool:
        """Whether predict batches group rows by length (less padding, faster).

        Only for a task with :attr:`predict_by_length`, and only when the trainer's predictions go to a writer that
        writes them in file order (``restores_file_order``: :class:`~domainbert.core.prediction.PredictionWriter`, which
        ``domainbert predict`` always has). Predictions that ``trainer.predict`` returns to the caller, or that
        another writer receives, come in file order, as they always did.
        """
        if not self.predict_by_length or self.trainer is None:
            return False
        return any(isinstance(cb, PredictionWriter) and cb.restores_file_order for cb in self.trainer.callbacks)

    def sorts_evaluation(self, split: str) -> bool:
        """Whether ``validation``/``test`` batches group rows by length (less padding, faster).

        Only for a task with :attr:`predict_by_length`, and only when the trainer evaluates every batch
        (``limit_val_batches``/``limit_test_batches`` of 1.0): a limited pass keeps a file-order sample. Accuracy and
        F1 do not depend on the batches; a loss that averages within a batch (tagging's token mean, class weights)
        moves by the batching, as it does between batch sizes. Test predictions are put back in file order
        (:func:`domainbert.core.prediction.in_file_order`).
        """
        limit = getattr(self.trainer, "limit_val_batches" if split == "validation" else "limit_test_batches", 1.0)
        return self.predict_by_length and (limit is None or (isinstance(limit, float) and limit == 1.0))

    def lengths(self, ds) -> list[int]:
        """Row lengths for length grouping (token counts, or word counts of raw text)."""
        if isinstance(ds, EncodedRows):
            skip = {self.label_column, self.soft_label_column}
            cols = [c for c in self.columns("train") if c not in skip]
            return [sum(len(str(r[c]).split()) for c in cols if r.get(c)) for r in ds.raw]
        return [len(x) for x in ds["input_ids"]]

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", train=True)

    def val_dataloader(self):
        if not self.paths["validation"]:
            return []
        return self._loader("validation")

    def test_dataloader(self) -> DataLoader:
        return self._loader("test")

    def predict_dataloader(self) -> DataLoader:
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
        return f"{type(self).__name__}: " + ", ".join(parts)
