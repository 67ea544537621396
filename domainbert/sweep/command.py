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
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import optuna

from domainbert.errors import DomainBertError
from domainbert.sweep.bookkeeping import requeue_interrupted, tally
from domainbert.sweep.storage import STORAGE_ENV, mask_url
from domainbert.sweep.trial_errors import quiet_sweep
from domainbert.sweep.worker import Sweep

if TYPE_CHECKING:
    from domainbert.sweep.report import ReportContext

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
    p.add_argument(
        "--config", action="append", required=True, metavar="YAML", help="fit config (repeatable, merged in order)"
    )
    p.add_argument(
        "--sweep", required=True, metavar="YAML", help="sweep file: metric, direction, sampler, pruner, params"
    )
    p.add_argument("--metric", help="override the sweep file's metric (e.g. val/loss for pretraining)")
    p.add_argument("--direction", choices=("maximize", "minimize"), help="override the sweep file's direction")
    flag = _flag_adder(p)
    flag("n_trials", type=int, default=20, metavar="N", help="total trials the study should reach (default 20)")
    p.add_argument(
        "--storage",
        default=os.environ.get(STORAGE_ENV),
        metavar="URL",
        help=f"Optuna RDB URL or an SQLite file path (default: ${STORAGE_ENV}, else <out>/study.db); setting "
        f"{STORAGE_ENV} instead keeps a password out of the process list",
    )
    flag("study_name", metavar="NAME", help="study name (default: the sweep file's study_name, else <config>-<sweep>)")
    flag("n_jobs", "--workers", type=int, default=1, metavar="N", help="parallel worker processes (default 1)")
    p.add_argument(
        "--out",
        metavar="DIR",
        help="sweep folder: trials, plots, best.yaml (default runs/sweeps/<study name>); new, empty, or one a sweep "
        "wrote (a rerun continues it), never a folder of yours",
    )
    p.add_argument("--timeout", type=float, metavar="SECONDS", help="start no new trial after this many seconds")
    flag(
        "heartbeat_interval",
        type=int,
        default=60,
        metavar="SECONDS",
        help="seconds between trial heartbeats (default 60)",
    )
    flag(
        "grace_period",
        type=int,
        metavar="SECONDS",
        help="seconds without heartbeat before a trial is retried (default 2x the interval)",
    )
    flag("max_retry", type=int, default=2, metavar="N", help="retries of a trial whose worker died (default 2)")
    flag("no_plots", action="store_true", help="do not write the PNG plots")
    flag(
        "worker_index",
        type=int,
        default=0,
        metavar="I",
        help="internal: set by --n_jobs on the workers it spawns (0, the default, is the one that reports)",
    )
    return p


def _flag_adder(parser: argparse.ArgumentParser):
    """``flag("n_trials", ...)`` adds ``--n_trials`` with the alias ``--n-trials`` (the older spelling)."""

    def flag(name: str, *aliases: str, **kw):
        return parser.add_argument(f"--{name}", f"--{name.replace('_', '-')}", *aliases, dest=name, **kw)

    return flag


def worker_command(argv: Sequence[str], index: int, url: str) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of spawned worker ``index``.

    The storage URL travels in the environment (:data:`~domainbert.sweep.storage.STORAGE_ENV`), never in the
    command line, so that a database password does not show in ``ps``.
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


def spawn(argv: Sequence[str], n: int, out: Path, url: str) -> list[tuple[subprocess.Popen, Path]]:
    """Start workers 1..n-1 as ``domainbert sweep ... --n_jobs 1``, each logging to ``<out>/worker_<i>.log``."""
    procs = []
    for i in range(1, n):
        logfile = out / f"worker_{i}.log"
        cmd, env = worker_command(argv, i, url)
        with open(logfile, "ab") as fh:
            procs.append((subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env), logfile))
    return procs


def main(argv: Sequence[str] | None = None) -> None:
    """``domainbert sweep``: see ``domainbert sweep --help``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    ns, extra = build_parser().parse_known_args(argv)
    if extra and not extra[0].startswith("--"):
        raise DomainBertError(f"unexpected argument {extra[0]!r}; fit overrides look like --trainer.max_steps 100")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    quiet_sweep()
    sweep = Sweep(ns, extra)
    lead = ns.worker_index == 0  # the worker that spawns the others and writes the report
    if lead:
        sweep.out.mkdir(parents=True, exist_ok=True)
        finished, _ = tally(sweep.study.get_trials(deepcopy=False))
        print(
            f"[sweep] study '{sweep.name}' in {mask_url(sweep.url)}: {finished}/{ns.n_trials} trials finished; "
            f"metric {sweep.spec.metric} ({sweep.spec.direction}); folder {sweep.out}",
            flush=True,
        )
    children = spawn(argv, ns.n_jobs, sweep.out, sweep.url) if lead and ns.n_jobs > 1 else []
    interrupted = False
    try:
        sweep.work()
    except KeyboardInterrupt:
        interrupted = True
        signal.signal(signal.SIGINT, signal.default_int_handler)
        requeue_interrupted(sweep.study)
        print("\n[sweep] interrupted; finished trials are kept: rerun the same command to continue", flush=True)
    finally:
        for proc, logfile in children:
            code = _wait(proc)
            if code not in (0, None):
                print(f"[sweep] worker {logfile.stem} exited with status {code}; see {logfile}", flush=True)
    if not lead:
        return
    _report(sweep.report_context(), plots=not ns.no_plots, interrupted=interrupted)
    if interrupted:
        sys.exit(130)


def _report(ctx: ReportContext, plots: bool, interrupted: bool) -> None:
    """Write the report; after Ctrl-C, a study with no complete trial yet is no error."""
    from domainbert.sweep.report import report  # imports Lightning: not needed for --help

    try:
        report(ctx, plots=plots)
    except DomainBertError:
        if not interrupted:
            raise


def _wait(proc: subprocess.Popen) -> int | None:
    """Wait for a spawned worker, through the Ctrl-C it got too (it saves its trial first)."""
    while True:
        try:
            return proc.wait()
        except KeyboardInterrupt:
            continue
