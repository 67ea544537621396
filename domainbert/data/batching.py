"""Batching for the task datamodules: a seeded per-epoch sampler, a dynamic-padding collator, on-the-fly rows.

:class:`EpochSampler` draws a fresh seeded order each epoch (optionally grouping rows of similar length) and
shards it across DDP ranks; :class:`LengthSortedSampler` groups the rows of a prediction file by length without
shuffling; :class:`Collator` pads model inputs to the longest row of a batch; :class:`EncodedRows` encodes raw rows
on access, after a per-epoch transform (training-time augmentation).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import datasets
import torch
from torch.utils.data import Dataset, DistributedSampler, Sampler
from transformers import DataCollatorWithPadding

from domainbert.data.masking import IGNORE_INDEX
from domainbert.data.windows import WINDOW_MASK

#: Rows are grouped by length within chunks of this many batches.
CHUNK_BATCHES = 50


def group_by_length(indices: Sequence[int], lengths: Sequence[int], chunk: int) -> list[int]:
    """``indices`` cut into runs of ``chunk``, each sorted by decreasing length (ties keep their order)."""
    out: list[int] = []
    for start in range(0, len(indices), chunk):
        out += sorted(indices[start : start + chunk], key=lambda i: -lengths[i])
    return out


class EpochSampler(DistributedSampler):
    """Indices in a fresh seeded order each epoch (Lightning calls :meth:`set_epoch`), sharded across ranks.

    With ``lengths``, indices are grouped by length: the shuffled order is cut into chunks of
    ``50 * batch_size``, each sorted by decreasing length, so a batch holds rows of similar length and
    pads little, while the order of batches stays random; a last batch shorter than the others (the rows left over
    when the batch size does not divide them) stays last, so every batch the data loader cuts is one group. With
    ``with_epoch`` it yields ``(index, epoch)`` pairs, for datasets that draw per-epoch augmentations.

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
        out = group_by_length(idx, self.lengths, CHUNK_BATCHES * self.batch_size * self.num_replicas)
        # shuffle whole (global) batches, so that long batches do not always come first in each chunk
        step = self.batch_size * self.num_replicas
        batches = [out[i : i + step] for i in range(0, len(out), step)]
        # the epoch's short remainder stays last: anywhere else it would shift every later batch by its size, and
        # the data loader would cut each of them across two groups of lengths
        rest = batches.pop() if batches and len(batches[-1]) < step else []
        perm = torch.randperm(len(batches), generator=g).tolist() if self.shuffle else range(len(batches))
        return [i for b in perm for i in batches[b]] + rest

    def __iter__(self) -> Iterator:
        order = self.order()
        if self.num_replicas > 1:
            order = (order * math.ceil(self.total_size / max(1, len(order))))[: self.total_size]
            order = order[self.rank : self.total_size : self.num_replicas]
        for i in order:
            yield (i, self.epoch) if self.with_epoch else i

    def __len__(self) -> int:
        return self.num_samples


class LengthSortedSampler(Sampler[int]):
    """The rows of a prediction file, grouped by length: each run of ``50 * batch_size`` rows sorted longest first.

    A batch then holds rows of similar length and pads little, as ``group_by_length`` does for training, but nothing
    is shuffled. Lightning hands each batch's row indices to the prediction writer (``batch_indices``), and
    :class:`~domainbert.core.prediction.PredictionWriter` writes the rows back in file order; since a row moves only
    within its run, putting them back holds at most one run of predictions. It is a plain ``Sampler``: under DDP,
    Lightning shares it out across ranks without repeating rows.
    """

    #: Tells the prediction writer (:func:`domainbert.core.prediction.out_of_file_order`) that rows come out of order.
    out_of_file_order = True

    def __init__(self, lengths: Sequence[int], batch_size: int) -> None:
        """Configure the order.

        Args:
            lengths: per-row lengths (token counts).
            batch_size: the batch size (sets the length of a sorted run).
        """
        self.lengths = list(lengths)
        self.chunk = CHUNK_BATCHES * max(1, batch_size)

    def __iter__(self) -> Iterator[int]:
        return iter(group_by_length(range(len(self.lengths)), self.lengths, self.chunk))

    def __len__(self) -> int:
        return len(self.lengths)


def is_windowed(row: dict) -> bool:
    """True for a row of windows (``data.long_text: windows``): its ``input_ids`` is a list of token lists."""
    ids = row.get("input_ids")
    return bool(ids) and isinstance(ids[0], list)


class Collator:
    """Dynamic padding: model inputs through ``DataCollatorWithPadding``, per-token labels with -100.

    Keys of a row:
    - the tokenizer's ``model_input_names`` are padded to the longest row of the batch;
    - ``token_keys`` (per-token labels) are padded with -100 to the same width;
    - ``tensor_keys`` (labels, start/end positions) become one tensor;
    - anything else is kept as Python values under ``batch["meta"]``, one dict per row.

    A row of windows (a classification text read in windows) keeps its windows together: see :meth:`windows`.
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

    def __call__(self, rows: list[dict]) -> dict[str, Any]:
        rows = [dict(r) for r in rows]
        if rows and is_windowed(rows[0]):
            return self.windows(rows)
        model_rows = [{k: r.pop(k) for k in self.inputs if k in r} for r in rows]
        batch = dict(self.pad(model_rows))
        width = batch["input_ids"].shape[1]
        for key in self.token_keys:
            if key in rows[0]:
                seqs = [list(r.pop(key))[:width] for r in rows]
                pad = [[IGNORE_INDEX] * (width - len(s)) for s in seqs]
                batch[key] = torch.tensor([p + s if self.left else s + p for s, p in zip(seqs, pad)], dtype=torch.long)
        return self.rest(batch, rows)

    def windows(self, rows: list[dict]) -> dict[str, Any]:
        """Rows of windows (``data.long_text: windows``): inputs of shape (texts, windows, tokens) and the mask.

        A text's windows stay in its row; all windows are padded to the longest of the batch, and rows with fewer
        windows are filled with padding windows (``pad_token_id``, attention 0), which ``window_mask`` (texts,
        windows) marks False.
        """
        counts = [len(r["input_ids"]) for r in rows]
        flat = [{k: r[k][j] for k in self.inputs if k in r} for r, n in zip(rows, counts) for j in range(n)]
        for r in rows:
            for k in self.inputs:
                r.pop(k, None)
        padded = self.pad(flat)
        mask = torch.arange(max(counts)).unsqueeze(0) < torch.tensor(counts).unsqueeze(1)
        batch: dict[str, Any] = {}
        for key, value in padded.items():
            fill = (self.pad.tokenizer.pad_token_id or 0) if key == "input_ids" else 0
            batch[key] = value.new_full((*mask.shape, value.shape[-1]), fill)
            batch[key][mask] = value
        batch[WINDOW_MASK] = mask
        return self.rest(batch, rows)

    def rest(self, batch: dict[str, Any], rows: list[dict]) -> dict[str, Any]:
        """Add the rows' ``tensor_keys`` as tensors and what is left of them as ``meta``."""
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
