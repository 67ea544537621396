"""Exact resume: a run restarted from a mid-epoch checkpoint ends where an uninterrupted one does."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torchdata.stateful_dataloader import StatefulDataLoader

from domainbert.cli import main
from domainbert.data.corpus import ResumableEpochSampler
from domainbert.errors import DomainBertError
from tests.helpers import tiny_mlm_args


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
    proc = subprocess.Popen(
        [sys.executable, "-m", "domainbert", "fit", "--config", str(cfg)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None and not (run / "checkpoints" / "last.ckpt").exists():
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    killed = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    killed_at = killed["global_step"]
    assert 0 < killed_at < steps and not (run / "hf").exists(), "the fit was not interrupted"
    metrics_before = (run / "metrics.csv").read_text().splitlines() if (run / "metrics.csv").exists() else []

    main(["fit", "--config", str(cfg), "--ckpt_path", "last"])  # the same command again, plus --ckpt_path last

    assert [p.name for p in run.parent.iterdir()] == ["version_0"]  # no new version folder
    final = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert final["global_step"] == steps and final["epoch"] == steps // EPOCH - 1
    assert killed["epoch"] < final["epoch"], "the resumed run did not cross an epoch boundary"
    assert (run / "config.yaml").exists() and (run / "config.resume-1.yaml").exists()
    assert set(metrics_before[1:]) <= set((run / "metrics.csv").read_text().splitlines())  # nothing logged is lost
    _assert_same_weights(_weights(_run(tmp_path / "a")), _weights(run))


# -- the corpus loader's order and position, without training ---------------------------------------------


def _loader(n: int = 50, rank: int = 0, replicas: int = 1) -> StatefulDataLoader:
    """The corpus datamodule's loader over ``range(n)``: 8 rows a batch, seed 0, one rank of ``replicas``."""
    sampler = ResumableEpochSampler(n, seed=0, num_replicas=replicas, rank=rank)
    return StatefulDataLoader(list(range(n)), batch_size=8, sampler=sampler)


def _epochs(loader: StatefulDataLoader, first: int, last: int) -> list[list[int]]:
    out = []
    for epoch in range(first, last + 1):
        loader.sampler.set_epoch(epoch)  # as Lightning does at each epoch start
        out += [b.tolist() for b in loader]
    return out


def _stop_after(loader: StatefulDataLoader, n_batches: int) -> tuple[list[list[int]], int, dict]:
    """Iterate epochs 0, 1, ... and stop after ``n_batches``: (the batches, the epoch stopped in, the state)."""
    got, epoch = [], 0
    while True:
        loader.sampler.set_epoch(epoch)
        for batch in loader:
            got.append(batch.tolist())
            if len(got) == n_batches:
                return got, epoch, loader.state_dict()
        epoch += 1


def _resumed(state: dict, epoch: int, last: int, **kw) -> list[list[int]]:
    """What a new process draws from ``state`` on: the rest of ``epoch`` (iter before set_epoch, as Lightning), then
    whole epochs up to ``last``."""
    loader = _loader(**kw)
    loader.load_state_dict(state)
    it = iter(loader)
    loader.sampler.set_epoch(epoch)
    return [b.tolist() for b in it] + _epochs(loader, epoch + 1, last)


@pytest.mark.parametrize("stop", [3, 7, 9, 12], ids=["epoch0_mid", "epoch0_end", "epoch1_start", "epoch1_mid"])
def test_corpus_loader_restored_anywhere_continues_the_uninterrupted_order(stop):
    """50 rows, 8 a batch: 7 batches an epoch. Stopped after ``stop`` batches, the restored loader gives the rest
    of three epochs exactly (the old RandomSampler loader drew another order for the epoch after the restore)."""
    full = _epochs(_loader(), 0, 2)
    got, epoch, state = _stop_after(_loader(), stop)
    assert got + _resumed(state, epoch, 2) == full
    # each epoch is a permutation that depends on the epoch only
    assert sorted(sum(full[:7], [])) == list(range(50)) and full[:7] != full[7:14]


def test_a_position_saved_after_an_epochs_last_batch_gives_the_next_epoch_whole():
    """Restored from a checkpoint taken after the last batch of epoch 0, Lightning sets epoch 1 before it draws
    from the restored iterator: that iterator must give epoch 1 from its start, not skip its first 50 rows."""
    full = _epochs(_loader(), 0, 2)
    got, epoch, state = _stop_after(_loader(), 7)
    assert epoch == 0 and state["_sampler_iter_state"]["sampler_iter_state"] == {"epoch": 0, "yielded": 50}
    loader = _loader()
    loader.load_state_dict(state)
    it = iter(loader)
    loader.sampler.set_epoch(1)  # the fit loop moves on: epoch 0 was complete
    assert got + [b.tolist() for b in it] + _epochs(loader, 2, 2) == full


def test_corpus_loader_order_is_sharded_across_ranks_and_resumes_per_rank():
    """Two DDP ranks: each takes every 2nd index of the one global order of (seed, epoch); restored mid-epoch-1
    each rank continues its own shard, and together they cover every row in every epoch."""
    global_orders = [ResumableEpochSampler(50, seed=0, num_replicas=1, rank=0) for _ in range(2)]
    global_orders[1].set_epoch(1)
    ranks = []
    for rank in (0, 1):
        full = _epochs(_loader(rank=rank, replicas=2), 0, 2)  # 25 rows a rank: 4 batches an epoch
        got, epoch, state = _stop_after(_loader(rank=rank, replicas=2), 6)
        assert epoch == 1 and got + _resumed(state, epoch, 2, rank=rank, replicas=2) == full
        ranks.append(full)
    for e, sampler in enumerate(global_orders):
        expected = sampler.order()
        shards = [sum(r[4 * e : 4 * e + 4], []) for r in ranks]
        assert shards[0] == expected[0::2] and shards[1] == expected[1::2]


def test_a_checkpoint_from_the_random_sampler_loader_resumes_at_its_position(caplog):
    """A checkpoint saved before this loader (``StatefulDataLoader(shuffle=True)``) resumes after the same number
    of rows, with a warning that the order differs, instead of torchdata's AssertionError."""
    old = StatefulDataLoader(list(range(50)), batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(0))
    it = iter(old)
    for _ in range(3):
        next(it)
    with caplog.at_level("WARNING", logger="domainbert.data.corpus"):
        rest = _resumed(old.state_dict(), 0, 0)
    assert [len(b) for b in rest] == [8, 8, 8, 2]  # 26 rows left of the 50
    assert "older domainbert" in caplog.text and "after 24 examples" in caplog.text


@pytest.mark.faults(bad_inputs=1)
def test_a_corrupt_loader_position_in_a_checkpoint_is_a_domainbert_error():
    state = _stop_after(_loader(), 2)[2]
    state["_sampler_iter_state"]["sampler_iter_state"] = {"epoch": 0, "yielded": "24"}
    with pytest.raises(DomainBertError, match="position in the training data.*expected 'yielded'"):
        _resumed(state, 0, 0)
