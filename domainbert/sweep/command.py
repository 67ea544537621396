r"""``domainbert sweep``: Optuna search over any fit config's hyper-parameters, pruned, resumable and parallel.

    domainbert sweep --config configs/finetune/minilm_debian-sections.yaml \
        --sweep configs/sweep/lr_warmup.yaml --n_trials 20

Each trial is a real ``domainbert fit`` of the config with the trial's overrides, in ``<out>/trial_<n>/``.

Storage: the default is the SQLite file ``<out>/study.db``, through Optuna's ``RDBStorage``. It is the same code
path as a PostgreSQL/MySQL URL (``--storage postgresql://user:pass@host/db``), so heartbeats and the retry of a dead
worker's trial behave the same on one machine and on many (Optuna's journal storage has no heartbeat). Use a
server URL when workers on several machines share a study; SQLite is for one machine (not on NFS).

``--n_trials`` is the study's total target: trials already in the study (complete, pruned or failed) count, so
rerunning the same command after Ctrl-C or a crash runs only the remainder. Failed trials that were retried
(after a worker died) or interrupted by Ctrl-C do not count; their parameters are run again. A worker of this
machine that was killed is known dead at once (its process is gone), so a rerun fails and retries its trial without
waiting for the heartbeat's grace period; workers on other machines are found by their stale heartbeat.

Spawned workers (``--n_jobs``) get the storage URL in the environment (``DOMAINBERT_SWEEP_STORAGE``), not on their
command line, so a database password never shows in ``ps``; users may set that variable instead of ``--storage``.
Flags are spelt with underscores (``--n_trials``); the older hyphenated forms (``--n-trials``) still work.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import logging
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

import optuna
from optuna.trial import TrialState

from domainbert.core.files import plain_name
from domainbert.errors import DomainBertError

try:
    import fcntl
except ImportError:  # Windows: workers may then start a few trials beyond --n_trials
    fcntl = None
from domainbert.sweep.space import PerTrialSeedSampler, SweepSpec, load_spec, make_pruner, overrides, resolve_paths

log = logging.getLogger(__name__)

EPILOG = """\
Any other --key value arguments are fit overrides applied to every trial, e.g.
  --trainer.max_steps 200 --model.init_from path/to/checkpoint

The sweep YAML (configs/sweep/lr_warmup.yaml):
  metric: val/f1_macro           # any metric the model logs at validation
  direction: maximize            # or minimize
  sampler: {type: tpe, seed: 0}  # tpe, random, gp, cmaes, qmc (+ their options)
  pruner: {type: median}         # median, percentile, hyperband, successive_halving, threshold, none
  params:                        # fit-config paths; init_args may be left out
    model.learning_rate: {type: float, low: 1.0e-6, high: 1.0e-4, log: true}
    model.warmup_ratio: {type: float, low: 0.0, high: 0.2}
    model.hidden_dropout: {type: categorical, choices: [0.1, 0.2, 0.3]}

Writes into --out: study.db (default storage), trial_<n>/ (each trial's run folder), trials.csv,
best.yaml (run it with: domainbert fit --config <out>/best.yaml), history.png, importances.png,
contour_learning_rate_warmup_ratio.png and slice.png.
"""


def build_parser() -> argparse.ArgumentParser:
    """The ``domainbert sweep`` argument parser (any unknown ``--key value`` is a fit override)."""
    p = argparse.ArgumentParser(
        prog="domainbert sweep",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
        epilog=EPILOG,
    )
    p.add_argument("--config", action="append", required=True, help="fit config YAML (repeatable, merged in order)")
    p.add_argument("--sweep", required=True, help="sweep YAML: metric, direction, sampler, pruner, params")
    p.add_argument("--metric", help="override the sweep file's metric (e.g. val/loss for pretraining)")
    p.add_argument("--direction", choices=("maximize", "minimize"), help="override the sweep file's direction")
    flag = _flag_adder(p)
    flag("n_trials", type=int, default=20, help="total trials the study should reach (default 20)")
    p.add_argument(
        "--storage",
        default=os.environ.get(STORAGE_ENV),
        help=f"Optuna RDB URL or an SQLite file path (default: ${STORAGE_ENV}, else <out>/study.db); setting "
        f"{STORAGE_ENV} instead keeps a password out of the process list",
    )
    flag("study_name", help="study name (default: the sweep file's study_name, else <config>-<sweep>)")
    flag("n_jobs", "--workers", type=int, default=1, help="parallel worker processes (default 1)")
    p.add_argument("--out", help="sweep folder: trials, plots, best.yaml (default runs/sweeps/<study name>)")
    p.add_argument("--timeout", type=float, help="start no new trial after this many seconds")
    flag("heartbeat_interval", type=int, default=60, help="seconds between trial heartbeats (default 60)")
    flag("grace_period", type=int, help="seconds without heartbeat before a trial is retried (default 2x interval)")
    flag("max_retry", type=int, default=2, help="retries of a trial whose worker died (default 2)")
    flag("no_plots", action="store_true", help="do not write the PNG plots")
    flag("worker_index", type=int, default=0, help=argparse.SUPPRESS)
    return p


#: The environment variable that carries the storage URL (to spawned workers, and optionally from the user).
STORAGE_ENV = "DOMAINBERT_SWEEP_STORAGE"


def _flag_adder(parser: argparse.ArgumentParser):
    """``flag("n_trials", ...)`` adds ``--n_trials`` with the alias ``--n_trials`` (the older spelling)."""

    def flag(name: str, *aliases: str, **kw):
        return parser.add_argument(f"--{name}", f"--{name.replace('_', '-')}", *aliases, dest=name, **kw)

    return flag


def mask_url(url: str) -> str:
    """``url`` with any password replaced by ``***``."""
    url = re.sub(r"^([\w+.-]+://[^:@/]*):.*@", r"\1:***@", url)  # up to the last '@': over-mask, never leak
    return re.sub(r"((?:password|passwd|pwd)=)[^&;\s]*", r"\1***", url, flags=re.IGNORECASE)


def storage_url(storage: str | None, out: Path) -> str:
    """The RDB URL: ``storage`` if it is one, an SQLite URL for a file path, else ``<out>/study.db``."""
    if storage and "://" in storage:
        return storage
    path = Path(storage) if storage else out / "study.db"
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path.resolve()}"


def open_storage(url: str, heartbeat: int, grace: int | None, max_retry: int) -> optuna.storages.RDBStorage:
    """An ``RDBStorage`` with heartbeats; a trial whose worker died goes back in the queue."""
    engine = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}
    if url.startswith("postgresql://") and importlib.util.find_spec("psycopg") is None:
        url = "postgresql+psycopg2://" + url[len("postgresql://") :]  # SQLAlchemy 2.1 defaults to psycopg 3
    for attempt in range(SCHEMA_RACE_RETRIES + 1):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            try:
                return optuna.storages.RDBStorage(
                    url,
                    engine_kwargs=engine,
                    heartbeat_interval=heartbeat,
                    grace_period=grace or 2 * heartbeat,
                    heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(
                        max_retry=max_retry
                    ),
                )
            except Exception as err:  # noqa: BLE001 - sqlalchemy raises many types for a bad URL or server
                if attempt < SCHEMA_RACE_RETRIES and _schema_race(err):
                    # another worker is creating Optuna's tables in this fresh database: wait, then reopen
                    time.sleep(random.uniform(0.2, 1.0))
                    continue
                raise DomainBertError(f"cannot open the study storage {mask_url(url)}: {mask_url(str(err))}") from err
    raise AssertionError("unreachable")


#: How often :func:`open_storage` reopens a fresh database whose schema another worker is creating.
SCHEMA_RACE_RETRIES = 5


def _schema_race(err: BaseException) -> bool:
    """Whether ``err`` is a lost race to create Optuna's schema (a duplicate table, type or version row)."""
    text = f"{type(err).__name__}: {err}"
    return any(s in text for s in ("UniqueViolation", "IntegrityError", "already exists", "DuplicateTable"))


def tally(trials: Sequence[optuna.trial.FrozenTrial]) -> tuple[int, int]:
    """``(finished, running)`` trials of a study.

    Finished counts complete, pruned and failed trials, except failed ones that were retried (their worker
    died) or interrupted by Ctrl-C: their parameters run again.
    """
    retried = set()
    for t in trials:
        retried.update(t.system_attrs.get("retry_history", []))
    finished = 0
    for t in trials:
        if t.state in (TrialState.COMPLETE, TrialState.PRUNED):
            finished += 1
        elif t.state == TrialState.FAIL and t.number not in retried and not t.user_attrs.get("interrupted"):
            finished += 1
    return finished, sum(t.state == TrialState.RUNNING for t in trials)


def check_one_device(cfg) -> None:
    """Refuse fit configs whose trials would start several processes (DDP and the like).

    Lightning's launcher re-runs the command line for every extra rank, which would start extra sweep workers
    rather than ranks of the trial. Trials therefore run on one device each; ``--n_jobs`` runs them side by side.
    """
    devices, strategy = cfg.get("trainer.devices", "auto"), str(cfg.get("trainer.strategy", "auto") or "auto")
    nodes = cfg.get("trainer.num_nodes", 1) or 1
    if isinstance(devices, str) and devices.strip() not in ("auto", "-1"):
        devices = [d for d in devices.split(",") if d.strip()] if "," in devices else int(devices)
    if devices in ("auto", -1, "-1"):
        import torch

        on_gpu = str(cfg.get("trainer.accelerator", "auto")) in ("auto", "gpu", "cuda") and torch.cuda.is_available()
        devices = torch.cuda.device_count() if on_gpu else 1
    count = len(devices) if isinstance(devices, (list, tuple)) else int(devices)
    if count > 1 or nodes > 1 or any(k in strategy.lower() for k in ("ddp", "fsdp", "deepspeed")):
        raise DomainBertError(
            f"sweep trials run on one device each, but the fit config asks for devices={cfg.get('trainer.devices')} "
            f"num_nodes={nodes} strategy={strategy}; add --trainer.devices 1 --trainer.strategy auto "
            "(and --n_jobs N to run N trials side by side)"
        )


class Sweep:
    """One worker's view of a sweep: the spec, the fit arguments, the study and its folder."""

    def __init__(self, ns: argparse.Namespace, fit_overrides: list[str]) -> None:
        """Validate everything a trial needs, before any trial runs."""
        from domainbert.sweep.trial import parse_fit  # imports Lightning: not needed for --help

        if ns.n_trials < 1 or ns.n_jobs < 1:
            raise DomainBertError("--n_trials and --n_jobs must be at least 1")
        for cfg in ns.config:
            if not Path(cfg).is_file():
                raise DomainBertError(f"fit config {cfg} does not exist")
        self.ns = ns
        self.config_paths: list[str] = list(ns.config)
        self.sweep_file: str = ns.sweep
        self.n_trials: int = ns.n_trials
        self.spec: SweepSpec = load_spec(ns.sweep)
        if ns.study_name is not None:
            plain_name(ns.study_name, "--study_name")
        elif self.spec.study_name is not None:
            plain_name(self.spec.study_name, f"{ns.sweep}: study_name")
        self.spec.metric = ns.metric or self.spec.metric
        self.spec.direction = ns.direction or self.spec.direction
        self.base_args = [a for c in ns.config for a in ("--config", c)] + list(fit_overrides)
        parser, cfg = parse_fit(self.base_args)
        resolve_paths(self.spec.params, cfg.keys(), source=ns.sweep)
        examples = {p.path: p.examples() for p in self.spec.params}
        for i in range(max(len(v) for v in examples.values())):  # every bound and choice must type-check
            values = {k: v[min(i, len(v) - 1)] for k, v in examples.items()}
            parse_fit(self.base_args + overrides(values, self.spec.params))
        check_one_device(cfg)
        self.parser, self.config = parser, cfg
        self.name = ns.study_name or self.spec.study_name or f"{Path(ns.config[-1]).stem}-{Path(ns.sweep).stem}"
        plain_name(self.name, "study_name")
        self.out = Path(ns.out or Path("runs") / "sweeps" / self.name).resolve()
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
                f"but {self.ns.sweep} says {spec.direction}; use another --study_name"
            )
        metric = study.user_attrs.get("metric")
        if metric is None:
            study.set_user_attr("metric", spec.metric)
            study.set_user_attr("fit_args", self.base_args)
        elif metric != spec.metric:
            raise DomainBertError(
                f"study '{self.name}' optimises {metric}, but {self.ns.sweep} names {spec.metric}; "
                "use another --study_name"
            )
        return study

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
        except ValueError:
            best = "-"
        retried = {n for t in trials for n in t.system_attrs.get("retry_history", [])}
        for t in sorted(done, key=lambda t: t.number):
            if t.number in retried or t.user_attrs.get("interrupted"):
                print(f"[sweep] trial #{t.number} stopped (worker died or Ctrl-C); it runs again", flush=True)
                continue
            value = f"value={t.value:.6g}" if t.state == TrialState.COMPLETE else t.state.name.lower()
            print(f"[sweep] trial {finished}/{self.ns.n_trials} (#{t.number}) {value} best={best}", flush=True)

    # -- the worker loop ----------------------------------------------------------------------------
    def work(self) -> None:
        """Run trials until the study holds ``--n_trials`` finished ones (or ``--timeout`` passes)."""
        start, waiting_said = time.monotonic(), False
        self._shown = {t.number for t in self.study.get_trials(deepcopy=False) if t.state.is_finished()}
        while True:
            if self.ns.timeout and time.monotonic() - start > self.ns.timeout:
                print(f"[sweep] --timeout {self.ns.timeout:g}s reached; no new trial starts", flush=True)
                return
            # Count and create the trial under a lock shared by this machine's workers, so that they never
            # start more than --n_trials between them (the objective releases it once its trial exists).
            self.claim.acquire()
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                    optuna.storages.fail_stale_trials(self.study)
                fail_dead_workers(self.study)
                finished, running = tally(self.study.get_trials(deepcopy=False))
                if finished >= self.ns.n_trials:
                    return
                if finished + running >= self.ns.n_trials:
                    # The last trials are running elsewhere: wait for them, so that one whose worker died is
                    # retried here once its heartbeat goes stale.
                    self.claim.release()
                    if not waiting_said:
                        print(f"[sweep] waiting for {running} running trial(s) of other workers", flush=True)
                        waiting_said = True
                    time.sleep(min(5.0, self.ns.heartbeat_interval))
                    self.progress(self.study)
                    continue
                self.study.optimize(self.objective, n_trials=1, catch=(Exception,), callbacks=[self.progress])
            finally:
                self.claim.release()
            if self.fatal:
                raise DomainBertError(f"{self.fatal} (sweep file {self.ns.sweep})")

    def requeue_interrupted(self) -> None:
        """Put the parameters of trials stopped by Ctrl-C back in the queue (once each)."""
        trials = self.study.get_trials(deepcopy=False)
        done = {t.user_attrs.get("requeued_from") for t in trials}
        for t in trials:
            if t.state == TrialState.FAIL and t.user_attrs.get("interrupted") and t.number not in done:
                self.study.enqueue_trial(t.params, user_attrs={"requeued_from": t.number})


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


def worker_command(argv: Sequence[str], index: int, url: str) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of spawned worker ``index``.

    The storage URL travels in the environment (:data:`STORAGE_ENV`), never in the command line, so that a
    database password does not show in ``ps``.
    """
    drop_with_value = {"--n-jobs", "--n_jobs", "--workers", "--worker-index", "--worker_index", "--storage"}
    base, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in drop_with_value:
            skip = True
        elif not a.startswith(tuple(f"{f}=" for f in drop_with_value)):
            base.append(a)
    cmd = [sys.executable, "-m", "domainbert", "sweep", *base, "--n_jobs", "1", "--worker_index", str(index)]
    return cmd, {**os.environ, STORAGE_ENV: url}


def _spawn(argv: Sequence[str], n: int, out: Path, url: str) -> list[tuple[subprocess.Popen, Path]]:
    """Start workers 1..n-1 as ``domainbert sweep ... --n_jobs 1``, each logging to ``<out>/worker_<i>.log``."""
    procs = []
    for i in range(1, n):
        logfile = out / f"worker_{i}.log"
        cmd, env = worker_command(argv, i, url)
        with open(logfile, "ab") as fh:
            procs.append((subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env), logfile))
    return procs


def _pid_dead(worker: str) -> bool:
    """Whether ``worker`` (``host:pid``, as trials record it) ran on this machine and its process is gone."""
    from domainbert.core.files import pid_alive

    host, _, pid = worker.rpartition(":")
    return host == socket.gethostname() and pid.isdigit() and not pid_alive(int(pid))


def fail_dead_workers(study: optuna.Study) -> list[int]:
    """Fail, and queue for retry, the running trials whose worker process on this machine is dead.

    Optuna's heartbeat finds dead workers on any machine, but only after ``grace_period`` seconds; a worker of
    this machine that was killed is known dead at once, so a rerun retries its trial without waiting.

    Returns:
        The numbers of the trials failed.
    """
    storage = study._storage
    callback = getattr(storage, "get_heartbeat_stale_trial_callback", lambda: None)()
    failed = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if not _pid_dead(str(t.user_attrs.get("worker", ""))):
            continue
        try:
            if not storage.set_trial_state_values(t._trial_id, state=TrialState.FAIL):
                continue
        except optuna.exceptions.UpdateFinishedTrialError:
            continue  # another worker failed it first
        failed.append(t.number)
        log.info("trial %d: its worker %s is dead; retried", t.number, t.user_attrs["worker"])
        if callback is not None:
            callback(study, copy.deepcopy(storage.get_trial(t._trial_id)))
    return failed


def main(argv: Sequence[str] | None = None) -> None:
    """``domainbert sweep``: see ``domainbert sweep --help``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    ns, extra = build_parser().parse_known_args(argv)
    if extra and not extra[0].startswith("--"):
        raise DomainBertError(f"unexpected argument {extra[0]!r}; fit overrides look like --trainer.max_steps 100")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sweep = Sweep(ns, extra)
    if ns.worker_index == 0:
        sweep.out.mkdir(parents=True, exist_ok=True)
        finished, _ = tally(sweep.study.get_trials(deepcopy=False))
        print(
            f"[sweep] study '{sweep.name}' in {mask_url(sweep.url)}: {finished}/{ns.n_trials} trials finished; "
            f"metric {sweep.spec.metric} ({sweep.spec.direction}); folder {sweep.out}",
            flush=True,
        )
    children = _spawn(argv, ns.n_jobs, sweep.out, sweep.url) if ns.worker_index == 0 and ns.n_jobs > 1 else []
    interrupted = False
    try:
        sweep.work()
    except KeyboardInterrupt:
        interrupted = True
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sweep.requeue_interrupted()
        print("\n[sweep] interrupted; finished trials are kept: rerun the same command to continue", flush=True)
    finally:
        for proc, logfile in children:
            code = _wait(proc)
            if code not in (0, None):
                print(f"[sweep] worker {logfile.stem} exited with status {code}; see {logfile}", flush=True)
    if ns.worker_index != 0:
        return
    from domainbert.sweep.report import report

    try:
        report(sweep, plots=not ns.no_plots)
    except DomainBertError:
        if not interrupted:
            raise
    if interrupted:
        sys.exit(130)


def _wait(proc: subprocess.Popen) -> int | None:
    while True:
        try:
            return proc.wait()
        except KeyboardInterrupt:  # the child got the same Ctrl-C; let it save its trial
            continue
