"""``domainbert sweep``: real fits of a toy LightningModule (tests/helpers/sweep_toy.py) as Optuna trials."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml
from huggingface_hub import ModelCard
from optuna.trial import TrialState

from domainbert.cli import cli_main
from domainbert.errors import DomainBertError
from domainbert.sweep import command as sweep
from domainbert.sweep.bookkeeping import tally
from domainbert.sweep.report import ReportContext, report
from domainbert.sweep.storage import open_storage
from domainbert.sweep.worker import Sweep
from tests.helpers.kill import wait_for

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
FIX = TESTS / "fixtures"
FIT = FIX / "sweep_fit.yaml"
SPACE = FIX / "sweep_toy_space.yaml"

optuna.logging.set_verbosity(optuna.logging.WARNING)


def run_sweep(out: Path, *extra: str, space: Path = SPACE, n: int = 4) -> optuna.Study:
    sweep.main(["--config", str(FIT), "--sweep", str(space), "--n-trials", str(n), "--out", str(out), *extra])
    return load(out)


def load(out: Path) -> optuna.Study:
    return optuna.load_study(study_name=None, storage=f"sqlite:///{out}/study.db")


def by_state(study: optuna.Study, state: TrialState) -> list[optuna.trial.FrozenTrial]:
    return [t for t in study.get_trials() if t.state == state]


@pytest.fixture
def toy_path(monkeypatch):
    """Let worker subprocesses import tests/helpers/sweep_toy.py."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))


def test_sweep_completes_writes_results_and_best_yaml_reproduces_the_best_trial(tmp_path, monkeypatch, capsys):
    out = tmp_path / "sweep"
    study = run_sweep(out, n=4)
    done = by_state(study, TrialState.COMPLETE)
    assert len(done) == 4
    assert len({tuple(t.params.values()) for t in done}) == 4
    for t in done:  # each trial is a real fit in its own run folder
        run_dir = Path(t.user_attrs["run_dir"])
        assert run_dir.is_relative_to(out / f"trial_{t.number:03d}")
        assert (run_dir / "config.yaml").is_file()
        # reported at each validation by global step: 3 validations inside the one epoch
        assert sorted(t.intermediate_values) == [4, 8, 12]
        assert t.value == pytest.approx(min(t.intermediate_values.values()))
    printed = capsys.readouterr().out
    assert "trial 4/4" in printed and "best=" in printed
    assert "state" in printed and "learning_rate=" in printed  # the final table
    for png in ("history.png", "importances.png", "contour_learning_rate_warmup_ratio.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"

    best_yaml = out / "best.yaml"
    cfg = yaml.safe_load(best_yaml.read_text())
    best = study.best_trial
    assert cfg["model"]["init_args"]["learning_rate"] == best.params["model.learning_rate"]
    assert cfg["model"]["init_args"]["warmup_ratio"] == best.params["model.warmup_ratio"]
    assert cfg["trainer"]["default_root_dir"] == "runs"  # the user's, not the trial's

    monkeypatch.chdir(tmp_path)
    cli = cli_main(["fit", "--config", str(best_yaml)])  # as `domainbert fit --config best.yaml`
    assert cli.model.hparams.learning_rate == best.params["model.learning_rate"]
    assert float(cli.trainer.checkpoint_callback.best_model_score) == pytest.approx(best.value, rel=1e-5)
    assert Path(cli.trainer.log_dir) == Path("runs/sweep_fit-best/version_0")
    assert (tmp_path / cli.trainer.log_dir / "config.yaml").is_file()


def test_ctrl_c_keeps_finished_trials_and_a_rerun_continues_the_study(tmp_path, capsys):
    out, marker = tmp_path / "s", tmp_path / "interrupt"
    interrupting = ("--no-plots", f"--model.init_args.interrupt_marker={marker}")
    first = run_sweep(out, *interrupting, n=1).get_trials()[0].value
    marker.touch()  # the next trial is interrupted as by Ctrl-C
    with pytest.raises(SystemExit) as stop:
        run_sweep(out, *interrupting, n=3)
    assert stop.value.code == 130
    assert "rerun the same command to continue" in capsys.readouterr().out
    trials = load(out).get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.FAIL, TrialState.WAITING]
    assert trials[1].user_attrs["interrupted"]
    assert trials[2].system_attrs["fixed_params"] == trials[1].params  # requeued
    assert tally(trials) == (1, 0)  # the interrupted trial does not count

    study = run_sweep(out, *interrupting, n=3)  # the same command: only the remainder runs
    trials = study.get_trials()
    assert trials[0].value == first
    assert [t.state for t in trials[2:]] == [TrialState.COMPLETE] * 2
    assert trials[2].params == trials[1].params
    assert tally(trials) == (3, 0) and len(trials) == 4


def test_median_pruner_stops_diverging_trials_at_the_first_validation(tmp_path):
    study = run_sweep(tmp_path / "s", "--no-plots", space=FIX / "sweep_prune.yaml", n=3)
    trials = study.get_trials()
    assert [t.params["model.learning_rate"] for t in trials] == [0.05, 4.0, 0.05]
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.PRUNED, TrialState.COMPLETE]
    for t in trials:
        assert sorted(t.intermediate_values) == ([4] if t.state == TrialState.PRUNED else [4, 8, 12])


def test_a_failing_trial_is_recorded_and_the_sweep_goes_on(tmp_path, capsys):
    with pytest.raises(DomainBertError, match="no trial .* completed"):
        run_sweep(tmp_path / "s", "--no-plots", space=FIX / "sweep_fail.yaml", n=2)
    trials = load(tmp_path / "s").get_trials()
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.FAIL]
    assert all("toy failure on purpose" in t.user_attrs["error"] for t in trials)
    assert "toy failure on purpose" in capsys.readouterr().out  # in the table


def test_a_metric_the_model_does_not_log_stops_the_sweep_after_one_trial(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text(
        "metric: val/f1\ndirection: maximize\nparams:\n  model.learning_rate: {type: float, low: 0.01, high: 1}"
    )
    with pytest.raises(DomainBertError, match=r"'val/f1' is not logged .*val/loss"):
        run_sweep(tmp_path / "s", space=space, n=3)
    assert len(load(tmp_path / "s").get_trials()) == 1


def test_an_unknown_path_is_a_clear_error_before_any_trial(tmp_path):
    with pytest.raises(DomainBertError, match=r"'model\.learnin_rate' is not in the fit config.*model\.learning_rate"):
        run_sweep(tmp_path / "s", space=FIX / "sweep_typo.yaml")
    assert not (tmp_path / "s").exists()


def test_a_value_the_config_rejects_is_an_error_before_any_trial(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text(
        "metric: val/loss\ndirection: minimize\nparams:\n  model.hidden: {type: categorical, choices: [8, w]}"
    )
    with pytest.raises(DomainBertError, match="hidden"):
        run_sweep(tmp_path / "s", space=space)
    assert not (tmp_path / "s").exists()


def test_multi_device_trials_are_refused_before_any_trial(tmp_path):
    with pytest.raises(DomainBertError, match="one device each.*--trainer.devices 1"):
        run_sweep(tmp_path / "s", "--trainer.devices", "2")
    assert not (tmp_path / "s").exists()


def test_report_needs_only_its_context_not_the_worker(tmp_path):
    out = tmp_path / "s"
    run_sweep(out, "--no_plots", n=1)
    ns, extra = sweep.build_parser().parse_known_args(
        ["--config", str(FIT), "--sweep", str(SPACE), "--n_trials", "1", "--out", str(out)]
    )
    ctx = Sweep(ns, extra).report_context()
    assert isinstance(ctx, ReportContext) and ctx.config == str(FIT) and ctx.out == out.resolve()
    (out / "best.yaml").unlink()
    assert report(ctx, plots=False) == out.resolve() / "best.yaml"
    assert yaml.safe_load((out / "best.yaml").read_text())["run_name"] == "sweep_fit-best"


def start_and_kill(args: list[str], log_path: Path, out: Path) -> list[optuna.trial.FrozenTrial]:
    """Run ``domainbert sweep args`` in a subprocess and SIGKILL it while its second trial trains.

    The toy's second fit writes ``holding`` when it starts training (its parameters all sampled) and waits to be
    killed (``hold_dir``, tests/helpers/sweep_toy.py): the kill comes at that point on any machine.
    """
    hold_dir = out.parent / f"{out.name}-hold"
    with open(log_path, "wb") as log:
        cmd = [sys.executable, "-m", "domainbert", "sweep", *args, f"--model.init_args.hold_dir={hold_dir}"]
        proc = subprocess.Popen(cmd, stdout=log, stderr=log)
    try:
        wait_for(hold_dir / "holding", proc, log_path)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    before = load(out).get_trials()
    assert [t.state for t in before] == [TrialState.COMPLETE, TrialState.RUNNING], log_path.read_text()[-3000:]
    assert before[1].params.keys() == before[0].params.keys()  # killed while training, not while sampling
    return before


@pytest.mark.faults(kills=1)
def test_a_rerun_retries_a_dead_workers_trial_at_once(tmp_path, toy_path, capsys):
    """The rerun does not wait for the heartbeat's grace period (120 s here): the worker's process is gone."""
    out = tmp_path / "s"
    args = ["--config", str(FIT), "--sweep", str(SPACE), "--n_trials", "2", "--out", str(out), "--no_plots"]
    before = start_and_kill(args, tmp_path / "first.log", out)
    killed = before[-1]
    # --timeout: without the fix the rerun only waits for the "other worker" and gives up with the trial running
    sweep.main([*args, "--heartbeat_interval", "60", "--timeout", "20"])
    after = load(out).get_trials()
    assert after[killed.number].state == TrialState.FAIL
    retry = [t for t in after if t.system_attrs.get("failed_trial") == killed.number]
    assert len(retry) == 1 and retry[0].state == TrialState.COMPLETE and retry[0].params == killed.params
    assert tally(after) == (2, 0)
    assert "waiting for" not in capsys.readouterr().out


@pytest.mark.faults(kills=1)
def test_killed_sweep_resumes_with_two_workers_without_losing_trials(tmp_path, toy_path):
    """A worker is SIGKILLed mid-trial; the same command, now with --n-jobs 2, continues the study.

    One test for both (kill/resume, two workers on one storage) because each fresh interpreter costs ~10 s.
    """
    out = tmp_path / "s"
    args = ["--config", str(FIT), "--sweep", str(SPACE), "--n-trials", "4", "--out", str(out), "--no-plots"]
    args += ["--heartbeat-interval", "1", "--grace-period", "2"]
    before = start_and_kill(args, tmp_path / "first.log", out)
    killed = before[-1]
    finished = {t.number: t.value for t in before if t.state == TrialState.COMPLETE}

    # The same command again, with two workers; the barrier makes each run at least one trial.
    sweep.main([*args, "--n-jobs", "2", f"--model.init_args.barrier_dir={tmp_path / 'barrier'}"])

    after = load(out).get_trials()
    log = (out / "worker_1.log").read_text()[-3000:]
    for number, value in finished.items():  # nothing finished is lost
        assert after[number].state == TrialState.COMPLETE and after[number].value == value
    assert after[killed.number].state == TrialState.FAIL  # the dead worker's trial...
    retry = [t for t in after if t.system_attrs.get("failed_trial") == killed.number]
    assert len(retry) == 1 and retry[0].state == TrialState.COMPLETE, log  # ...was run again
    assert retry[0].params == killed.params and retry[0].number > killed.number
    assert tally(after) == (4, 0)
    assert [t.number for t in after] == list(range(len(after)))  # numbering continued
    new = [t for t in after if t.number > killed.number]
    assert len({t.user_attrs["worker"] for t in new}) == 2, log  # both workers ran trials...
    assert len({tuple(t.params.values()) for t in new}) == len(new)  # ...with distinct parameters
    assert len({t.user_attrs["trial_dir"] for t in new}) == len(new)  # ...in distinct folders


def test_sweep_of_the_tiny_pretraining_config(tmp_path, tiny_bert, corpus_file):
    out = tmp_path / "mlm"
    sweep.main(
        ["--config", str(ROOT / "configs/pretrain/tiny_debug.yaml"), "--n-trials", "2", "--out", str(out)]
        + ["--sweep", str(ROOT / "configs/sweep/lr_warmup_dropout.yaml"), "--metric", "val/loss"]
        + ["--direction", "minimize", "--no-plots", f"--model.init_from={tiny_bert}"]
        + [f"--data.init_args.train={corpus_file}", "--trainer.max_steps=2", "--trainer.val_check_interval=1"]
        + ["--trainer.limit_val_batches=1"]
    )
    study = load(out)
    assert study.direction == optuna.study.StudyDirection.MINIMIZE
    assert len(by_state(study, TrialState.COMPLETE)) == 2
    best = yaml.safe_load((out / "best.yaml").read_text())
    assert best["model"]["init_args"]["hidden_dropout"] == study.best_params["model.hidden_dropout"]
    assert best["model"]["init_args"]["init_from"] == str(tiny_bert)
    for t in study.get_trials():
        assert sorted(t.intermediate_values) == [1, 2]
        assert (Path(t.user_attrs["run_dir"]) / "hf" / "config.json").is_file()  # the trial's own HF export
        card = ModelCard.load(Path(t.user_attrs["run_dir"]) / "hf" / "README.md")
        config = Path(t.user_attrs["run_dir"]).resolve() / "config.yaml"
        assert f"domainbert fit --config {config}\n" in card.text and card.data.pipeline_tag == "fill-mask"


@pytest.mark.postgres
def test_postgres_storage_shared_study(tmp_path):
    url = os.environ.get("DOMAINBERT_TEST_POSTGRES")
    if not url:
        pytest.skip("set DOMAINBERT_TEST_POSTGRES=postgresql://user:pass@host/db to run")
    name = f"test-{os.getpid()}-{time.time_ns()}"
    args = ["--config", str(FIT), "--sweep", str(SPACE), "--n-trials", "2", "--out", str(tmp_path / "s")]
    sweep.main([*args, "--storage", url, "--study-name", name, "--no-plots"])
    assert not (tmp_path / "s" / "study.db").exists()  # the study lives in PostgreSQL, not in a SQLite file
    storage = open_storage(url, 60, None, 1)  # the driver the sweep uses (psycopg2 where psycopg 3 is absent)
    study = optuna.load_study(study_name=name, storage=storage)
    assert len(by_state(study, TrialState.COMPLETE)) == 2
    optuna.delete_study(study_name=name, storage=storage)
