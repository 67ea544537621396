"""Two-process DDP on CPU (gloo) through the CLI matches one process with the same global batch.

Each DDP run starts ``domainbert fit`` in a subprocess; Lightning's launcher starts the second rank by running
the same command again. The one-process reference runs in this process with twice the per-device batch.

Tolerances, and why:

- Classification (dropout off): the global batches are the same rows in both runs (the distributed sampler
  gives rank r the rows r, r+2, ... of the same order, and 2 x 8 rows = one 16-row batch), the loss is a mean
  over rows of equal-sized per-rank batches, and DDP averages the two gradients, which equals the gradient of
  the 16-row mean. Only the order of floating-point sums differs: weights agree to 1e-4 (measured ~1e-6),
  the validation loss to 5e-3 relative (synchronised over ranks). This held only once the training sampler
  sharded itself: Lightning's ``DistributedSamplerWrapper`` around the epoch sampler gave the ranks other rows
  (the weights then differed by twice what training moved them).
- Masked LM: masks are drawn per batch from (seed, step) and the shape of the batch, so two 8-row batches get
  other masks than one 16-row batch, and the loss is a mean over masked tokens per rank. The runs are two
  equally valid samples of the same training: the final validation loss agrees within 3% relative (mask
  noise on 2 validation batches).
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from domainbert.cli import main

ROOT = Path(__file__).resolve().parents[2]
TINY_MLM = str(ROOT / "configs/pretrain/tiny_debug.yaml")
TINY_CLS = str(ROOT / "configs/finetune/tiny_classification.yaml")
FIX = ROOT / "tests/fixtures"

pytestmark = [
    pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not available"),
    pytest.mark.slow,  # multi-process: run by `make test` after the default suite
]


def ddp(args: list[str], cwd: Path = ROOT) -> str:
    """Run ``domainbert fit`` with two CPU processes; return the combined output of both ranks."""
    cmd = [sys.executable, "-m", "domainbert", *args]
    cmd += ["--trainer.strategy", "ddp", "--trainer.devices", "2", "--trainer.accelerator", "cpu"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "MASTER_PORT": str(_free_port())}
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    return out


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_dir(root: Path) -> Path:
    (d,) = [p.parent for p in root.rglob("metrics.csv")]
    return d


def last_metric(run: Path, name: str) -> float:
    with open(run / "metrics.csv", newline="") as fh:
        values = [float(r[name]) for r in csv.DictReader(fh) if r.get(name)]
    assert values, f"{name} was not logged in {run}"
    return values[-1]


def check_one_export(root: Path, out: str) -> Path:
    """Only rank 0 wrote: one hf/ folder, one 'Exported' line in the output of both ranks."""
    exports = [p for p in root.rglob("hf") if p.is_dir()]
    assert len(exports) == 1, exports
    assert out.count("Exported Hugging Face model") == 1, out[-3000:]
    assert (exports[0] / "model.safetensors").is_file()
    return exports[0]


def test_ddp_classification_matches_one_process_with_the_same_global_batch(tiny_bert, tmp_path):
    val = tmp_path / "val.jsonl"  # an even number of rows: the distributed sampler pads odd splits
    val.write_text("".join((FIX / "cls_val.jsonl").read_text().splitlines(keepends=True)[:14]))
    common = ["fit", "--config", TINY_CLS, "--model.init_from", str(tiny_bert), "--data.val", str(val)]
    common += ["--data.train", str(FIX / "cls_train.jsonl")]
    common += ["--data.test", "null", "--data.predict", "null", "--trainer.max_steps", "4", "--trainer.max_epochs", "1"]
    common += ["--model.hidden_dropout", "0", "--model.attention_dropout", "0", "--model.classifier_dropout", "0"]
    common += ["--model.learning_rate", "1e-3"]
    out = ddp([*common, "--data.batch_size", "8", "--trainer.default_root_dir", str(tmp_path / "ddp")])
    main([*common, "--data.batch_size", "16", "--trainer.default_root_dir", str(tmp_path / "one")])

    a = load_file(str(check_one_export(tmp_path / "ddp", out) / "model.safetensors"))
    b = load_file(str(run_dir(tmp_path / "one") / "hf" / "model.safetensors"))
    start = load_file(str(tiny_bert / "model.safetensors"))
    assert a.keys() == b.keys()
    loss_ddp = last_metric(run_dir(tmp_path / "ddp"), "val/loss")
    loss_one = last_metric(run_dir(tmp_path / "one"), "val/loss")
    assert loss_ddp == pytest.approx(loss_one, rel=5e-3)  # synchronised over both ranks' halves of the split
    moved = max((b[k] - start[k]).abs().max().item() for k in b if k in start and "position_ids" not in k)
    assert moved > 1e-3  # training changed the weights, so agreement below means something
    diff = max((a[k] - b[k]).abs().max().item() for k in a)
    print(f"DDP vs one process: max weight difference {diff:.2g}, training moved weights by {moved:.2g}")
    assert diff < 1e-4


def test_ddp_masked_lm_matches_one_process_within_mask_noise(tiny_bert, corpus_file, tmp_path):
    common = ["fit", "--config", TINY_MLM, "--model.init_from", str(tiny_bert), "--data.train", str(corpus_file)]
    common += ["--trainer.max_steps", "8", "--trainer.val_check_interval", "8", "--trainer.limit_val_batches", "2"]
    common += ["--trainer.num_sanity_val_steps", "0", "--model.hidden_dropout", "0", "--model.attention_dropout", "0"]
    out = ddp([*common, "--data.batch_size", "8", "--trainer.default_root_dir", str(tmp_path / "ddp")])
    main([*common, "--data.batch_size", "16", "--trainer.default_root_dir", str(tmp_path / "one")])

    check_one_export(tmp_path / "ddp", out)
    loss_ddp = last_metric(run_dir(tmp_path / "ddp"), "val/loss")
    loss_one = last_metric(run_dir(tmp_path / "one"), "val/loss")
    print(f"MLM val/loss after 8 steps: ddp {loss_ddp:.5f}, one process {loss_one:.5f}")
    assert loss_ddp == pytest.approx(loss_one, rel=0.03)


def two_nodes(args: list[str], cwd: Path = ROOT) -> str:
    """Run ``domainbert fit`` as two nodes of one process each on this machine; the output of both.

    Each node is started by hand, as ``torchrun --nnodes 2`` or SLURM would start it: the same command with
    ``NODE_RANK`` 0 and 1, ``LOCAL_RANK=0``, ``WORLD_SIZE=2`` and one rendezvous address (Lightning then creates no
    process of its own).
    """
    cmd = [sys.executable, "-m", "domainbert", *args]
    cmd += ["--trainer.strategy", "ddp", "--trainer.num_nodes", "2", "--trainer.devices", "1"]
    cmd += ["--trainer.accelerator", "cpu"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1"}
    env.update(MASTER_PORT=str(_free_port()), WORLD_SIZE="2", LOCAL_RANK="0")
    procs = [
        subprocess.Popen(
            cmd,
            cwd=cwd,
            env={**env, "NODE_RANK": str(node)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for node in (0, 1)
    ]
    outs = []
    for proc in procs:
        try:
            outs.append(proc.communicate(timeout=300)[0])
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise
    for node, (proc, out) in enumerate(zip(procs, outs, strict=True)):
        assert proc.returncode == 0, f"node {node}:\n{out[-4000:]}"
    return "\n".join(outs)


def test_two_nodes_of_one_process_match_one_process_with_the_same_global_batch(tiny_bert, tmp_path):
    val = tmp_path / "val.jsonl"  # an even number of rows, as the two-device test's
    val.write_text("".join((FIX / "cls_val.jsonl").read_text().splitlines(keepends=True)[:14]))
    common = ["fit", "--config", TINY_CLS, "--model.init_from", str(tiny_bert), "--data.val", str(val)]
    common += ["--data.train", str(FIX / "cls_train.jsonl")]
    common += ["--data.test", "null", "--data.predict", "null", "--trainer.max_steps", "4", "--trainer.max_epochs", "1"]
    common += ["--model.hidden_dropout", "0", "--model.attention_dropout", "0", "--model.classifier_dropout", "0"]
    common += ["--model.learning_rate", "1e-3"]
    out = two_nodes([*common, "--data.batch_size", "8", "--trainer.default_root_dir", str(tmp_path / "nodes")])
    main([*common, "--data.batch_size", "16", "--trainer.default_root_dir", str(tmp_path / "one")])

    a = load_file(str(check_one_export(tmp_path / "nodes", out) / "model.safetensors"))
    b = load_file(str(run_dir(tmp_path / "one") / "hf" / "model.safetensors"))
    assert a.keys() == b.keys()
    assert last_metric(run_dir(tmp_path / "nodes"), "val/loss") == pytest.approx(
        last_metric(run_dir(tmp_path / "one"), "val/loss"), rel=5e-3
    )
    diff = max((a[k] - b[k]).abs().max().item() for k in a)
    print(f"two nodes vs one process: max weight difference {diff:.2g}")
    assert diff < 1e-4
