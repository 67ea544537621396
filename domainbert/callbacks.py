"""Callbacks: the Hugging Face export at the end of ``fit``, and training guards."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Literal

import lightning.pytorch as L
import torch
from lightning.pytorch.utilities import rank_zero_only

from domainbert.core.seeding import step_seed

log = logging.getLogger(__name__)


class HFExport(L.Callback):
    """At the end of ``fit``, restore the best checkpoint and write ``<run dir>/<dirname>/`` in HF format.

    The best checkpoint is the one the (first) ``ModelCheckpoint`` with a ``monitor`` chose; with none,
    the final weights are exported. Only rank 0 writes.
    """

    def __init__(self, enabled: bool = True, dirname: str = "hf", restore_best: bool = True) -> None:
        """Configure the export.

        Args:
            enabled: write the export at the end of fit.
            dirname: folder name inside the run folder.
            restore_best: load the best checkpoint's weights before exporting (when one was monitored).
        """
        super().__init__()
        self.enabled = enabled
        from domainbert.core.files import plain_name  # a name inside the run folder: never '', '.', '..' or a path

        self.dirname = plain_name(dirname, "export.dirname")
        self.restore_best = restore_best
        self.path: Path | None = None

    @staticmethod
    def run_dir(trainer: L.Trainer) -> Path:
        """The run's own folder: the logger's versioned folder, else ``default_root_dir``."""
        return Path(trainer.log_dir or trainer.default_root_dir)

    def best_path(self, trainer: L.Trainer) -> str | None:
        """The best monitored checkpoint of this fit, if any."""
        for cb in trainer.checkpoint_callbacks:
            if getattr(cb, "monitor", None) and getattr(cb, "best_model_path", ""):
                return cb.best_model_path
        return None

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self.enabled or trainer.sanity_checking:
            return
        best = self.best_path(trainer) if self.restore_best else None
        if best and Path(best).exists():
            state = torch.load(best, map_location=pl_module.device, weights_only=True)["state_dict"]
            pl_module.load_state_dict(state)
            log.info("restored the best checkpoint %s before export", best)
        self.path = self.run_dir(trainer) / self.dirname
        self._write(pl_module)

    @rank_zero_only
    def _write(self, pl_module: L.LightningModule) -> None:
        if hasattr(pl_module, "export_hf"):
            pl_module.export_hf(self.path)
            print(f"Exported Hugging Face model to {self.path}")


class EarlyStopping(L.callbacks.EarlyStopping):
    """Lightning's ``EarlyStopping``, which lets a fit that has not validated yet finish.

    Lightning raises when the monitored metric is missing, also when no validation has run yet (a smoke run with
    ``--trainer.max_steps 5``, or ``--data.val null``). This one logs one warning and skips the check until a
    validation has run, as ``ModelCheckpoint`` does; a metric still missing after a validation (a misspelt
    ``monitor``) is an error naming the metrics that were logged. Options as in Lightning.
    """

    _validated = False
    _warned = False

    def _missing(self, trainer: L.Trainer) -> bool:
        """True (after one warning) when the monitored metric is absent and no validation has run."""
        if self.monitor in trainer.callback_metrics or self._validated:
            return False
        if not self._warned:
            log.warning(
                "EarlyStopping(monitor=%r): no validation has run yet, so early stopping is skipped until one does",
                self.monitor,
            )
            self._warned = True
        return True

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self._missing(trainer):
            super().on_train_epoch_end(trainer, pl_module)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._validated = True
            if self.monitor not in trainer.callback_metrics and self.strict:
                from domainbert.errors import DomainBertError

                logged = ", ".join(sorted(trainer.callback_metrics)) or "none"
                raise DomainBertError(
                    f"EarlyStopping monitor={self.monitor!r}: validation logged no such metric; logged: {logged}"
                )
        super().on_validation_end(trainer, pl_module)


class TrainingGuard(L.Callback):
    """Stop (or skip) on a non-finite loss, and make every step's randomness a function of the step.

    - A NaN or inf in the gradients (which a non-finite loss always produces) stops training with an error naming
      the step and the last good checkpoint; with ``nonfinite: skip`` the step's update is dropped instead and
      the number of skipped steps is logged as ``train/skipped_steps``.
    - With ``reseed_every_step`` the global RNG is seeded from ``(seed, batch index)`` before each training batch,
      so dropout draws after a resume from a mid-epoch checkpoint equal those of an uninterrupted run.
    - With ``release_memory`` the heap's free memory goes back to the system after every evaluation batch
      (glibc's ``malloc_trim``; a no-op elsewhere), so the peak RSS of a validation pass stays flat however many
      batches it has (glibc otherwise keeps freed activation buffers: +30% from 1x to 4x the data for MLM).
    """

    def __init__(
        self,
        nonfinite: Literal["stop", "skip", "ignore"] = "stop",
        reseed_every_step: bool = True,
        release_memory: bool = True,
    ) -> None:
        """Configure the guard.

        Args:
            nonfinite: ``stop`` (raise, naming the step and the last checkpoint), ``skip`` (drop that update and
                count it) or ``ignore``.
            reseed_every_step: seed the global RNG from (seed, batch index) before every training batch.
            release_memory: after every validation/test/predict batch, return the heap's free memory to the system
                (glibc ``malloc_trim``; no effect on other C libraries).
        """
        super().__init__()
        if nonfinite not in ("stop", "skip", "ignore"):
            from domainbert.errors import DomainBertError

            raise DomainBertError(f"--guard.nonfinite={nonfinite!r}: expected stop, skip or ignore")
        self.nonfinite, self.reseed_every_step = nonfinite, reseed_every_step
        self.skipped = 0
        self._trim = _malloc_trim() if release_memory else None

    def _release(self, *args, **kwargs) -> None:
        if self._trim is not None:
            self._trim(0)

    on_validation_batch_end = on_test_batch_end = on_predict_batch_end = _release

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.reseed_every_step:
            base = int(os.environ.get("PL_GLOBAL_SEED", "0"))
            torch.manual_seed(step_seed(base, trainer.fit_loop.total_batch_idx))

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        if self.nonfinite == "ignore":
            return
        grads = [p.grad for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        if not grads:
            return
        finite = torch.stack([torch.isfinite(g).all() for g in grads]).all()
        if bool(finite):
            return
        if self.nonfinite == "skip":
            for g in optimizer.param_groups:
                for p in g["params"]:
                    p.grad = None
            self.skipped += 1
            log.warning("step %d: non-finite gradients; update skipped (%d so far)", trainer.global_step, self.skipped)
            pl_module.log("train/skipped_steps", float(self.skipped))
            return
        from domainbert.errors import DomainBertError

        last = _last_checkpoint(trainer)
        raise DomainBertError(
            f"non-finite loss or gradients at step {trainer.global_step}; last good checkpoint: "
            f"{last or 'none saved yet'}. Lower the learning rate, check the data, or set guard.nonfinite=skip"
        )


def _malloc_trim():
    """The C library's ``malloc_trim`` (glibc), or None where it has none (macOS, Windows, musl)."""
    import ctypes
    import ctypes.util

    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


def _last_checkpoint(trainer) -> str | None:
    paths = []
    for cb in trainer.checkpoint_callbacks:
        for attr in ("last_model_path", "best_model_path"):
            p = getattr(cb, attr, "")
            if p and Path(p).exists():
                paths.append(p)
    return max(paths, key=lambda p: Path(p).stat().st_mtime) if paths else None
