"""A sweep's user errors are one line: a missing data file before any trial, a trial's user error without traceback."""

from __future__ import annotations

import logging

import optuna
import pytest

from domainbert.cli import main
from domainbert.errors import DomainBertError
from domainbert.sweep.preflight import check_fit
from domainbert.sweep.space import load_spec
from domainbert.sweep.trial_errors import OPTUNA_TRIAL_LOGGER, quiet_sweep
from tests.helpers import FIX, ROOT, TINY_CLS, faults_summary

SPACE = str(ROOT / "configs" / "sweep" / "lr_warmup.yaml")


def _fit_args(train: str) -> list[str]:
    return ["--config", TINY_CLS, "--data.train", train, "--data.val", str(FIX / "cls_val.jsonl")]


@pytest.mark.faults(bad_inputs=1)
def test_a_missing_training_file_is_refused_before_any_trial(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the shipped config's relative paths do not resolve here
    message = r"^--data.train: nowhere/train.jsonl: no such file or folder \(read from"
    with pytest.raises(DomainBertError, match=message):
        check_fit(_fit_args("nowhere/train.jsonl"), load_spec(SPACE))
    check_fit(_fit_args(str(FIX / "cls_train.jsonl")), load_spec(SPACE))  # the same with the file there passes


@pytest.mark.faults(bad_inputs=1)
def test_the_sweep_command_says_so_in_one_line_and_starts_no_study(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "sw"
    with pytest.raises(SystemExit) as exc:
        main(["sweep", "--sweep", SPACE, "--n_trials", "2", "--out", str(out), *_fit_args("nowhere/train.jsonl")])
    assert exc.value.code == 2
    line = faults_summary.check_one_line(capsys.readouterr().err)
    assert "nowhere/train.jsonl: no such file or folder" in line and "every trial would fail" in line
    assert not (out / "study.db").exists()


def _failed_trial_records(caplog, error: Exception) -> list[logging.LogRecord]:
    def objective(trial: optuna.Trial) -> float:
        trial.suggest_float("x", 0, 1)
        raise error

    with caplog.at_level(logging.WARNING, logger="optuna"):
        optuna.create_study().optimize(objective, n_trials=1, catch=(Exception,))
    return [r for r in caplog.records if r.name == OPTUNA_TRIAL_LOGGER and "failed with parameters" in r.getMessage()]


def test_a_trials_user_error_is_logged_without_its_traceback_and_a_bug_with_it(caplog, monkeypatch):
    monkeypatch.setattr(logging.getLogger(OPTUNA_TRIAL_LOGGER), "filters", [])
    monkeypatch.setattr(logging.getLogger("optuna"), "propagate", True)  # caplog listens on the root logger
    quiet_sweep()
    wrapped = RuntimeError("a library's wrapper")
    wrapped.__cause__ = DomainBertError("data/train.jsonl: no such file or folder")
    for error in (DomainBertError("the loss is NaN at step 3"), wrapped):
        records = _failed_trial_records(caplog, error)
        assert records and all(r.exc_info is None for r in records)
        caplog.clear()
    records = _failed_trial_records(caplog, KeyError("a bug"))
    assert records and all(r.exc_info is not None and isinstance(r.exc_info[1], KeyError) for r in records)


def test_quiet_sweep_adds_its_filter_once():
    quiet_sweep()
    quiet_sweep()
    names = [type(f).__name__ for f in logging.getLogger(OPTUNA_TRIAL_LOGGER).filters]
    assert names.count("UserErrorsWithoutTraceback") == 1
