"""Unlabelled domain text for masked-LM pretraining: read, tokenize once (cached), pack into blocks."""

from __future__ import annotations

import bisect
import itertools
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path

import lightning.pytorch as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
from torchdata.stateful_dataloader import StatefulDataLoader

from domainbert.data import readers, token_cache
from domainbert.data.base import MIN_LENGTH
from domainbert.data.batching import EpochSampler
from domainbert.errors import DomainBertError

log = logging.getLogger(__name__)


class FlatTokens:
    """One long token stream over the (memory-mapped) arrow chunks of a tokenized dataset, without copying."""

    def __init__(self, column) -> None:
        """Wrap an arrow ``list<int>`` column (a ChunkedArray)."""
        self.chunks = [c.flatten().to_numpy(zero_copy_only=False) for c in column.chunks if len(c)]
        self.offsets = np.cumsum([0] + [len(c) for c in self.chunks]).tolist()

    def __len__(self) -> int:
        return self.offsets[-1]

    def slice(self, start: int, stop: int) -> np.ndarray:
        """Tokens ``start:stop`` of the stream, across chunk boundaries."""
        parts = []
        i = bisect.bisect_right(self.offsets, start) - 1
        while start < stop and i < len(self.chunks):
            lo = start - self.offsets[i]
            take = min(stop - start, len(self.chunks[i]) - lo)
            parts.append(self.chunks[i][lo : lo + take])
            start += take
            i += 1
        return np.concatenate(parts) if len(parts) != 1 else parts[0]


class PackedBlocks(Dataset):
    """Fixed blocks of ``block`` tokens cut from one stream, each wrapped as ``[CLS] ... [SEP]``.

    Documents are joined with the separator token, and the remainder of one document carries into the next
    block: no token is dropped. Only the very last block is shorter.
    """

    def __init__(self, stream: FlatTokens, max_length: int, cls_id: int, sep_id: int, token_type: bool) -> None:
        """Cut ``stream`` into blocks of ``max_length - 2`` tokens plus the two special tokens."""
        self.stream, self.block = stream, max_length - 2
        self.cls_id, self.sep_id, self.token_type = cls_id, sep_id, token_type

    def __len__(self) -> int:
        return -(-len(self.stream) // self.block)

    def __getitem__(self, i: int) -> dict:
        ids = self.stream.slice(i * self.block, min((i + 1) * self.block, len(self.stream)))
        ids = np.concatenate([[self.cls_id], ids, [self.sep_id]]).astype(np.int64)
        return {"input_ids": ids}


class LineByLine(Dataset):
    """One (truncated) document per example, for dynamic padding."""

    def __init__(self, ds) -> None:
        """Wrap a tokenized ``datasets.Dataset`` with an ``input_ids`` column."""
        self.ds = ds.with_format("numpy", columns=["input_ids"])

    def __len__(self) -> int:
        return len(self.ds)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ds[i]["input_ids"].astype(np.int64)}


class PadCollator:
    """Right-pad ``input_ids`` to the longest in the batch; add ``attention_mask`` (and ``token_type_ids``)."""

    def __init__(self, pad_id: int, token_type: bool) -> None:
        """Args: pad_id: the padding id. token_type: also emit zero ``token_type_ids``."""
        self.pad_id, self.token_type = pad_id, token_type

    def __call__(self, rows: list[dict]) -> dict:
        width = max(len(r["input_ids"]) for r in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            n = len(r["input_ids"])
            ids[i, :n] = torch.as_tensor(r["input_ids"])
            mask[i, :n] = 1
        out = {"input_ids": ids, "attention_mask": mask}
        if self.token_type:
            out["token_type_ids"] = torch.zeros_like(ids)
        return out


class CorpusTokenizer:
    """The batched tokenization of corpus documents for ``Dataset.map`` (picklable; keyed by its fields).

    ``max_length`` set: each document truncated to it, special tokens added (one document per example).
    ``max_length`` None: no special tokens, each document followed by ``sep_id`` (to be packed into blocks).
    """

    def __init__(self, tokenizer, max_length: int | None, sep_id: int) -> None:
        """Tokenize with ``tokenizer``; see the class docstring for ``max_length`` and ``sep_id``."""
        self.tokenizer, self.max_length, self.sep_id = tokenizer, max_length, sep_id

    def __call__(self, batch: dict) -> dict:
        opts = {"return_attention_mask": False, "return_token_type_ids": False, "verbose": False}
        if self.max_length is not None:
            enc = self.tokenizer(batch["text"], truncation=True, max_length=self.max_length, **opts)
            return {"input_ids": enc["input_ids"]}
        enc = self.tokenizer(batch["text"], add_special_tokens=False, **opts)
        return {"input_ids": [ids + [self.sep_id] for ids in enc["input_ids"]]}


class ResumableEpochSampler(EpochSampler):
    """An :class:`~domainbert.data.batching.EpochSampler` whose place in the epoch is saved in checkpoints.

    The order is a pure function of ``(seed, epoch)`` (sharded across DDP ranks by the parent), so an epoch
    started after a resume is the epoch an uninterrupted run draws. Each iteration is an :class:`EpochPosition`,
    whose state (the epoch and how many indices this rank handed out) ``StatefulDataLoader`` saves and Lightning
    puts in the checkpoint; restored, it continues that epoch where it stopped.
    """

    def __iter__(self) -> Iterator[int]:
        return EpochPosition(self)

    def indices(self) -> Iterator:
        """The indices of the current epoch for this rank, from the start."""
        return super().__iter__()


class EpochPosition(Iterator[int]):
    """One pass of a :class:`ResumableEpochSampler`, with ``state_dict``/``load_state_dict`` (torchdata's Stateful).

    The order is drawn at the first ``next``, from the sampler's epoch at that moment. A restored position applies
    only to the epoch it was saved in: when Lightning has moved on to the next epoch (a checkpoint saved after the
    last batch of an epoch), the pass starts that epoch from its beginning.
    """

    def __init__(self, sampler: ResumableEpochSampler) -> None:
        """Start a pass over ``sampler``'s current epoch."""
        self.sampler, self.yielded = sampler, 0
        self._it: Iterator | None = None
        self._saved_epoch: int | None = None  # the epoch of a restored position; None: the current one

    def __iter__(self) -> EpochPosition:
        return self

    def __next__(self) -> int:
        if self._it is None:
            ended = self.yielded >= len(self.sampler)
            if (self._saved_epoch is None and ended) or self._saved_epoch not in (None, self.sampler.epoch):
                self.yielded = 0
            self._it = itertools.islice(self.sampler.indices(), self.yielded, None)
        i = next(self._it)
        self.yielded += 1
        return i

    def state_dict(self) -> dict:
        """The epoch and how many of its indices (of this rank) were handed out."""
        return {"epoch": self.sampler.epoch, "yielded": self.yielded}

    def load_state_dict(self, state: dict) -> None:
        """Continue the saved epoch after its first ``state["yielded"]`` indices."""
        if not isinstance(state, dict) or not isinstance(state.get("yielded"), int):
            raise DomainBertError(f"the checkpoint's position in the training data ({state!r}): expected 'yielded'")
        self._saved_epoch = state.get("epoch")
        if self._saved_epoch is not None:
            self.sampler.set_epoch(int(self._saved_epoch))
        else:  # saved when the corpus loader shuffled with a RandomSampler (its generator state): same place, new order
            log.warning(
                "the checkpoint's position in the training data comes from an older domainbert: the run resumes "
                "after %d examples of the epoch, but this epoch's order differs from the interrupted run's",
                state["yielded"],
            )
        self.yielded, self._it = state["yielded"], None


class CorpusDataModule(L.LightningDataModule):
    """A domain corpus for masked-LM pretraining.

    Reads ``.txt`` (a document per line, or blank-line separated), ``.jsonl``/``.csv``/``.parquet`` with a text
    column, globs, folders or a saved ``datasets`` folder. Tokenizes with the model's fast tokenizer through
    ``datasets.map`` (cached on disk: a second run skips it), then packs documents into fixed blocks of
    ``max_length`` (remainders carried over, nothing dropped), or keeps one document per example with dynamic
    padding. The arrow files are memory-mapped, so corpora larger than RAM work. The tokenizer arrives through
    :meth:`connect`, called by the CLI with the model's own tokenizer.
    """

    def __init__(
        self,
        train: str | list[str],
        val: str | list[str] | None = None,
        val_ratio: float = 0.05,
        text_column: str = "text",
        text_mode: str = "line",
        max_length: int = 128,
        packing: bool = True,
        nsp: bool = False,
        batch_size: int = 32,
        num_workers: int = 0,
        num_proc: int | None = None,
        max_documents: int | None = None,
        seed: int = 0,
    ) -> None:
        """Describe the corpus; nothing is read until ``setup``.

        Args:
            train: file(s), glob(s) or folder(s) of the corpus, or a saved ``datasets`` folder.
            val: held-out file(s); when None, ``val_ratio`` of the documents are held out (deterministic in ``seed``).
            val_ratio: share of documents held out for validation when ``val`` is not given.
            text_column: the text column of JSONL/CSV/Parquet/saved data (plain text files have ``text``).
            text_mode: for ``.txt``: ``line`` (one document per line) or ``paragraph`` (blank-line separated).
            max_length: tokens per example, special tokens included.
            packing: pack documents into full blocks (fast, nothing dropped); False: one document per example,
                truncated to ``max_length``, dynamically padded.
            nsp: build sentence pairs for the ``mlm+nsp`` objective: 50% true next segments, 50% from another
                document.
            batch_size: examples per batch.
            num_workers: DataLoader worker processes.
            num_proc: processes for tokenization (``datasets.map``).
            max_documents: use at most this many documents (after shuffling; for quick runs).
            seed: seed of the split and of the shuffle.
        """
        super().__init__()
        if text_mode not in ("line", "paragraph"):
            raise DomainBertError(f"data.text_mode={text_mode!r}: expected 'line' or 'paragraph'")
        if not 0 <= val_ratio < 1:
            raise DomainBertError(f"data.val_ratio={val_ratio}: expected a share in [0, 1)")
        if batch_size < 1:
            raise DomainBertError(f"data.batch_size={batch_size}: expected at least 1 example per batch")
        if num_workers < 0:
            raise DomainBertError(f"data.num_workers={num_workers}: expected 0 (load in the main process) or more")
        if max_documents is not None and max_documents < 1:
            raise DomainBertError(f"data.max_documents={max_documents}: expected at least 1 (or null for all)")
        self.save_hyperparameters()
        self.paths = {"train": train, "validation": val}
        self.max_length, self.batch_size = max_length, batch_size
        self.tokenizer = None
        self.train_ds: Dataset | None = None
        self.val_ds: Dataset | None = None
        self._train_ids = None  # the tokenized training split's ``input_ids`` (an arrow column), for counting

    def connect(self, tokenizer) -> None:
        """Hand over the model's tokenizer (called by the CLI after instantiation)."""
        self.tokenizer = tokenizer

    def describe(self) -> str:
        """One line for model cards."""
        n_train = len(self.train_ds) if self.train_ds is not None else "?"
        n_val = len(self.val_ds) if self.val_ds is not None else "?"
        return f"{self.paths['train']} ({n_train} train / {n_val} validation blocks of {self.max_length} tokens)"

    # -- reading and tokenizing --------------------------------------------------------------------------
    def _read(self, spec):
        hp = self.hparams
        ds = readers.read(spec, columns=[hp.text_column], text_mode=hp.text_mode)
        if hp.text_column != "text":
            ds = ds.rename_column(hp.text_column, "text")
        ds = ds.select_columns(["text"])
        ds = ds.filter(lambda b: [isinstance(t, str) and t.strip() != "" for t in b["text"]], batched=True)
        if len(ds) == 0:
            raise DomainBertError(f"{spec}: the corpus has no non-empty text in column {hp.text_column!r}")
        return ds

    def _tokenize(self, ds, truncate: bool, source: str):
        fn = CorpusTokenizer(self.tokenizer, self.max_length if truncate else None, self._sep_id())
        return token_cache.tokenize(
            ds, fn, source, batched=True, remove_columns=["text"], num_proc=self.hparams.num_proc, desc="Tokenizing"
        )

    def _cls_id(self) -> int:
        t = self.tokenizer
        return t.cls_token_id if t.cls_token_id is not None else t.bos_token_id

    def _sep_id(self) -> int:
        t = self.tokenizer
        return t.sep_token_id if t.sep_token_id is not None else t.eos_token_id

    def _wrap(self, tokenized):
        token_type = "token_type_ids" in self.tokenizer.model_input_names
        if self.hparams.packing:
            stream = FlatTokens(tokenized.data.column("input_ids"))
            return PackedBlocks(stream, self.max_length, self._cls_id(), self._sep_id(), token_type)
        return LineByLine(tokenized)

    def setup(self, stage: str | None = None) -> None:
        if self.train_ds is not None:
            return
        if self.tokenizer is None:
            raise DomainBertError("CorpusDataModule has no tokenizer: call connect(tokenizer) before setup()")
        hp = self.hparams
        if self.max_length < MIN_LENGTH:
            raise DomainBertError(f"data.max_length={self.max_length}: expected at least {MIN_LENGTH} tokens")
        train, val = self.paths["train"], self.paths["validation"]
        docs = self._read(train)
        if val is not None:
            train_docs, val_docs = docs, self._read(val)
        elif hp.val_ratio > 0 and len(docs) >= 2:
            split = docs.train_test_split(test_size=hp.val_ratio, seed=hp.seed, shuffle=True)
            train_docs, val_docs = split["train"], split["test"]
        else:
            train_docs, val_docs = docs, None
        if hp.max_documents:
            train_docs = train_docs.shuffle(seed=hp.seed).select(range(min(hp.max_documents, len(train_docs))))
        if hp.nsp:
            from domainbert.data.nsp import SentencePairs

            self.train_ds = SentencePairs(train_docs, self.tokenizer, self.max_length, seed=hp.seed)
            self.val_ds = (
                SentencePairs(val_docs, self.tokenizer, self.max_length, seed=hp.seed + 1) if val_docs else None
            )
            return
        truncate = not hp.packing
        val_source = val or f"{Path(str(train)).name} (validation part)"
        tokenized = self._tokenize(train_docs, truncate, str(train))
        self._train_ids = tokenized.data.column("input_ids")
        self.train_ds = self._wrap(tokenized)
        self.val_ds = self._wrap(self._tokenize(val_docs, truncate, str(val_source))) if val_docs is not None else None
        log.info(
            "corpus: %d train / %s validation examples of up to %d tokens",
            len(self.train_ds),
            len(self.val_ds) if self.val_ds is not None else 0,
            self.max_length,
        )

    def train_token_ids(self, max_tokens: int) -> Iterator[np.ndarray] | None:
        """About ``max_tokens`` token ids of the tokenized training split, read from its arrow column.

        The ids as tokenized, before masking: with ``packing``, each document's ids followed by the ``[SEP]`` the
        tokenization appends to it (the ``[CLS]``/``[SEP]`` of each block are added later, while loading); line by
        line, each document's ``[CLS] ... [SEP]``. Special ids are left for the caller to exclude. A split of up to
        ``max_tokens`` ids is read whole; a larger one in :data:`COUNT_SLICES` evenly spaced slices of the column
        (:func:`spaced_slices`, ``max_tokens`` ids in all), so a split in the files' order is sampled across the
        whole corpus, not only its first files. Used to count the unigram frequencies of the data
        (:func:`domainbert.core.mlm_head.unigram_bias_from_data`).

        Returns:
            The ids in arrays (views of the memory-mapped file where it can), or None before ``setup`` and for
            sentence pairs (``nsp``), which are built while loading.
        """
        if self._train_ids is None:
            return None
        return _spaced(self._train_ids, max_tokens)

    # -- loaders ----------------------------------------------------------------------------------------------
    def _loading(self) -> dict:
        """The loader arguments every split shares: batch size, collate function, workers."""
        return {"batch_size": self.batch_size, "collate_fn": self._collate(), "num_workers": self.hparams.num_workers}

    def _collate(self):
        token_type = "token_type_ids" in self.tokenizer.model_input_names
        if self.hparams.nsp:
            from domainbert.data.nsp import PairCollator

            return PairCollator(self.tokenizer.pad_token_id)
        return PadCollator(self.tokenizer.pad_token_id, token_type)

    def train_dataloader(self) -> DataLoader:
        """Batches in a seeded order per epoch (sharded under DDP), resumable mid-epoch from a checkpoint.

        The order of epoch ``e`` depends only on ``seed + e``: a run resumed from any checkpoint, in any epoch,
        sees the batches an uninterrupted run sees (:class:`ResumableEpochSampler`).
        """
        sampler = ResumableEpochSampler(len(self.train_ds), seed=self.hparams.seed)
        return StatefulDataLoader(
            self.train_ds, sampler=sampler, persistent_workers=self.hparams.num_workers > 0, **self._loading()
        )

    def val_dataloader(self) -> DataLoader | list:
        if self.val_ds is None:
            return []
        return DataLoader(self.val_ds, shuffle=False, **self._loading())

    def test_dataloader(self) -> DataLoader | list:
        return self.val_dataloader()


#: The slices :meth:`CorpusDataModule.train_token_ids` reads of a split larger than the ids it may count.
COUNT_SLICES = 256


def spaced_slices(total: int, max_tokens: int, slices: int = COUNT_SLICES) -> list[tuple[int, int]]:
    """``(start, length)`` of at most ``slices`` evenly spaced, disjoint slices of ``total``, ``max_tokens`` in all.

    The first starts at 0 and the gaps after them are as equal as whole numbers allow; all of ``total`` (one
    slice) when it is at most ``max_tokens``, none when ``max_tokens`` is 0.
    """
    if max_tokens <= 0 or total <= 0:
        return []
    if total <= max_tokens:
        return [(0, total)]
    n = min(slices, max_tokens)
    gap = total - max_tokens
    # slice i: the ids from i * max_tokens // n of those counted, shifted by its share i * gap // n of those not
    bounds = [i * max_tokens // n for i in range(n + 1)]
    return [(bounds[i] + i * gap // n, bounds[i + 1] - bounds[i]) for i in range(n)]


def _spaced(column, max_tokens: int, slices: int = COUNT_SLICES) -> Iterator[np.ndarray]:
    """The values of an arrow ``list<int>`` column (a ChunkedArray) in :func:`spaced_slices` of its flattened ids."""
    import pyarrow as pa

    flat = pa.chunked_array([chunk.flatten() for chunk in column.chunks], type=column.type.value_type)
    for start, length in spaced_slices(len(flat), max_tokens, slices):
        for chunk in flat.slice(start, length).chunks:
            yield chunk.to_numpy(zero_copy_only=False)


def documents(spec: str | Sequence[str], text_column: str = "text"):
    """The non-empty texts of a corpus, in file order (used by ``domainbert select`` and ``pseudolabel``)."""
    ds = readers.read(spec, columns=[text_column])
    for batch in ds.iter(batch_size=1000):
        for t in batch[text_column]:
            if isinstance(t, str) and t.strip():
                yield t
