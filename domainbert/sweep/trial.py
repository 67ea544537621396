"""One sweep trial: a real ``domainbert fit`` with the trial's overrides, a step-wise pruning callback, its value.

The fit goes through :class:`domainbert.cli.DomainBertCLI` exactly as ``domainbert fit`` does; the only addition
is :class:`StepPruning`, appended to the trainer's callbacks.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import lightning.pytorch as L
import optuna
from jsonargparse import Namespace

from domainbert.cli import DomainBertCLI
from domainbert.core.compat import SkipSeeding
from domainbert.errors import DomainBertError

log = logging.getLogger(__name__)


class MetricMissing(DomainBertError):
    """The sweep's metric is not among the metrics the fit logs (a config error: every trial would fail)."""


class StepPruning(L.Callback):
    """Report the monitored metric to Optuna at each validation end, keyed by ``trainer.global_step``.

    Unlike ``PyTorchLightningPruningCallback`` (which reports by epoch), this works with
    ``val_check_interval`` below one epoch. When the pruner says so it raises ``optuna.TrialPruned``,
    which stops the fit. Under DDP, rank 0 reports and decides, and the decision is broadcast.
    """

    def __init__(self, trial: optuna.Trial | None, metric: str) -> None:
        """Watch ``metric`` for ``trial`` (None on ranks other than 0)."""
        super().__init__()
        self.trial = trial
        self.metric = metric
        self.history: dict[int, float] = {}
        self.interrupted = False

    @property
    def last(self) -> float | None:
        """The last value seen, if any."""
        return self.history[max(self.history)] if self.history else None

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        value = trainer.callback_metrics.get(self.metric)
        if value is None:
            logged = ", ".join(sorted(trainer.callback_metrics)) or "none"
            raise MetricMissing(f"the sweep metric '{self.metric}' is not logged by the model; logged: {logged}")
        value = float(value)
        step = int(trainer.global_step)
        self.history[step] = value
        prune = False
        if self.trial is not None and trainer.is_global_zero:
            self.trial.report(value, step=step)
            prune = self.trial.should_prune()
        if trainer.strategy.broadcast(prune, src=0):
            raise optuna.TrialPruned(f"pruned at step {step} with {self.metric}={value:.6g}")

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self.interrupted = isinstance(exception, KeyboardInterrupt)


def broadcast_params(params: dict[str, Any]) -> dict[str, Any]:
    """Under ``torch.distributed``, give every rank rank 0's sampled parameters; a no-op in one process."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return params
    box = [params if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def _parser_kwargs() -> dict[str, Any]:
    kw: dict[str, Any] = {"exit_on_error": False}
    if importlib.util.find_spec("omegaconf") is not None:
        kw["parser_mode"] = "omegaconf"
    return {**kw, "fit": dict(kw)}


@contextlib.contextmanager
def _quiet_argv() -> Iterator[None]:
    """Hide the sweep's own ``sys.argv`` from LightningCLI (it warns when given both)."""
    saved = sys.argv
    sys.argv = saved[:1]
    try:
        yield
    finally:
        sys.argv = saved


def _prepare(args: Sequence[str]) -> list[str]:
    from domainbert.cli.short_names import expand_short_names
    from domainbert.data.registry import load_plugins

    load_plugins()
    return expand_short_names(list(args))


class _ParseOnlyCLI(SkipSeeding, DomainBertCLI):
    """The fit CLI's parser and parsed config, without instantiating anything.

    ``LightningCLI.__init__`` seeds every global generator (``seed_everything``) even with ``run=False``, and
    writes the seed it drew for ``seed_everything: true`` into the config, which ``best.yaml`` would then fix.
    A parse must do neither: :class:`~domainbert.core.compat.SkipSeeding` (pinned by ``tests/unit/test_compat.py``).
    """

    def before_instantiate_classes(self) -> None:
        pass

    def instantiate_classes(self) -> None:
        pass

    def after_instantiate_classes(self) -> None:
        pass


def parse_fit(args: Sequence[str]) -> tuple[Any, Namespace]:
    """Parse fit arguments (``--config a.yaml --key value ...``) with the real CLI parser.

    Returns:
        ``(parser, config)``; nothing is instantiated.

    Raises:
        DomainBertError: with jsonargparse's message, for a config the fit would reject.
    """
    try:
        with _quiet_argv():
            cli = _ParseOnlyCLI(args=_prepare(args), run=False, parser_kwargs=_parser_kwargs())
    except SystemExit as err:
        raise DomainBertError(f"the fit config does not parse (exit status {err.code}); see the message above") from err
    except Exception as err:  # noqa: BLE001 - jsonargparse raises several types for a bad config
        if isinstance(err, DomainBertError):
            raise
        raise DomainBertError(f"the fit config does not parse: {err}") from err
    return cli.parser, cli.config


class _TrialCLI(DomainBertCLI):
    """``DomainBertCLI`` whose trainer gets extra callbacks (given ``fit`` first, it builds only fit's parser)."""

    def __init__(self, *args: Any, extra_callbacks: Sequence[L.Callback] = (), **kwargs: Any) -> None:
        self._extra_callbacks = list(extra_callbacks)
        super().__init__(*args, **kwargs)

    def instantiate_trainer(self, **kwargs: Any) -> L.Trainer:
        trainer = super().instantiate_trainer(**kwargs)
        trainer.callbacks.extend(self._extra_callbacks)
        return trainer


def run_fit(args: Sequence[str], callbacks: Sequence[L.Callback] = ()) -> DomainBertCLI:
    """Run ``domainbert fit <args>`` in this process with extra trainer ``callbacks``; return the CLI."""
    with _quiet_argv():
        return _TrialCLI(args=["fit", *_prepare(args)], extra_callbacks=callbacks, parser_kwargs=_parser_kwargs())


def final_value(trainer: L.Trainer, pruning: StepPruning, maximize: bool) -> float:
    """The trial's value: the best checkpoint's score when a checkpoint monitors the metric, else the last value."""
    mode = "max" if maximize else "min"
    for ckpt in trainer.checkpoint_callbacks:
        score = getattr(ckpt, "best_model_score", None)
        if getattr(ckpt, "monitor", None) == pruning.metric and getattr(ckpt, "mode", None) == mode:
            if score is not None:
                return float(score)
    if pruning.last is not None:
        return pruning.last
    value = trainer.callback_metrics.get(pruning.metric)
    if value is None:
        logged = ", ".join(sorted(trainer.callback_metrics)) or "none"
        raise MetricMissing(
            f"the sweep metric '{pruning.metric}' was never logged (no validation ran?); logged: {logged}"
        )
    return float(value)


def run_trial(trial: optuna.Trial | None, fit_args: Sequence[str], metric: str, maximize: bool) -> tuple[float, str]:
    """Fit with ``fit_args`` and return ``(value, run_dir)``.

    Raises:
        optuna.TrialPruned: when the pruner stopped the fit.
        KeyboardInterrupt: when the user interrupted it (Lightning turns Ctrl-C into ``SystemExit``).
        MetricMissing: when the model does not log ``metric``.
        DomainBertError: when the fit exited (``SystemExit``) for another reason.
    """
    pruning = StepPruning(trial, metric)
    try:
        cli = run_fit(fit_args, [pruning])
    except SystemExit as err:
        if pruning.interrupted:
            raise KeyboardInterrupt from err
        raise DomainBertError(f"the fit exited with status {err.code}") from err
    except Exception as err:
        # jsonargparse and Lightning may wrap our own errors
        cause = err
        while cause is not None and not isinstance(cause, (optuna.TrialPruned, MetricMissing)):
            cause = cause.__cause__ or cause.__context__
        if cause is not None and cause is not err:
            raise cause from err
        raise
    return final_value(cli.trainer, pruning, maximize), str(cli.trainer.log_dir or cli.trainer.default_root_dir)
