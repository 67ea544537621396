"""``domainbert predict`` output: one JSON object a line per input, written atomically.

The fine-tuning modules' ``predict_step`` returns a list of dicts per batch (the input's own fields,
the predicted label or span and the probabilities); :class:`PredictionWriter` streams them into a
temporary file beside the target and renames it into place when the epoch ends, so a crash never
leaves a half-written file where a complete one is expected.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import lightning.pytorch as L
import torch
from lightning.pytorch.callbacks import BasePredictionWriter

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


class PredictionWriter(BasePredictionWriter):
    """Write the predictions of ``domainbert predict`` as JSONL.

    Each line is one input: its fields (text, id...) plus ``label`` and ``probabilities`` (for
    classification), ``tags`` (tagging) or ``answer`` and ``score`` (QA).
    """

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
        self.count = 0

    def write_on_batch_end(
        self, trainer, pl_module, prediction, batch_indices, batch, batch_idx, dataloader_idx
    ) -> None:
        if self._fh is None:
            return
        for row in prediction or []:
            self._fh.write(json.dumps(_plain(row), ensure_ascii=False) + "\n")
            self.count += 1

    def on_predict_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._fh is None:
            return
        try:
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
