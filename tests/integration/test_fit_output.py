"""What a fit prints and leaves behind: a handful of lines, a metrics.csv however short the run, no
export of a model that diverged, no empty run folders."""

from __future__ import annotations

import csv
import os
import subprocess
import sys

import lightning.pytorch as L
import pytest

from domainbert.cli import main
from domainbert.errors import DomainBertError
from tests.helpers import ROOT, tiny_mlm_args

#: What a library's chatter looks like in a run's output; none of it may appear.
NOISE = ("Tip:", "litlogger", "litmodels", "Warning", "deprecated", "\x1b[", "LOAD REPORT", "No seed found")


def _run(args: list[str], tmp_path) -> subprocess.CompletedProcess:
    """``domainbert <args>`` in a subprocess, its output captured (not a terminal), as a user's log file gets it."""
    env = {k: v for k, v in os.environ.items() if k not in ("TRANSFORMERS_VERBOSITY", "DOMAINBERT_LOG")}
    env["HF_DATASETS_CACHE"] = str(tmp_path / "datasets")
    return subprocess.run(
        [sys.executable, "-m", "domainbert", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )


def test_a_short_fit_prints_a_handful_of_lines_and_writes_metrics_csv(tiny_bert, corpus_file, tmp_path):
    """3 steps, fewer than log_every_n_steps (5) and no validation: still a metrics.csv with the last step."""
    args = tiny_mlm_args("fit", tiny_bert, corpus_file, tmp_path / "runs")
    proc = _run([*args, "--trainer.max_steps", "3", "--trainer.enable_progress_bar", "true"], tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    lines = [line for line in out.splitlines() if line.strip()]
    for noise in NOISE:
        assert noise not in out, f"{noise!r} in the output:\n{out}"
    assert len(lines) == len(set(lines)), f"a line printed twice:\n{out}"
    run = tmp_path / "runs" / "tiny_debug" / "version_0"
    expected = (f"Run folder: {run} (MaskedLMModule", "Final metrics (step 3): train/loss ", "Exported Hugging Face")
    for start in expected:
        assert sum(line.startswith(start) for line in lines) == 1, f"no line {start!r}:\n{out}"
    assert len(lines) <= 10, out  # also: the seed, the precision, the corpus, the bar's 2nd line, fit stopped, no ckpt
    with open(run / "metrics.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["step"] for r in rows if r.get("train/loss")] == ["2"]  # Lightning numbers step rows from 0


def test_a_fit_without_progress_bar_still_prints_its_final_metrics(tiny_bert, corpus_file, tmp_path, capsys):
    main([*tiny_mlm_args("fit", tiny_bert, corpus_file, tmp_path), "--trainer.max_steps", "4"])
    out = capsys.readouterr().out
    assert "Final metrics (step 4): train/loss " in out and out.count("Exported Hugging Face model to") == 1


def test_a_diverging_learning_rate_stops_with_an_error_and_exports_nothing(tiny_bert, corpus_file, tmp_path, capsys):
    args = tiny_mlm_args("fit", tiny_bert, corpus_file, tmp_path)
    with pytest.raises(SystemExit) as exc:
        main([*args, "--model.learning_rate", "1e3", "--trainer.max_steps", "6", "--trainer.val_check_interval", "3"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "training stopped and nothing exported" in err and "Lower the learning rate" in err
    assert not list(tmp_path.rglob("hf"))


class FailAtStart(L.Callback):
    """Fails when training starts: after the run folder and its config.yaml exist, before any step."""

    def on_train_start(self, trainer, pl_module) -> None:
        raise DomainBertError("stopped before the first step")


def test_a_run_that_stops_before_training_leaves_no_run_folder(tiny_bert, corpus_file, tmp_path, capsys):
    args = tiny_mlm_args("fit", tiny_bert, corpus_file, tmp_path)
    with pytest.raises(SystemExit):
        main([*args, f"--trainer.callbacks+={__name__}.FailAtStart"])
    assert "stopped before the first step" in capsys.readouterr().err
    assert (tmp_path / "tiny_debug").is_dir() and not list((tmp_path / "tiny_debug").iterdir())


def test_fit_help_documents_resuming_and_the_modules(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")
    with pytest.raises(SystemExit) as exc:
        main(["fit", "--help"])
    assert exc.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "distill (domainbert.distill.module.DistillationModule)" in text
    ckpt = text[text.index("--ckpt_path CKPT_PATH Resume") :][:400]
    assert "``last`` (the newest checkpoint" in ckpt and "hpc" not in ckpt and "registry" not in ckpt
    assert "The main advantage is:" not in text  # Lightning's cut docstring is no heading


def test_a_classifier_whose_loss_rose_by_orders_of_magnitude_says_so_last_and_in_its_card(
    tiny_bert, tmp_path, capsys, monkeypatch
):
    """A finite divergence (1e3 on a classifier): exported, but the last line and the model card say so."""
    monkeypatch.chdir(ROOT)  # the config's data paths
    config = str(ROOT / "configs/finetune/tiny_classification.yaml")
    args = ["fit", "--config", config, "--model.init_from", str(tiny_bert), "--trainer.default_root_dir", str(tmp_path)]
    main([*args, "--model.learning_rate", "1e3", "--trainer.max_steps", "6", "--data.predict", "null"])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("Training diverged: the training loss rose from ") and "--model.learning_rate" in last
    card = next(tmp_path.rglob("hf/README.md")).read_text()
    assert "- **Warning: training diverged.** The training loss rose from " in card


def test_a_smoke_fit_then_test_and_predict_best_run_on_its_last_checkpoint_quietly(tiny_bert, tmp_path):
    """``fit --trainer.max_steps 2`` never validates, so ModelCheckpoint(monitor=...) saves nothing: the fit leaves
    ``last.ckpt`` and says so; ``test``/``predict --ckpt_path best`` then run on it and say so in one line. None of the
    three prints a library warning (Lightning's "dirpath has changed" on loading a checkpoint of another run folder),
    and a head started from the probe is not reported as initialised at random."""
    from tests.helpers import TINY_CLS

    common = ["--config", TINY_CLS, "--model.init_from", str(tiny_bert), "--model.pooling", "mean"]
    common += ["--trainer.default_root_dir", str(tmp_path / "runs")]
    fit = _run(["fit", *common, "--model.head_init", "probe", "--trainer.max_steps", "2"], tmp_path)
    out = fit.stdout + fit.stderr
    assert fit.returncode == 0, out[-3000:]
    last = tmp_path / "runs" / "tiny_classification" / "version_0" / "checkpoints" / "last.ckpt"
    assert last.is_file() and sorted(p.name for p in last.parent.iterdir()) == ["last.ckpt"]
    assert "no validation ran, so no checkpoint was saved: the final weights are in" in out
    assert "head initialised from a logistic-regression probe" in out
    assert "initialised at random" not in out, out
    for command in ("test", "predict"):
        proc = _run([command, *common, "--ckpt_path", "best", "--trainer.limit_test_batches", "1"], tmp_path)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out[-3000:]
        assert (
            out.count(
                f"recorded no best checkpoint (no validation ran, or no ModelCheckpoint monitors a metric); "
                f"using its last one, {last}"
            )
            == 1
        ), out
        for noise in (*NOISE, "dirpath has changed", "won't be reloaded"):
            assert noise not in out, f"{noise!r} in the output of {command}:\n{out}"
