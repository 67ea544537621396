"""Callbacks: the Hugging Face export at the end of ``fit``, and training guards."""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path
from typing import Literal

import lightning.pytorch as L
import torch
from lightning.pytorch.utilities import rank_zero_only

from domainbert.core.compat import TrainDescription
from domainbert.core.cpu_memory import malloc_trim
from domainbert.core.protocols import Exportable, data_max_length
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
        """The run's own folder: the first logger's versioned folder, else ``default_root_dir``.

        Read from the logger, not ``trainer.log_dir``: that broadcasts from rank 0, a collective call that hangs
        under DDP when only rank 0 asks (the run folder is named the same on every rank: its version is given).
        """
        loggers = getattr(trainer, "loggers", None) or []
        return Path(getattr(loggers[0] if loggers else None, "log_dir", None) or trainer.default_root_dir)

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
        if isinstance(pl_module, Exportable):
            bad = nonfinite_weights(pl_module)
            if bad:
                from domainbert.errors import DomainBertError

                raise DomainBertError(
                    f"not exported to {self.path}: the model's weights are not finite ({bad}); lower the learning "
                    "rate or check the data"
                )
        self._write(pl_module, self.scoring(trainer))

    @staticmethod
    def scoring(trainer: L.Trainer) -> dict:
        """How the trainer scores the model: its datamodule's ``max_length`` (None without one) and its precision.

        The export records both (:mod:`domainbert.core.scoring`), so that it answers as its test pass scored it.
        """
        length = data_max_length(trainer.datamodule)
        precision = getattr(trainer, "precision", None)
        return {"max_length": length, "precision": str(precision) if precision is not None else None}

    @rank_zero_only
    def _write(self, pl_module: L.LightningModule, scoring: dict | None = None) -> None:
        if isinstance(pl_module, Exportable):
            from domainbert.core.scoring import record_scoring

            pl_module.export_hf(self.path)
            if pl_module.serves_predictions:  # not a pretraining export: a starting point
                record_scoring(self.path, **(scoring or {}))
            print(f"Exported Hugging Face model to {self.path}")


class RunReport(L.Callback):
    """What every ``domainbert`` training command says, whatever the progress bar (added by the CLI, not configured).

    - When fit starts: the run folder and the model's size, on one line.
    - After the last training step: that step's ``train/*`` metrics go to the loggers when ``log_every_n_steps``
      skipped it, so every fit's ``metrics.csv`` ends with the final step (a fit shorter than
      ``log_every_n_steps``, with no validation, would otherwise leave none).
    - When training ends with no checkpoint saved (a ``ModelCheckpoint`` that monitors a validation metric, in a
      fit too short to validate): the final weights as ``checkpoints/last.ckpt`` (:func:`save_final_checkpoint`),
      so ``test --ckpt_path best`` or ``last`` finds this run's model.
    - When fit ends: the final metrics, on one line (before the export's line).
    - When a command fails or is interrupted before its run folder holds anything but its ``config*.yaml``, that
      folder is removed, so a failed start leaves no empty ``version_N``. (A process killed outright, SIGKILL,
      cannot clean up: its folder stays, and the next run takes the next number.)
    """

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._stage = stage

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.is_global_zero:
            params = sum(p.numel() for p in pl_module.parameters())
            trainable = sum(p.numel() for p in pl_module.parameters() if p.requires_grad)
            print(
                f"Run folder: {HFExport.run_dir(trainer)} ({type(pl_module).__name__}, {params:,} parameters, "
                f"{trainable:,} trainable)"
            )

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        save_final_checkpoint(trainer)
        step, every = trainer.global_step, trainer.log_every_n_steps
        if not trainer.loggers or step == 0 or not every or step % every == 0 or trainer.should_stop:
            return  # Lightning logged the last step itself (its rule: every n-th step, or a stop)
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("train/")}
        if metrics:
            metrics["epoch"] = trainer.current_epoch
            for logger in trainer.loggers:
                logger.log_metrics(metrics, step=step - 1)  # Lightning numbers a step's row from 0

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.is_global_zero:
            print(f"Final metrics (step {trainer.global_step}): {format_metrics(trainer.callback_metrics)}")

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        if trainer.is_global_zero:
            remove_if_only_configs(HFExport.run_dir(trainer))


def save_final_checkpoint(trainer: L.Trainer) -> Path | None:
    """Save ``<checkpoints>/last.ckpt`` when a fit that checkpoints ends with no checkpoint saved; its path.

    A ``ModelCheckpoint`` that monitors a validation metric saves nothing in a fit that never validated
    (``--trainer.max_steps 5`` inside the first epoch). None when a checkpoint exists, when the callback saves
    ``last`` itself, when checkpointing is off or ``fast_dev_run``, or when no step was trained.
    """
    callbacks = trainer.checkpoint_callbacks
    if not callbacks or trainer.fast_dev_run or trainer.global_step == 0 or trainer.sanity_checking:
        return None
    if any(cb.best_model_path or cb.last_model_path or getattr(cb, "save_last", False) for cb in callbacks):
        return None
    from domainbert.core.shown import short_path

    first = callbacks[0]
    if not getattr(first, "dirpath", None):
        return None
    path = Path(first.dirpath) / f"{first.CHECKPOINT_NAME_LAST}{first.FILE_EXTENSION}"
    first.last_model_path = str(path)
    trainer.save_checkpoint(path)
    log.info("no validation ran, so no checkpoint was saved: the final weights are in %s", short_path(path, None))
    return path


def format_metrics(metrics: dict) -> str:
    """``name value`` pairs in name order, 4 significant digits; ``none`` for no metrics."""
    items = sorted((k, float(v)) for k, v in metrics.items() if getattr(v, "numel", lambda: 1)() == 1)
    return ", ".join(f"{k} {v:.4g}" for k, v in items) or "none"


def remove_if_only_configs(run_dir: Path) -> bool:
    """Remove ``run_dir`` when it holds nothing but ``config*.yaml``/``hparams.yaml`` (a run that never trained)."""
    try:
        files = list(run_dir.iterdir())
    except OSError:
        return False
    if not files or not all(f.is_file() and (f.name.startswith("config") or f.name == "hparams.yaml") for f in files):
        return False
    for f in files:
        f.unlink(missing_ok=True)
    try:
        run_dir.rmdir()
    except OSError:
        return False
    log.info("removed %s: the run stopped before training", run_dir)
    return True


def progress_bar() -> L.callbacks.ProgressBar:
    """The progress a run shows: a live bar on a terminal, :class:`ProgressLines` anywhere else.

    On a terminal (both stdout and stderr), Lightning's default bar: Rich where installed (as Lightning chooses),
    else tqdm; Rich's reads ``Epoch 0``, not ``Epoch 0/-2``, in a fit bounded by ``max_steps`` (``max_epochs`` -1).
    Into a file or a pipe (a pipeline stage's log, CI) a live bar shows nothing until it ends, so plain lines go
    there instead, flushed as they come.
    """
    import importlib.util
    import sys

    if not all(stream is not None and stream.isatty() for stream in (sys.stdout, sys.stderr)):
        return ProgressLines()
    return _RichBar() if importlib.util.find_spec("rich") else L.callbacks.TQDMProgressBar()


class ProgressLines(L.callbacks.ProgressBar):
    """A fit's progress as plain lines (:mod:`domainbert.core.progress`), for output that is not a terminal.

    One line when training starts, one after every validation (the monitored metric: the first
    ``ModelCheckpoint``'s or ``EarlyStopping``'s ``monitor``, else ``val/loss``), and one whenever
    :data:`~domainbert.core.progress.EVERY` seconds of training passed without a line (the training loss), so a
    long epoch still shows a sign of life every minute. Each gives the epoch, the step, the metric, the time
    elapsed and an estimate of the time left (from the steps done so far), and is flushed at once::

        Progress: epoch 2/4, step 120/372: val/f1_macro 0.7312; 4m10s elapsed, about 8m45s left

    Only ``fit`` prints (``validate``/``test``/``predict`` are one pass each), on rank 0 only.
    """

    def __init__(self, every: float | None = None, clock=None) -> None:
        """Configure the lines.

        Args:
            every: at most this many seconds of training between two lines (default 60).
            clock: the time in seconds (default ``time.monotonic``; tests pass a fake one).
        """
        from domainbert.core.progress import EVERY, Throttle

        super().__init__()
        self.throttle = Throttle(EVERY if every is None else every, clock)
        self.enabled = True
        self._start: float | None = None

    def disable(self) -> None:
        self.enabled = False

    def enable(self) -> None:
        self.enabled = True

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start = self.throttle.said()
        self._say(trainer, {})

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self._start is not None and self.throttle.due():
            self._say(trainer, _pick(trainer.callback_metrics, ("train/loss",)))

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._start is not None and not trainer.sanity_checking:  # a validation inside fit
            self._say(trainer, _pick(trainer.callback_metrics, (*_monitored(trainer), "val/loss")))

    def _say(self, trainer: L.Trainer, metrics: dict[str, float]) -> None:
        from domainbert.core.progress import progress_line

        now = self.throttle.said()
        if not self.enabled:
            return
        total = trainer.estimated_stepping_batches
        line = progress_line(
            trainer.current_epoch, trainer.max_epochs, trainer.global_step, total, metrics, now - self._start
        )
        print(line, flush=True)


def _monitored(trainer: L.Trainer) -> tuple[str, ...]:
    """The metrics the fit's callbacks watch (checkpointing, early stopping), in the callbacks' order."""
    names = [getattr(cb, "monitor", None) for cb in trainer.callbacks]
    return tuple(n for n in names if isinstance(n, str) and n)


def _pick(metrics: dict, names: tuple[str, ...]) -> dict[str, float]:
    """The first of ``names`` that ``metrics`` holds, as ``{name: value}`` (``{}``: none)."""
    for name in names:
        value = metrics.get(name)
        if value is not None and getattr(value, "numel", lambda: 1)() == 1:
            return {name: float(value)}
    return {}


class _RichBar(TrainDescription, L.callbacks.RichProgressBar):
    """``RichProgressBar`` with no ``/<max_epochs - 1>`` after the epoch when there is no epoch limit."""

    def train_description(self, current_epoch: int) -> str:
        max_epochs = self.trainer.max_epochs
        text = f"Epoch {current_epoch}" + (f"/{max_epochs - 1}" if max_epochs and max_epochs > 0 else "")
        return f"{text:{len(self.validation_description)}}" if len(self.validation_description) > len(text) else text


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
    - With ``nonfinite: stop`` (the default), a non-finite training loss, a NaN or inf in the weights (checked before
      each validation and when training ends: a learning rate far too high overflows them with finite gradients)
      or a non-finite validation metric also stops training with an error, so no such model is exported.
    - A run whose training loss rose by orders of magnitude (its last value over :data:`DIVERGED_RATIO` times its
      first, and above 1) or ended non-finite (``nonfinite: skip`` or ``ignore``) diverged: :attr:`divergence` says
      so once training ends, the fit's last line repeats it, and the export's model card carries it.
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
        self.divergence: str | None = None
        self._first: tuple[int, torch.Tensor] | None = None  # (step, loss) of the first training batch
        self._last: tuple[int, torch.Tensor] | None = None  # and of the latest
        self._trim = malloc_trim() if release_memory else None

    def _release(self, *args, **kwargs) -> None:
        if self._trim is not None:
            self._trim(0)

    on_validation_batch_end = on_test_batch_end = on_predict_batch_end = _release

    def on_fit_start(self, trainer, pl_module) -> None:
        self.divergence, self._first, self._last = None, None, None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.reseed_every_step:
            base = int(os.environ.get("PL_GLOBAL_SEED", "0"))
            torch.manual_seed(step_seed(base, trainer.fit_loop.total_batch_idx))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if isinstance(loss, torch.Tensor) and loss.numel() == 1:  # kept as a tensor: no device sync per step
            self._last = (trainer.global_step, loss.detach())
            self._first = self._first or self._last
        if self.nonfinite == "stop" and isinstance(loss, torch.Tensor) and not bool(torch.isfinite(loss).all()):
            self._stop(trainer, f"the training loss is {float(loss.detach().float().mean())}")

    def on_validation_start(self, trainer, pl_module) -> None:
        if self.nonfinite == "stop" and not trainer.sanity_checking:
            self._check_weights(trainer, pl_module)

    def on_validation_end(self, trainer, pl_module) -> None:
        if self.nonfinite != "stop" or trainer.sanity_checking:
            return
        bad = {k: float(v) for k, v in trainer.callback_metrics.items() if _nonfinite_scalar(v)}
        if bad:
            self._stop(trainer, "validation gave " + ", ".join(f"{k}={v}" for k, v in sorted(bad.items())))

    def on_train_end(self, trainer, pl_module) -> None:
        if self._first is not None and self._last is not None:
            (first_step, first), (last_step, last) = self._first, self._last
            self.divergence = divergence(float(first), first_step, float(last), last_step)
        if self.nonfinite == "stop":
            self._check_weights(trainer, pl_module)

    def on_fit_end(self, trainer, pl_module) -> None:
        if self.divergence and trainer.is_global_zero:  # after the final metrics and the export's line
            print(
                f"Training diverged: {self.divergence}. Whatever this run exported is likely useless: "
                "lower --model.learning_rate (or check the data) and train again"
            )

    def _check_weights(self, trainer, pl_module) -> None:
        bad = nonfinite_weights(pl_module)
        if bad:
            self._stop(trainer, f"the weights are not finite ({bad})")

    def _stop(self, trainer, what: str) -> None:
        from domainbert.errors import DomainBertError

        last = _last_checkpoint(trainer)
        raise DomainBertError(
            f"step {trainer.global_step}: {what}; training stopped and nothing exported. Last good checkpoint: "
            f"{last or 'none saved yet'}. Lower the learning rate or check the data"
        )

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        if self.nonfinite == "ignore":
            return
        grads = [p.grad for g in optimizer.param_groups for p in g["params"] if p.grad is not None and p.grad.numel()]
        if not grads:
            return
        if _all_finite(grads):
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


#: A training loss that ends this many times above its first value (and above 1) means the run diverged.
DIVERGED_RATIO = 100.0


def divergence(first: float, first_step: int, last: float, last_step: int) -> str | None:
    """How a run diverged, from its first and last training loss; None when it did not.

    Diverged: the last loss is not finite, or it is over :data:`DIVERGED_RATIO` times the first (positive) one and
    above 1, so a loss that started near 0 and stays small is no divergence.
    """
    if not math.isfinite(last):
        return f"the training loss is {last} at step {last_step} (it was {first:.4g} at step {first_step})"
    if first > 0 and last > 1.0 and last > DIVERGED_RATIO * first:
        return (
            f"the training loss rose from {first:.4g} at step {first_step} to {last:.4g} at step {last_step} "
            f"({last / first:.3g} times)"
        )
    return None


def _all_finite(grads: list[torch.Tensor]) -> bool:
    """Whether every element of ``grads`` is finite.

    On a CPU, first through each tensor's float32 sum (finite when its elements are: a NaN or an inf propagates),
    2.5 ms for all-MiniLM-L6-v2's gradients against 33 for the inf-norm; a sum past 3.4e38 is confirmed element
    by element. Elsewhere, the inf-norm (one grouped reduction per device).
    """
    if any(g.device.type != "cpu" for g in grads):
        return bool(torch.isfinite(torch.nn.utils.get_total_norm(grads, norm_type=math.inf)))
    if bool(torch.isfinite(torch.stack([g.sum(dtype=torch.float32) for g in grads])).all()):
        return True
    return all(bool(torch.isfinite(g).all()) for g in grads)


def _nonfinite_scalar(value) -> bool:
    """Whether ``value`` (a logged metric: a number or a one-element tensor) is NaN or infinite."""
    if isinstance(value, torch.Tensor):
        return value.numel() == 1 and not bool(torch.isfinite(value).all())
    return isinstance(value, float) and not math.isfinite(value)


def nonfinite_weights(module: torch.nn.Module, limit: int = 3) -> str:
    """The first ``limit`` parameters of ``module`` holding a NaN or an inf, named (``''`` when all are finite)."""
    bad = [name for name, p in module.named_parameters() if not bool(torch.isfinite(p).all())]
    more = f" and {len(bad) - limit} more" if len(bad) > limit else ""
    return ", ".join(bad[:limit]) + more


def _last_checkpoint(trainer) -> str | None:
    paths = []
    for cb in trainer.checkpoint_callbacks:
        for attr in ("last_model_path", "best_model_path"):
            p = getattr(cb, attr, "")
            if p and Path(p).exists():
                paths.append(p)
    return max(paths, key=lambda p: Path(p).stat().st_mtime) if paths else None
