"""Exact resume: a run restarted from a mid-epoch checkpoint ends where an uninterrupted one does."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from domainbert.cli import main
from tests.helpers import ROOT, tiny_mlm_args
from tests.helpers.kill import wait_for


def _args(tiny_bert, corpus_file, root, steps):
    return [
        *tiny_mlm_args("fit", tiny_bert, corpus_file, root),
        "--trainer.max_steps",
        str(steps),
        "--trainer.val_check_interval",
        "100",
        "--trainer.limit_val_batches",
        "0",
        "--model.init_args.hidden_dropout",
        "0.1",
        "--trainer.callbacks+=ModelCheckpoint",
        "--trainer.callbacks.every_n_train_steps",
        "3",
        "--trainer.callbacks.save_top_k",
        "-1",
        "--trainer.callbacks.dirpath",
        str(root / "ck"),
    ]


def _weights(run: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(run / "hf" / "model.safetensors"))


def test_resume_mid_epoch_matches_uninterrupted(tiny_bert, corpus_file, tmp_path):
    main(_args(tiny_bert, corpus_file, tmp_path / "a", 8))
    ckpt = tmp_path / "a" / "ck" / "epoch=0-step=3.ckpt"
    assert ckpt.exists()
    main([*_args(tiny_bert, corpus_file, tmp_path / "b", 8), "--ckpt_path", str(ckpt)])
    a, b = _weights(tmp_path / "a/tiny_debug/version_0"), _weights(tmp_path / "b/tiny_debug/version_0")
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=1e-5, msg=k)


def _start(args: list[str], log: Path) -> subprocess.Popen:
    """``domainbert *args`` in a new process group that can import tests/helpers (its output in ``log``)."""
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "domainbert", *args], env=env, stdout=out, stderr=out, start_new_session=True
        )


def _hold_after(marker: Path, step: int) -> list[str]:
    """Arguments that make a fit hold for a kill once step ``step``'s checkpoints are written."""
    hold = "tests.helpers.kill.HoldAfterStep"
    return [f"--trainer.callbacks+={hold}", f"--trainer.callbacks.marker={marker}", f"--trainer.callbacks.step={step}"]


def _kill(proc: subprocess.Popen, marker: Path, log: Path) -> None:
    """SIGKILL ``proc``'s process group once it holds at ``marker``."""
    try:
        wait_for(marker, proc, log)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.mark.faults(kills=1)
def test_sigkill_then_resume_reaches_the_same_step(tiny_bert, corpus_file, tmp_path):
    root = tmp_path / "killed"
    marker, log = tmp_path / "holding", tmp_path / "killed.log"
    _kill(_start([*_args(tiny_bert, corpus_file, root, 12), *_hold_after(marker, 6)], log), marker, log)
    ckpts = sorted((root / "ck").glob("*.ckpt"), key=lambda p: p.stat().st_mtime)
    assert [p.name.rpartition("step=")[2] for p in ckpts] == ["3.ckpt", "6.ckpt"], "killed after step 6's checkpoint"
    main([*_args(tiny_bert, corpus_file, root, 12), "--ckpt_path", str(ckpts[-1])])
    state = torch.load(sorted((root / "ck").glob("*step=12.ckpt"))[0], weights_only=True)
    assert state["global_step"] == 12


RESUME_CONFIG = """\
seed_everything: 0
trainer:
  default_root_dir: {root}
  max_steps: {steps}
  accelerator: cpu
  precision: 32-true
  enable_progress_bar: false
  log_every_n_steps: 1
  limit_val_batches: 0
  callbacks:
    - class_path: lightning.pytorch.callbacks.ModelCheckpoint
      init_args:
        every_n_train_steps: 2
        save_last: true
model:
  class_path: domainbert.modules.mlm.MaskedLMModule
  init_args:
    init_from: {model}
    learning_rate: 1.0e-3
    warmup_ratio: 0.1
    head_warmup_steps: 0
    hidden_dropout: 0.1
data:
  class_path: domainbert.data.corpus.CorpusDataModule
  init_args:
    train: {corpus}
    val_ratio: 0.1
    max_length: 64
    batch_size: 8
"""


def _resume_config(folder: Path, tiny_bert, corpus_file, steps: int, keep_every_step: bool = False) -> Path:
    folder.mkdir(parents=True)
    cfg = folder / "resume.yaml"
    text = RESUME_CONFIG.format(root=folder / "runs", steps=steps, model=tiny_bert, corpus=corpus_file)
    if keep_every_step:
        text = text.replace("every_n_train_steps: 2", "every_n_train_steps: 1\n        save_top_k: -1")
    cfg.write_text(text)
    return cfg


#: batches per epoch of :func:`tiny_corpus` under RESUME_CONFIG: 54 training lines -> 35 blocks of 64 -> 5 batches.
EPOCH = 5


@pytest.fixture(scope="module")
def tiny_corpus(corpus_file, tmp_path_factory) -> Path:
    """The first 60 lines of the fixture corpus: an epoch of RESUME_CONFIG is :data:`EPOCH` steps."""
    path = tmp_path_factory.mktemp("tiny_corpus") / "corpus.txt"
    path.write_text("\n".join(corpus_file.read_text().splitlines()[:60]) + "\n")
    return path


def _run(folder: Path) -> Path:
    return folder / "runs" / "resume" / "version_0"


@pytest.fixture(scope="module")
def uninterrupted(tiny_bert, tiny_corpus, tmp_path_factory) -> Path:
    """A run of 13 steps (epochs 0, 1 and 3 steps of 2), with a checkpoint after every step."""
    folder = tmp_path_factory.mktemp("uninterrupted") / "a"
    main(["fit", "--config", str(_resume_config(folder, tiny_bert, tiny_corpus, 13, keep_every_step=True))])
    return folder


def _assert_same_weights(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=1e-6, msg=k)


@pytest.mark.parametrize(
    "step", [3, EPOCH, EPOCH + 2], ids=["mid_first_epoch", "end_of_first_epoch", "mid_second_epoch"]
)
def test_resume_across_epoch_boundaries_matches_uninterrupted(uninterrupted, tiny_bert, tiny_corpus, tmp_path, step):
    """Resumed from step ``step``, a 13-step run crosses one or two epoch boundaries and ends as the uninterrupted.

    Fails when the order of an epoch after a resume depends on anything but (seed, epoch): the old
    ``StatefulDataLoader(shuffle=True, generator=g)`` shuffled the epoch after a mid-epoch restore differently.
    """
    (ckpt,) = (_run(uninterrupted) / "checkpoints").glob(f"*-step={step}.ckpt")
    saved = torch.load(ckpt, weights_only=True)
    assert saved["epoch"] == (step - 1) // EPOCH  # the tiny corpus gives the epoch length the test relies on
    cfg = _resume_config(tmp_path / "b", tiny_bert, tiny_corpus, 13, keep_every_step=True)
    main(["fit", "--config", str(cfg), "--ckpt_path", str(ckpt)])
    final = torch.load(_run(tmp_path / "b") / "checkpoints" / "last.ckpt", weights_only=True)
    assert final["global_step"] == 13 and final["epoch"] == 2  # the resumed run did cross into the third epoch
    _assert_same_weights(_weights(_run(uninterrupted)), _weights(_run(tmp_path / "b")))


@pytest.mark.slow
@pytest.mark.faults(kills=1)
def test_fit_ckpt_path_last_after_sigkill_resumes_the_run_in_its_own_folder(tiny_bert, tiny_corpus, tmp_path):
    """``fit --config X --ckpt_path last`` in a new process continues the killed run of X in its own folder.

    On the tiny corpus an epoch is 5 steps: the 20 steps span 4 epochs, so the resumed run crosses at least one
    epoch boundary, and still ends with the weights of the uninterrupted run.
    """
    steps = 20
    main(["fit", "--config", str(_resume_config(tmp_path / "a", tiny_bert, tiny_corpus, steps))])
    cfg = _resume_config(tmp_path / "b", tiny_bert, tiny_corpus, steps)
    run = tmp_path / "b" / "runs" / "resume" / "version_0"
    marker, log = tmp_path / "holding", tmp_path / "killed.log"  # the run holds after its first checkpoint (step 2)
    _kill(_start(["fit", "--config", str(cfg), *_hold_after(marker, 2)], log), marker, log)
    killed = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    killed_at = killed["global_step"]
    assert killed_at == 2 and not (run / "hf").exists(), "the fit was not interrupted after its first checkpoint"
    metrics_before = (run / "metrics.csv").read_text().splitlines() if (run / "metrics.csv").exists() else []

    main(["fit", "--config", str(cfg), "--ckpt_path", "last"])  # the same command again, plus --ckpt_path last

    assert [p.name for p in run.parent.iterdir()] == ["version_0"]  # no new version folder
    final = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert final["global_step"] == steps and final["epoch"] == steps // EPOCH - 1
    assert killed["epoch"] < final["epoch"], "the resumed run did not cross an epoch boundary"
    assert (run / "config.yaml").exists() and (run / "config.resume-1.yaml").exists()
    assert set(metrics_before[1:]) <= set((run / "metrics.csv").read_text().splitlines())  # nothing logged is lost
    _assert_same_weights(_weights(_run(tmp_path / "a")), _weights(run))
