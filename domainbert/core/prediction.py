"""``domainbert predict`` output: one JSON object a line per input, written atomically.

The fine-tuning modules' ``predict_step`` returns a list of dicts per batch (the input's own fields,
the predicted label or span and the probabilities); :class:`PredictionWriter` streams them into a
temporary file beside the target and renames it into place when the epoch ends, so a crash never
leaves a half-written file where a complete one is expected.

With this writer on the trainer, classification and tagging batch the rows of a predict file by length
(:class:`~domainbert.data.batching.LengthSortedSampler`, less padding); the writer puts their predictions back in
the file's order (:class:`FileOrder`, from the row indices Lightning passes with each batch).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as L
import torch
from lightning.pytorch.callbacks import BasePredictionWriter

from domainbert.core.compat import wrapped_sampler
from domainbert.errors import DomainBertError


def _plain(value: Any) -> Any:
    """JSON-ready copy: tensors and numpy scalars become numbers or lists."""
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and callable(value.item):
        return value.item()
    return value


class FileOrder:
    """Rows that arrive out of order, each with its index in the file, given back in file order as soon as they can be.

    Only the rows after a gap wait; with :class:`~domainbert.data.batching.LengthSortedSampler` that is at most one
    sorted run of rows.
    """

    def __init__(self) -> None:
        """Start at row 0."""
        self.pending: dict[int, Any] = {}
        self.next = 0

    def add(self, indices: Sequence[int], rows: Sequence[Any]) -> list[Any]:
        """Take a batch's rows (``rows[i]`` is row ``indices[i]``); return those now in order, first to last."""
        if len(indices) != len(rows):
            raise RuntimeError(f"{len(rows)} predictions for a batch of {len(indices)} rows: cannot restore the order")
        self.pending.update(zip((int(i) for i in indices), rows))
        out = []
        while self.next in self.pending:
            out.append(self.pending.pop(self.next))
            self.next += 1
        return out

    def rest(self) -> list[Any]:
        """The rows still waiting (rows before them never came: another DDP rank's), in index order."""
        out = [self.pending[i] for i in sorted(self.pending)]
        self.pending.clear()
        return out


def out_of_file_order(sampler: Any) -> bool:
    """Whether ``sampler`` gives a file's rows out of order: it says so with ``out_of_file_order = True``.

    :class:`~domainbert.data.batching.LengthSortedSampler` does; ``core`` reads the attribute rather than importing
    ``data``.
    """
    return getattr(sampler, "out_of_file_order", False) is True


def sampler_order(loader) -> list[int] | None:
    """The row indices in the order ``loader`` gives them when its sampler sorts by length; else None (file order)."""
    sampler = getattr(loader, "sampler", None)
    return list(sampler) if out_of_file_order(sampler) else None


def in_file_order(values: Sequence[Any], order: Sequence[int] | None) -> list[Any]:
    """``values``, given in ``order`` (row indices, see :func:`sampler_order`), put back in file order."""
    if order is None:
        return list(values)
    restore = FileOrder()
    return restore.add(order, values) + restore.rest()


def sorted_by_length(trainer: L.Trainer) -> bool:
    """Whether the trainer's predict loader batches rows out of file order (a ``LengthSortedSampler``).

    Lightning rebuilds the loader for prediction: the sampler is found under its batch sampler, and under DDP
    inside the ``UnrepeatedDistributedSamplerWrapper`` that shares it out.
    """
    loaders = trainer.predict_dataloaders
    loaders = list(loaders.values()) if isinstance(loaders, dict) else loaders
    for loader in loaders if isinstance(loaders, (list, tuple)) else [loaders]:
        sampler = getattr(getattr(loader, "batch_sampler", None), "sampler", None)
        shared = wrapped_sampler(getattr(sampler, "dataset", None))
        if out_of_file_order(sampler) or out_of_file_order(shared):
            return True
    return False


class PredictionWriter(BasePredictionWriter):
    """Write the predictions of ``domainbert predict`` as JSONL.

    Each line is one input, in the input file's order: its fields (text, id...) plus ``label`` and
    ``probabilities`` (for classification), ``tags`` (tagging) or ``answer`` and ``score`` (QA). The rows of a
    ``.txt`` file (one text a line, blank lines skipped) carry their ``line`` number, so each prediction can be
    matched to its line.
    """

    #: Tells the task datamodules that predict batches may group rows by length: this writer restores the order.
    restores_file_order = True

    def __init__(self, output: str | None = None) -> None:
        """Choose where the predictions go.

        Args:
            output: the JSONL file to write; by default ``predictions.jsonl`` in the run folder.
        """
        super().__init__(write_interval="batch")
        self.output = output
        self.path: Path | None = None
        self._fh = None
        self._tmp: str | None = None
        self._order: FileOrder | None = None
        self._loader = 0
        self.count = 0

    def _target(self, trainer: L.Trainer) -> Path:
        if self.output:
            return Path(os.path.expanduser(self.output))
        return Path(trainer.log_dir or trainer.default_root_dir) / "predictions.jsonl"

    def on_predict_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.is_global_zero:
            return
        self.path = self._target(trainer)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, self._tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
        except OSError as err:
            raise DomainBertError(f"cannot write predictions to {self.path}: {err.strerror or err}") from err
        self._fh = os.fdopen(fd, "w", encoding="utf-8")
        self._order = FileOrder() if sorted_by_length(trainer) else None
        self._loader = 0
        self.count = 0

    def write_on_batch_end(
        self, trainer, pl_module, prediction, batch_indices, batch, batch_idx, dataloader_idx
    ) -> None:
        if self._fh is None:
            return
        rows = prediction or []
        if self._order is not None and batch_indices is not None:
            if dataloader_idx != self._loader:  # the next loader's indices start again at 0
                self._write(self._order.rest())
                self._order, self._loader = FileOrder(), dataloader_idx
            rows = self._order.add(batch_indices, rows)
        self._write(rows)

    def _write(self, rows) -> None:
        for row in rows:
            self._fh.write(json.dumps(_plain(row), ensure_ascii=False) + "\n")
            self.count += 1

    def on_predict_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._fh is None:
            return
        try:
            if self._order is not None:
                self._write(self._order.rest())
            self._fh.flush()
            os.fsync(self._fh.fileno())
            self._fh.close()
            os.replace(self._tmp, self.path)
        except OSError as err:
            self._discard()
            raise DomainBertError(f"could not write {self.path}: {err.strerror or err}") from err
        self._fh = self._tmp = None
        print(f"Wrote {self.count} predictions to {self.path}")

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self._discard()

    def _discard(self) -> None:
        if self._fh is not None:
            with contextlib.suppress(Exception):
                self._fh.close()
        if self._tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._tmp)
        self._fh = self._tmp = None


def ensure_writer(trainer: L.Trainer) -> BasePredictionWriter:
    """The trainer's prediction writer; a :class:`PredictionWriter` to the run folder is added if it has none.

    ``domainbert predict`` calls this, so predictions are written (``<run>/predictions.jsonl``) even when the
    config lists no writer; a writer the config gives (any ``BasePredictionWriter``) is kept as it is.
    """
    for callback in trainer.callbacks:
        if isinstance(callback, BasePredictionWriter):
            return callback
    writer = PredictionWriter()
    trainer.callbacks.append(writer)
    return writer
