"""Exact resume: a run restarted from a mid-epoch checkpoint ends where an uninterrupted one does."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from domainbert.cli import main

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "configs/pretrain/tiny_debug.yaml")


def _args(tiny_bert, corpus_file, root, steps):
    return [
        "fit",
        "--config",
        TINY,
        "--model.init_from",
        str(tiny_bert),
        "--data.train",
        str(corpus_file),
        "--trainer.default_root_dir",
        str(root),
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


@pytest.mark.faults(kills=1)
def test_sigkill_then_resume_reaches_the_same_step(tiny_bert, corpus_file, tmp_path):
    root = tmp_path / "killed"
    args = _args(tiny_bert, corpus_file, root, 12)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "domainbert", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.time() + 240
    while time.time() < deadline and not list((root / "ck").glob("*step=6.ckpt")):
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    ckpts = sorted((root / "ck").glob("*.ckpt"), key=lambda p: p.stat().st_mtime)
    assert ckpts, "no checkpoint was written before the kill"
    main([*_args(tiny_bert, corpus_file, root, 12), "--ckpt_path", str(ckpts[-1])])
    state = torch.load(sorted((root / "ck").glob("*step=12.ckpt"))[0], weights_only=True)
    assert state["global_step"] == 12
