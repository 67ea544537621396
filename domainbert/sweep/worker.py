"""One sweep worker: the checked sweep, its study, and the loop that runs trials until the study has enough.

Several workers, on this machine (``--n_jobs``) or on others (a shared ``--storage``), run this loop on one
study; the trials they finish between them count towards ``--n_trials``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import sqlite3
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import optuna
from optuna.trial import TrialState

from domainbert.core.files import check_claim, claim_folder, plain_name
from domainbert.errors import DomainBertError
from domainbert.sweep.bookkeeping import fail_dead_workers, retried, runs_again, tally
from domainbert.sweep.preflight import check_fit
from domainbert.sweep.space import PerTrialSeedSampler, SweepSpec, load_spec, make_pruner, overrides
from domainbert.sweep.storage import mask_url, open_storage, storage_url

try:
    import fcntl
except ImportError:  # Windows: workers may then start a few trials beyond --n_trials
    fcntl = None

if TYPE_CHECKING:
    from domainbert.sweep.report import ReportContext


class Sweep:
    """One worker's view of a sweep: the spec, the fit arguments, the study and its folder.

    Attributes:
        spec: the sweep file, with ``--metric`` and ``--direction`` applied and each parameter's target resolved.
        base_args: the fit arguments every trial shares (``--config a.yaml ... --key value``).
        name: the study name.
        out: the sweep folder (absolute).
        url: the storage URL (may hold a password: show it through ``mask_url``).
        study: the Optuna study, created or loaded.
    """

    def __init__(self, ns: argparse.Namespace, fit_overrides: Sequence[str]) -> None:
        """Check everything a trial needs, then open the study, before any trial runs.

        Args:
            ns: the parsed ``domainbert sweep`` options; nothing keeps a reference to it.
            fit_overrides: the other ``--key value`` arguments, applied to every trial.

        Raises:
            DomainBertError: for a missing file, a bad sweep file, a fit config the space does not fit, a study
                that optimises something else, or a storage that cannot be opened.
        """
        if ns.n_trials < 1 or ns.n_jobs < 1:
            raise DomainBertError("--n_trials and --n_jobs must be at least 1")
        for cfg in ns.config:
            if not Path(cfg).is_file():
                raise DomainBertError(f"fit config {cfg} does not exist")
        self.spec: SweepSpec = _spec(ns)
        self.config_paths: list[str] = list(ns.config)
        self.n_trials: int = ns.n_trials
        self.timeout: float | None = ns.timeout
        self.heartbeat_interval: int = ns.heartbeat_interval
        self.base_args = [a for c in ns.config for a in ("--config", c)] + list(fit_overrides)
        self.name = ns.study_name or self.spec.study_name or f"{Path(ns.config[-1]).stem}-{Path(ns.sweep).stem}"
        plain_name(self.name, "study_name")
        claim_out(ns, self.name, fit_overrides, check_only=True)  # at once: the fit config's check imports Lightning
        check_fit(self.base_args, self.spec)
        self.out = claim_out(ns, self.name, fit_overrides)
        self.url = storage_url(ns.storage, self.out)
        self.storage = open_storage(self.url, ns.heartbeat_interval, ns.grace_period, ns.max_retry)
        self.study = self._study()
        self.fatal: str | None = None
        self.claim = _FileLock(self.out / ".claim.lock")
        self._shown: set[int] = set()

    def _study(self) -> optuna.Study:
        spec = self.spec
        study = optuna.create_study(
            storage=self.storage,
            study_name=self.name,
            direction=spec.direction,
            sampler=PerTrialSeedSampler(spec.sampler),
            pruner=make_pruner(spec.pruner),
            load_if_exists=True,
        )
        if study.direction.name.lower() != spec.direction:
            raise DomainBertError(
                f"study '{self.name}' in {mask_url(self.url)} was created to {study.direction.name.lower()}, "
                f"but {spec.source} says {spec.direction}; use another --study_name"
            )
        metric = study.user_attrs.get("metric")
        if metric is None:
            study.set_user_attr("metric", spec.metric)
            study.set_user_attr("fit_args", self.base_args)
        elif metric != spec.metric:
            raise DomainBertError(
                f"study '{self.name}' optimises {metric}, but {spec.source} names {spec.metric}; "
                "use another --study_name"
            )
        return study

    def report_context(self) -> ReportContext:
        """What :func:`~domainbert.sweep.report.report` needs of this sweep."""
        from domainbert.sweep.report import ReportContext

        return ReportContext(
            study=self.study,
            out=self.out,
            name=self.name,
            metric=self.spec.metric,
            direction=self.spec.direction,
            params=tuple(self.spec.params),
            fit_args=tuple(self.base_args),
            config=self.config_paths[-1],
        )

    # -- one trial ----------------------------------------------------------------------------------
    def objective(self, trial: optuna.Trial) -> float:
        """Fit with this trial's parameters in ``<out>/trial_<n>``; return the metric."""
        from domainbert.sweep.trial import MetricMissing, broadcast_params, run_trial

        self.claim.release()

        values = broadcast_params({p.path: p.suggest(trial) for p in self.spec.params})
        root = self.out / f"trial_{trial.number:03d}"
        trial.set_user_attr("worker", f"{socket.gethostname()}:{os.getpid()}")
        trial.set_user_attr("trial_dir", str(root))
        shown = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in values.items())
        print(f"[sweep] trial {trial.number} starts: {shown}", flush=True)
        args = [*self.base_args, *overrides(values, self.spec.params), f"--trainer.default_root_dir={root}"]
        try:
            value, run_dir = run_trial(trial, args, self.spec.metric, self.spec.maximize)
        except optuna.TrialPruned:
            raise
        except KeyboardInterrupt:
            trial.set_user_attr("interrupted", True)
            raise
        except Exception as err:
            trial.set_user_attr("error", f"{type(err).__name__}: {err}"[:2000])
            if isinstance(err, MetricMissing):
                self.fatal = str(err)
            raise
        trial.set_user_attr("run_dir", run_dir)
        return value

    def progress(self, study: optuna.Study, frozen: optuna.trial.FrozenTrial | None = None) -> None:
        """Print ``trial n/N value=... best=...`` for each trial that finished since the last call (any worker)."""
        trials = study.get_trials(deepcopy=False)
        finished, _ = tally(trials)
        done = [t for t in trials if t.state.is_finished() and t.number not in self._shown]
        if not done:
            return
        self._shown.update(t.number for t in done)
        try:
            best = f"{study.best_value:.6g} (#{study.best_trial.number})"
        except ValueError:  # Optuna's way of saying that no trial completed yet
            best = "-"
        again = retried(trials)
        for t in sorted(done, key=lambda t: t.number):
            if runs_again(t, again):
                print(f"[sweep] trial #{t.number} stopped (worker died or Ctrl-C); it runs again", flush=True)
                continue
            value = f"value={t.value:.6g}" if t.state == TrialState.COMPLETE else t.state.name.lower()
            print(f"[sweep] trial {finished}/{self.n_trials} (#{t.number}) {value} best={best}", flush=True)

    # -- the worker loop ----------------------------------------------------------------------------
    def work(self) -> None:
        """Run trials until the study holds ``--n_trials`` finished ones (or ``--timeout`` passes)."""
        start, waiting_said = time.monotonic(), False
        self._shown = {t.number for t in self.study.get_trials(deepcopy=False) if t.state.is_finished()}
        while True:
            if self.timeout and time.monotonic() - start > self.timeout:
                print(f"[sweep] --timeout {self.timeout:g}s reached; no new trial starts", flush=True)
                return
            # Count and create the trial under a lock shared by this machine's workers, so that they never
            # start more than --n_trials between them (the objective releases it once its trial exists).
            self.claim.acquire()
            try:
                finished, running = self._count()
                if finished >= self.n_trials:
                    return
                if finished + running >= self.n_trials:
                    # The last trials are running elsewhere: wait for them, so that one whose worker died is
                    # retried here once its heartbeat goes stale.
                    self.claim.release()
                    if not waiting_said:
                        print(f"[sweep] waiting for {running} running trial(s) of other workers", flush=True)
                        waiting_said = True
                    time.sleep(min(5.0, self.heartbeat_interval))
                    self.progress(self.study)
                    continue
                self.study.optimize(self.objective, n_trials=1, catch=(Exception,), callbacks=[self.progress])
            finally:
                self.claim.release()
            if self.fatal:
                raise DomainBertError(f"{self.fatal} (sweep file {self.spec.source})")

    def _count(self) -> tuple[int, int]:
        """``(finished, running)`` trials, once the trials of dead workers (stale heartbeat, or gone) are failed."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            optuna.storages.fail_stale_trials(self.study)
        fail_dead_workers(self.study)
        return tally(self.study.get_trials(deepcopy=False))


def _spec(ns: argparse.Namespace) -> SweepSpec:
    """The sweep file of ``--sweep``, with ``--metric`` and ``--direction`` applied and the study name checked."""
    spec = load_spec(ns.sweep)
    if ns.study_name is not None:
        plain_name(ns.study_name, "--study_name")
    elif spec.study_name is not None:
        plain_name(spec.study_name, f"{ns.sweep}: study_name")
    spec.metric = ns.metric or spec.metric
    spec.direction = ns.direction or spec.direction
    return spec


def claim_out(ns: argparse.Namespace, name: str, fit_overrides: Sequence[str], check_only: bool = False) -> Path:
    """The sweep's folder (absolute): ``--out``, else ``runs/sweeps/<name>``; created, or reused by a rerun.

    It follows the rule of every command's output (:func:`~domainbert.core.files.claim_folder`): new, empty, or
    domainbert's (it holds the marker); never one of the sweep's inputs (its fit configs, its sweep file, a file an
    override names), nor the root, a home or a project folder. A sweep folder an older domainbert wrote (no marker)
    is known by its ``study.db`` holding the study ``name``.

    Args:
        ns: the parsed ``domainbert sweep`` options.
        name: the study's name.
        fit_overrides: the ``--key value`` arguments of every trial (a file one names is an input).
        check_only: check the folder as claiming it would, but create and mark nothing
            (:func:`~domainbert.core.files.check_claim`).

    Raises:
        DomainBertError: one line naming ``--out`` and what is wrong.
    """
    out = Path("runs") / "sweeps" / name if ns.out is None else ns.out
    named = [a.split("=", 1)[-1] for a in fit_overrides if not a.startswith("--") or "=" in a]
    inputs = [*ns.config, ns.sweep, *(a for a in named if os.path.isfile(a))]
    claim = check_claim if check_only else claim_folder
    return claim(out, inputs, what="--out", recognise=lambda f: _holds_study(f, name)).resolve()


def _holds_study(folder: Path, name: str) -> bool:
    """Whether ``folder/study.db`` is an Optuna SQLite database holding the study ``name`` (read only)."""
    db = folder / "study.db"
    if not db.is_file():
        return False
    try:
        with contextlib.closing(sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)) as con:
            return con.execute("SELECT 1 FROM studies WHERE study_name = ?", (name,)).fetchone() is not None
    except sqlite3.Error:
        return False


class _FileLock:
    """An exclusive ``flock`` on a file, released explicitly (no-op where ``fcntl`` is missing)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh = None

    def acquire(self) -> None:
        if self._fh is not None or fcntl is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "a")  # noqa: SIM115 - held across calls
        fcntl.flock(self._fh, fcntl.LOCK_EX)

    def release(self) -> None:
        if self._fh is not None:
            fcntl.flock(self._fh, fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None
