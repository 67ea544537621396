"""Which trials count towards ``--n_trials``: retried and interrupted ones run again and do not count."""

from __future__ import annotations

import os
import socket

import optuna
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial

from domainbert.sweep.bookkeeping import fail_dead_workers, requeue_interrupted, retried, tally

X = {"x": FloatDistribution(0, 1)}


def _trial(state: TrialState, number: int, interrupted: bool = False, retry_of: int | None = None):
    t = create_trial(
        state=state,
        params={"x": 0.5},
        distributions=X,
        value=1.0 if state == TrialState.COMPLETE else None,
        user_attrs={"interrupted": interrupted},
        system_attrs={"retry_history": [retry_of]} if retry_of is not None else {},
    )
    t.number = number
    return t


def test_retried_and_interrupted_trials_do_not_count():
    trials = [
        _trial(TrialState.COMPLETE, 0),
        _trial(TrialState.PRUNED, 1),
        _trial(TrialState.FAIL, 2),  # a plain failure counts: its parameters do not run again
        _trial(TrialState.FAIL, 3),  # its worker died...
        _trial(TrialState.RUNNING, 4, retry_of=3),  # ...and it runs again here
        _trial(TrialState.FAIL, 5, interrupted=True),  # Ctrl-C
        _trial(TrialState.WAITING, 6),
    ]
    assert retried(trials) == {3}
    assert tally(trials) == (3, 1)


def test_interrupted_trials_are_requeued_once():
    study = optuna.create_study()
    study.add_trial(
        create_trial(state=TrialState.FAIL, params={"x": 0.25}, distributions=X, user_attrs={"interrupted": True})
    )
    study.add_trial(create_trial(state=TrialState.FAIL, params={"x": 0.75}, distributions=X))
    requeue_interrupted(study)
    requeue_interrupted(study)
    waiting = study.get_trials(states=(TrialState.WAITING,))
    assert len(waiting) == 1 and waiting[0].system_attrs["fixed_params"] == {"x": 0.25}
    assert waiting[0].user_attrs["requeued_from"] == 0


def test_only_trials_of_dead_workers_of_this_machine_fail(tmp_path):
    dead = 2**22  # above Linux's largest pid (PID_MAX_LIMIT): no process of this machine has it
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 's.db'}")
    study = optuna.create_study(storage=storage)
    here = socket.gethostname()
    for worker in (f"{here}:{os.getpid()}", f"{here}:{dead}", "other-host:1", "no-pid-recorded", ""):
        study.ask().set_user_attr("worker", worker)
    assert fail_dead_workers(study) == [1]
    assert [t.state for t in study.get_trials()] == [TrialState.RUNNING, TrialState.FAIL] + [TrialState.RUNNING] * 3
