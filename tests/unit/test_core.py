"""Shared infrastructure, piece by piece: step seeds, settings, atomic writes, hardware detection, run folders."""

from __future__ import annotations

import dataclasses
import errno
import io
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from domainbert.core import files, hardware
from domainbert.core.files import MARKER, atomic_dir, atomic_file, atomic_write_text, fmt_bytes, plain_name
from domainbert.core.runs import next_version, resolve_alias, version_of
from domainbert.core.seeding import step_generator, step_seed
from domainbert.core.settings import as_settings
from domainbert.errors import DomainBertError
from tests.helpers import faults_summary

bad_input = pytest.mark.faults(bad_inputs=1)


def files_under(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


# -- seeding --------------------------------------------------------------------------------------------------------


def _draws(seed: int, steps: range) -> list[torch.Tensor]:
    return [torch.rand(4, generator=step_generator(seed, step)) for step in steps]


def test_a_resumed_step_stream_equals_the_uninterrupted_one():
    """Steps 0-9 in one go, or 0-4 then (after a restart, other draws in between) 5-9: the same numbers."""
    uninterrupted = _draws(7, range(10))
    first = _draws(7, range(5))
    torch.rand(1000)  # whatever the process did in between (another run, a validation) changes nothing
    resumed = _draws(7, range(5, 10))
    for a, b in zip(uninterrupted, first + resumed):
        assert torch.equal(a, b)


def test_step_seeds_differ_per_step_and_per_run_seed():
    seeds = {step_seed(seed, step) for seed in range(4) for step in range(1000)}
    assert len(seeds) == 4 * 1000
    assert not torch.equal(_draws(0, range(1))[0], _draws(1, range(1))[0])
    assert 0 <= step_seed(2**40, 2**40) < 2**63  # a valid torch seed, however large the inputs


def test_the_guard_reseeds_dropout_from_the_step_alone(monkeypatch):
    """TrainingGuard seeds the global RNG from (PL_GLOBAL_SEED, batch index): the draws after a resume at batch
    12 equal the uninterrupted run's, whatever the RNG state before."""
    from domainbert.core.callbacks import TrainingGuard

    monkeypatch.setenv("PL_GLOBAL_SEED", "3")
    guard = TrainingGuard(release_memory=False)
    trainer = SimpleNamespace(fit_loop=SimpleNamespace(total_batch_idx=12))
    torch.manual_seed(0)
    guard.on_train_batch_start(trainer, None, None, 12)
    uninterrupted = torch.rand(8)
    torch.manual_seed(999)
    torch.rand(100)
    guard.on_train_batch_start(trainer, None, None, 0)  # batch_idx restarts within the epoch; the total does not
    assert torch.equal(torch.rand(8), uninterrupted)
    assert torch.equal(uninterrupted, torch.rand(8, generator=step_generator(3, 12)))


# -- settings -------------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class _Knobs:
    rank: int = 8
    alpha: float = 16.0


def test_settings_from_a_dict_an_instance_or_null():
    assert as_settings(_Knobs, None, "lora") is None
    knobs = _Knobs(rank=4)
    assert as_settings(_Knobs, knobs, "lora") is knobs
    assert as_settings(_Knobs, {"alpha": 2.0}, "lora") == _Knobs(rank=8, alpha=2.0)


@bad_input
def test_an_unknown_setting_names_the_option_the_field_and_the_choices():
    with pytest.raises(DomainBertError) as err:
        as_settings(_Knobs, {"rnak": 4}, "lora")
    assert str(err.value) == "lora: unknown setting(s) ['rnak']; expected some of ['alpha', 'rank']"
    with pytest.raises(DomainBertError, match="augment: expected a mapping of settings or null, got list"):
        as_settings(_Knobs, [4], "augment")


# -- atomic writes --------------------------------------------------------------------------------------------------


def test_an_atomic_write_leaves_the_old_file_intact_when_the_writer_raises(tmp_path):
    path = tmp_path / "best.yaml"
    atomic_write_text(path, "lr: 1\n")
    with pytest.raises(RuntimeError, match="killed"):
        with atomic_file(path) as tmp:
            tmp.write_text("lr: 2\n# half of it")
            raise RuntimeError("killed")
    assert path.read_text() == "lr: 1\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.yaml"]  # no temporary file left behind
    atomic_write_text(path, "lr: 3\n")
    assert path.read_text() == "lr: 3\n"


@bad_input
def test_a_full_disk_during_an_atomic_write_is_one_line_and_keeps_the_old_file(tmp_path):
    path = tmp_path / "trials.csv"
    atomic_write_text(path, "a\n1\n")
    with pytest.raises(DomainBertError) as err:
        with atomic_file(path, what="the trials table") as tmp:
            tmp.write_text("a\n")
            raise OSError(errno.ENOSPC, "No space left on device")
    msg = str(err.value)
    assert "\n" not in msg and f"no space left on the device writing the trials table {path}" in msg
    assert f"free in {tmp_path}" in msg and "no earlier checkpoint" in msg
    assert path.read_text() == "a\n1\n" and sorted(p.name for p in tmp_path.iterdir()) == ["trials.csv"]


def test_a_library_wrapping_a_full_disk_is_still_recognised():
    assert files.disk_full_in(RuntimeError("Error while serializing: IoError(Os { code: 28, .. }) os error 28"))
    assert files.disk_full_in(RuntimeError("shape mismatch")) is None
    assert files.disk_full_in(DomainBertError("No space left on device")) is None  # already one line


def test_other_write_errors_name_what_and_where(tmp_path):
    err = files.write_error(OSError(errno.EACCES, "Permission denied"), "the export", tmp_path / "hf")
    assert str(err) == f"could not write the export {tmp_path / 'hf'}: Permission denied; earlier outputs are intact"


@pytest.mark.parametrize("name", ["", " ", ".", "..", "a/b", "../x", "a\\b", " hf"])
def test_plain_name_refuses_paths_and_dots(name):
    with pytest.raises(DomainBertError, match=r"--run_name=.*expected a plain folder name"):
        plain_name(name, "--run_name")


def test_plain_name_accepts_a_folder_name():
    assert plain_name("minilm_debian-v2.1", "--run_name") == "minilm_debian-v2.1"


def test_byte_counts_read_as_people_write_them():
    assert [fmt_bytes(n) for n in (999, 1500, 2.5e6, 2.5e9, 3e12)] == ["999 B", "1.5 kB", "2.5 MB", "2.5 GB", "3.0 TB"]


def test_temporary_files_of_dead_writers_are_removed_and_live_ones_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "pid_alive", lambda pid: pid == 1)
    dead, live = tmp_path / ".last.ckpt.tmp-4242-ab", tmp_path / ".last.ckpt.tmp-1-cd"
    for p in (dead, live, tmp_path / "last.ckpt"):
        p.write_bytes(b"x")
    assert files.clean_tmp_files(tmp_path) == [dead]
    assert sorted(p.name for p in tmp_path.iterdir()) == [live.name, "last.ckpt"]


def _run_folder(root: Path) -> Path:
    run = root / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "epoch=0-step=10.ckpt").write_bytes(b"weights")
    (run / "config.yaml").write_text("model: {}\n")
    return run


@bad_input
@pytest.mark.parametrize("target", ["run", "run/.", "run/hf/..", "victim"])
def test_atomic_dir_never_replaces_a_folder_it_did_not_write(target, tmp_path):
    _run_folder(tmp_path)
    (tmp_path / "victim").mkdir()
    (tmp_path / "victim" / "precious.txt").write_text("keep me")
    before = files_under(tmp_path)
    path = str(tmp_path / target)
    with pytest.raises(DomainBertError, match=rf"{os.path.abspath(path)} exists and was not written by domainbert"):
        with atomic_dir(path) as tmp:
            (tmp / "model.safetensors").write_bytes(b"new")
    lost = len(before - files_under(tmp_path))
    faults_summary.record("data_lost", lost)
    assert lost == 0 and files_under(tmp_path) == before  # nothing lost, no temporary folder left


def test_atomic_dir_replaces_its_own_output(tmp_path):
    with atomic_dir(tmp_path / "hf") as tmp:
        (tmp / "a.txt").write_text("1")
    assert (tmp_path / "hf" / MARKER).is_file()
    with atomic_dir(tmp_path / "hf") as tmp:
        (tmp / "b.txt").write_text("2")
    assert sorted(p.name for p in (tmp_path / "hf").iterdir()) == [MARKER, "b.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]


def test_atomic_dir_keeps_the_old_folder_when_the_block_raises(tmp_path):
    with atomic_dir(tmp_path / "hf") as tmp:
        (tmp / "model.safetensors").write_text("old")
    with pytest.raises(KeyError):
        with atomic_dir(tmp_path / "hf") as tmp:
            (tmp / "model.safetensors").write_text("half")
            raise KeyError("crash")
    assert (tmp_path / "hf" / "model.safetensors").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]


def test_atomic_dir_replaces_a_foreign_folder_only_when_asked(tmp_path):
    mine = tmp_path / "out"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    with atomic_dir(mine, replace_foreign=True) as tmp:
        (tmp / "tokenizer.json").write_text("{}")
    assert sorted(p.name for p in mine.iterdir()) == [MARKER, "tokenizer.json"]


# -- hardware -------------------------------------------------------------------------------------------------------


@pytest.fixture
def cpuinfo(monkeypatch):
    """Set what ``/proc/cpuinfo`` says (None: it cannot be read); the cached answer is cleared around the test."""

    def fake(flags: str | None) -> None:
        def fake_open(path, *args, **kwargs):
            if flags is None:
                raise FileNotFoundError(path)
            return io.StringIO(f"processor\t: 0\nflags\t\t: {flags}\n")

        hardware.cpu_flags.cache_clear()
        monkeypatch.setattr(hardware, "open", fake_open, raising=False)  # the module's own open only

    yield fake
    hardware.cpu_flags.cache_clear()


@pytest.mark.parametrize(
    "flags,fast",
    [("sse2 avx2 fma", False), ("avx512f avx512_bf16", True), ("avx512f amx_bf16 amx_tile", True), (None, False)],
    ids=["avx2", "avx512_bf16", "amx", "unreadable"],
)
def test_fast_cpu_bf16_is_read_from_the_cpu_flags(cpuinfo, flags, fast):
    cpuinfo(flags)
    assert hardware.cpu_has_fast_bf16() is fast


@pytest.mark.parametrize(
    "flags,amx",
    [("avx512f avx512_bf16", False), ("avx512f amx_bf16 amx_tile", True), ("amx_tile", False), (None, False)],
    ids=["avx512_bf16", "amx", "tiles-without-bf16", "unreadable"],
)
def test_amx_is_read_from_the_cpu_flags_as_whole_words(cpuinfo, flags, amx):
    cpuinfo(flags)
    assert hardware.cpu_has_amx() is amx


@pytest.mark.parametrize(
    "accelerator,cuda,cuda_bf16,cpu_bf16,expected",
    [
        ("auto", False, False, False, "32-true"),
        ("auto", False, False, True, "bf16-mixed"),
        ("auto", True, True, False, "bf16-mixed"),
        ("gpu", True, False, False, "16-mixed"),
        ("cpu", True, True, False, "32-true"),  # a GPU in the machine does not matter for a CPU run
        (None, False, False, False, "32-true"),
    ],
)
def test_the_default_precision_follows_the_hardware(monkeypatch, accelerator, cuda, cuda_bf16, cpu_bf16, expected):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: cuda_bf16)
    monkeypatch.setattr(hardware, "cpu_has_fast_bf16", lambda: cpu_bf16)
    assert hardware.auto_precision(accelerator) == expected


# -- run folders and checkpoint aliases -----------------------------------------------------------------------------


def test_versions_count_up_from_the_highest_folder(tmp_path):
    family = tmp_path / "runs" / "cls"
    assert next_version(family) == 0
    for name in ("version_0", "version_3", "other"):
        (family / name).mkdir(parents=True)
    assert next_version(family) == 4
    assert version_of(family / "version_3" / "checkpoints" / "last.ckpt") == 3
    assert version_of(tmp_path / "elsewhere" / "last.ckpt") is None


def test_ckpt_alias_without_an_earlier_fit_names_the_folder_it_searched(tmp_path):
    with pytest.raises(DomainBertError) as err:
        resolve_alias("best", tmp_path / "runs" / "tiny")
    assert "runs/tiny/version_*/checkpoints" in str(err.value) and "run `fit`" in str(err.value)


def test_ckpt_aliases_pick_the_newest_run_with_checkpoints_and_its_recorded_best(tmp_path):
    family = tmp_path / "runs" / "cfg"
    old, new, test_run = (family / f"version_{i}" / "checkpoints" for i in (0, 1, 2))
    for d in (old, new):
        d.mkdir(parents=True)
    (test_run.parent).mkdir(parents=True)  # a `test` run: a version folder without checkpoints
    torch.save({"callbacks": {}}, old / "best-epoch=0.ckpt")
    elsewhere = "/gone/when/the/run/folder/moved/best-epoch=1.ckpt"
    state = {"callbacks": {"ModelCheckpoint{'monitor': 'val/f1_macro'}": {"best_model_path": elsewhere}}}
    torch.save(state, new / "best-epoch=1.ckpt")
    torch.save(state, new / "last.ckpt")
    assert resolve_alias("best", family) == new / "best-epoch=1.ckpt"  # found beside the checkpoint that named it
    assert resolve_alias("last", family) == new / "last.ckpt"


def test_best_of_a_run_that_never_validated_is_its_last_checkpoint_and_says_so(tmp_path, caplog):
    """A smoke fit (``--trainer.max_steps 5``) saves only ``last.ckpt``; ``test --ckpt_path best`` then runs on it."""
    ckpts = tmp_path / "runs" / "cfg" / "version_0" / "checkpoints"
    ckpts.mkdir(parents=True)
    torch.save(
        {"callbacks": {"ModelCheckpoint{'monitor': 'val/f1_macro'}": {"best_model_path": ""}}}, ckpts / "last.ckpt"
    )
    with caplog.at_level("WARNING", logger="domainbert.core.runs"):
        assert resolve_alias("best", tmp_path / "runs" / "cfg") == ckpts / "last.ckpt"
    assert [r.getMessage() for r in caplog.records] == [
        "ckpt_path='best': the run recorded no best checkpoint (no validation ran, or no ModelCheckpoint monitors a "
        f"metric); using its last one, {ckpts / 'last.ckpt'}"
    ]
