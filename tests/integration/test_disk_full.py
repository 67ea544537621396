"""A full disk or a kill mid-write: never a truncated file under a final name, one line naming what and where."""

from __future__ import annotations

import errno
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from domainbert.cli import main
from domainbert.core import checkpoint_io
from domainbert.core.checkpoint_io import AtomicCheckpointIO
from domainbert.core.files import MARKER
from domainbert.core.hf import export_hf
from domainbert.errors import DomainBertError
from tests.helpers import faults_summary

TESTS = Path(__file__).resolve().parents[1]
FIT = TESTS / "fixtures" / "sweep_fit.yaml"

disk_full = pytest.mark.faults(bad_inputs=1)


def full_disk_open(n: int):
    """An ``open`` for ``domainbert.core.checkpoint_io`` whose files take ``n`` bytes, then fail as a full disk does."""

    class Full:
        def __init__(self, fh):
            self.fh = fh

        def write(self, data):
            self.fh.write(bytes(data)[:n])
            self.fh.flush()
            raise OSError(errno.ENOSPC, "No space left on device")

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

    return lambda path, mode="r", *a, **kw: Full(open(path, mode, *a, **kw))


def listing(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@disk_full
def test_a_full_disk_leaves_the_checkpoints_as_they_were(tmp_path, monkeypatch):
    ckpts = tmp_path / "checkpoints"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"step": 10}, ckpts / "epoch=0-step=10.ckpt")
    io.save_checkpoint({"step": 10}, ckpts / "last.ckpt")
    before = listing(ckpts)
    monkeypatch.setattr(checkpoint_io, "open", full_disk_open(4096), raising=False)
    for name in ("epoch=1-step=20.ckpt", "last.ckpt"):  # a new file, and one written over
        with pytest.raises(DomainBertError) as err:
            io.save_checkpoint({"step": 20}, ckpts / name)
        msg = str(err.value)
        assert "\n" not in msg
        assert f"no space left on the device writing the checkpoint {ckpts / name}" in msg
        assert f"free in {ckpts}" in msg and "last good checkpoint: " in msg and "last.ckpt" in msg
    lost = sum(before[k] != listing(ckpts).get(k) for k in before)
    faults_summary.record("data_lost", lost)
    assert listing(ckpts) == before and lost == 0  # no truncated file, no temporary file


@disk_full
def test_fit_on_a_full_disk_stops_with_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(checkpoint_io, "open", full_disk_open(100), raising=False)
    with pytest.raises(SystemExit) as exc:
        main(["fit", "--config", str(FIT), "--trainer.default_root_dir", str(tmp_path), "--trainer.max_steps", "4"])
    assert exc.value.code == 2
    line = faults_summary.check_one_line(capsys.readouterr().err)
    assert "no space left on the device writing the checkpoint" in line and "no earlier checkpoint" in line
    ckpts = list(tmp_path.rglob("*.ckpt*"))
    assert ckpts == []  # nothing truncated under a final name, no temporary file either
    assert list(tmp_path.rglob("config.yaml"))  # what was written before is still there


def test_the_cli_writes_checkpoints_through_atomic_checkpoint_io(tmp_path):
    from domainbert.cli import cli_main

    cli = cli_main(["--config", str(FIT), "--trainer.default_root_dir", str(tmp_path)], run=False)
    assert type(cli.trainer.strategy.checkpoint_io) is AtomicCheckpointIO


@pytest.fixture(scope="module")
def tiny_mlm(tiny_bert):
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    return AutoModelForMaskedLM.from_pretrained(tiny_bert), AutoTokenizer.from_pretrained(tiny_bert)


@disk_full
def test_a_full_disk_during_the_hf_export_keeps_the_earlier_export(tmp_path, tiny_mlm, monkeypatch):
    model, tok = tiny_mlm
    run = tmp_path / "version_0"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "epoch=2.ckpt").write_bytes(b"ckpt")
    export_hf(model, tok, run / "hf")
    before = listing(run)

    def full(self, folder, *args, **kwargs):
        (Path(folder) / "model.safetensors").write_bytes(b"\0" * 100)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(type(model), "save_pretrained", full)
    with pytest.raises(DomainBertError) as err:
        export_hf(model, tok, run / "hf")
    msg = str(err.value)
    assert "\n" not in msg and f"no space left on the device writing the Hugging Face export {run / 'hf'}" in msg
    assert f"free in {run}" in msg and f"last good checkpoint: {run / 'checkpoints' / 'epoch=2.ckpt'}" in msg
    lost = sum(before[k] != listing(run).get(k) for k in before)
    faults_summary.record("data_lost", lost)
    assert listing(run) == before and lost == 0


def test_leftovers_of_a_killed_write_are_cleaned_up_by_the_next_one(tmp_path, tiny_mlm):
    model, tok = tiny_mlm
    pid = dead_pid()
    stale = tmp_path / f".hf.tmp-{pid}-abc"
    stale.mkdir()
    (stale / MARKER).write_text("")
    (stale / "model.safetensors").write_bytes(b"half")
    live = tmp_path / ".hf.tmp-1-xyz"  # pid 1 is alive: another writer's folder stays
    live.mkdir()
    (live / MARKER).write_text("")
    export_hf(model, tok, tmp_path / "hf")
    assert not stale.exists() and live.exists() and (tmp_path / "hf" / "config.json").is_file()

    ckpts = tmp_path / "checkpoints"
    ckpts.mkdir()
    (ckpts / f".last.ckpt.tmp-{pid}-q1w2").write_bytes(b"half")
    AtomicCheckpointIO().save_checkpoint({"step": 1}, ckpts / "last.ckpt")
    assert sorted(p.name for p in ckpts.iterdir()) == ["last.ckpt"]


def test_a_swap_killed_halfway_is_undone(tmp_path, tiny_mlm):
    """Killed between moving the old export aside and moving the new one in: the old one comes back."""
    model, tok = tiny_mlm
    export_hf(model, tok, tmp_path / "hf")
    before = listing(tmp_path / "hf")
    (tmp_path / "hf").rename(tmp_path / f".hf.old-{dead_pid()}")
    from domainbert.core.files import clean_leftovers

    clean_leftovers(tmp_path / "hf")
    assert listing(tmp_path / "hf") == before and sorted(p.name for p in tmp_path.iterdir()) == ["hf"]


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MB tmpfs with about 64 kB free (needs the right to mount; skipped otherwise)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.decode(errors='replace').strip()}")
    try:
        (mnt / "filler").write_bytes(b"\0" * (1024 * 1024 - 64 * 1024))
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


@disk_full
def test_a_real_full_disk(small_disk, tiny_mlm):
    model, tok = tiny_mlm
    io = AtomicCheckpointIO()
    io.save_checkpoint({"step": 1}, small_disk / "run" / "checkpoints" / "epoch=0.ckpt")
    big = {"state_dict": {"w": torch.zeros(256, 1024)}}  # 1 MB
    with pytest.raises(DomainBertError, match=r"no space left on the device writing the checkpoint .*epoch=1.ckpt"):
        io.save_checkpoint(big, small_disk / "run" / "checkpoints" / "epoch=1.ckpt")
    with pytest.raises(DomainBertError, match=r"no space left .* last good checkpoint: .*epoch=0.ckpt"):
        export_hf(model, tok, small_disk / "run" / "hf")
    names = sorted(str(p.relative_to(small_disk)) for p in small_disk.rglob("*"))
    assert names == ["filler", "run", "run/checkpoints", "run/checkpoints/epoch=0.ckpt"]
    assert torch.load(small_disk / "run/checkpoints/epoch=0.ckpt", weights_only=True) == {"step": 1}
