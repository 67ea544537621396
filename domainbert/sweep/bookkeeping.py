"""Which of a study's trials count towards ``--n_trials``, and the trials that must run again.

A failed trial whose worker died is retried by Optuna (``retry_history``), and one stopped by Ctrl-C is put back
in the queue (``interrupted``): neither counts as finished, since its parameters run again.
"""

from __future__ import annotations

import copy
import logging
import socket
from collections.abc import Sequence

import optuna
from optuna.trial import FrozenTrial, TrialState

from domainbert.core.compat import study_storage, trial_id
from domainbert.core.files import pid_alive

log = logging.getLogger(__name__)


def retried(trials: Sequence[FrozenTrial]) -> set[int]:
    """The numbers of the failed trials that were retried as another trial (their worker died)."""
    return {n for t in trials for n in t.system_attrs.get("retry_history", [])}


def runs_again(trial: FrozenTrial, retried_numbers: set[int]) -> bool:
    """Whether ``trial`` was stopped (worker died, or Ctrl-C) and its parameters run again in another trial."""
    return trial.number in retried_numbers or bool(trial.user_attrs.get("interrupted"))


def tally(trials: Sequence[FrozenTrial]) -> tuple[int, int]:
    """``(finished, running)`` trials of a study.

    Finished counts complete, pruned and failed trials, except failed ones that were retried (their worker
    died) or interrupted by Ctrl-C: their parameters run again.
    """
    again = retried(trials)
    finished = 0
    for t in trials:
        if t.state in (TrialState.COMPLETE, TrialState.PRUNED):
            finished += 1
        elif t.state == TrialState.FAIL and not runs_again(t, again):
            finished += 1
    return finished, sum(t.state == TrialState.RUNNING for t in trials)


def requeue_interrupted(study: optuna.Study) -> None:
    """Put the parameters of trials stopped by Ctrl-C back in the queue (once each)."""
    trials = study.get_trials(deepcopy=False)
    done = {t.user_attrs.get("requeued_from") for t in trials}
    for t in trials:
        if t.state == TrialState.FAIL and t.user_attrs.get("interrupted") and t.number not in done:
            study.enqueue_trial(t.params, user_attrs={"requeued_from": t.number})


def _pid_dead(worker: str) -> bool:
    """Whether ``worker`` (``host:pid``, as trials record it) ran on this machine and its process is gone."""
    host, _, pid = worker.rpartition(":")
    return host == socket.gethostname() and pid.isdigit() and not pid_alive(int(pid))


def fail_dead_workers(study: optuna.Study) -> list[int]:
    """Fail, and queue for retry, the running trials whose worker process on this machine is dead.

    Optuna's heartbeat finds dead workers on any machine, but only after ``grace_period`` seconds; a worker of
    this machine that was killed is known dead at once, so a rerun retries its trial without waiting.

    Returns:
        The numbers of the trials failed.
    """
    storage = study_storage(study)
    callback = getattr(storage, "get_heartbeat_stale_trial_callback", lambda: None)()
    failed = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if not _pid_dead(str(t.user_attrs.get("worker", ""))):
            continue
        try:
            if not storage.set_trial_state_values(trial_id(t), state=TrialState.FAIL):
                continue
        except optuna.exceptions.UpdateFinishedTrialError:
            continue  # another worker failed it first
        failed.append(t.number)
        log.info("trial %d: its worker %s is dead; retried", t.number, t.user_attrs["worker"])
        if callback is not None:
            callback(study, copy.deepcopy(storage.get_trial(trial_id(t))))
    return failed
