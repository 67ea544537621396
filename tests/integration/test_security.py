"""Hostile folders and names: no code runs from a model folder, no folder is ever wiped, outputs follow the umask."""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections import Counter
from pathlib import Path

import pytest
import torch

from domainbert.cli import main
from domainbert.core.files import atomic_write_text
from domainbert.deploy import load as deploy
from domainbert.errors import DomainBertError
from tests.helpers import faults_summary

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
FIT = TESTS / "fixtures" / "sweep_fit.yaml"
SPACE = TESTS / "fixtures" / "sweep_toy_space.yaml"

bad_input = pytest.mark.faults(bad_inputs=1)


class Payload:
    """Unpickling this creates ``marker``: code from the file ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def files_under(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def payload_folder(tmp_path: Path, tiny_bert: Path, backend: str) -> tuple[Path, Path]:
    """A copy of the tiny BERT whose int8 weights are a payload; its variant file claims ``backend``."""
    folder = tmp_path / f"variant_{backend}"
    shutil.copytree(tiny_bert, folder)
    marker = tmp_path / f"pwned_{backend}"
    torch.save({"weight": Payload(marker)}, folder / deploy.INT8_WEIGHTS)
    (folder / deploy.VARIANT_FILE).write_text(json.dumps({"variant": "int8", "backend": backend}))
    return folder, marker


# -- 1. no code from a model folder -------------------------------------------------------------------


@bad_input
@pytest.mark.parametrize("backend", ["torchao", "torch"])
def test_a_pickle_payload_in_a_variant_folder_never_runs(tmp_path, tiny_bert, backend):
    folder, marker = payload_folder(tmp_path, tiny_bert, backend)
    with pytest.raises(DomainBertError) as err:
        deploy.load_variant(folder)
    faults_summary.record("code_executed", int(marker.exists()))
    assert not marker.exists()
    assert str(folder) in str(err.value) and "--trust_pickle true" in str(err.value)
    # the payload is real: a full unpickling, which only the opt-in allows, does run it
    torch.load(folder / deploy.INT8_WEIGHTS, weights_only=False)
    assert marker.exists()


@bad_input
def test_the_export_command_refuses_a_pickled_model_folder_in_one_line(tmp_path, tiny_bert, capsys):
    folder, marker = payload_folder(tmp_path, tiny_bert, "torchao")
    with pytest.raises(SystemExit) as exc:
        main(["export", "--model", str(folder), "--out", str(tmp_path / "out")])
    assert exc.value.code == 2
    line = faults_summary.check_one_line(capsys.readouterr().err)
    faults_summary.record("code_executed", int(marker.exists()))
    assert not marker.exists() and str(folder) in line and "--trust_pickle true" in line


@bad_input
def test_a_variant_file_cannot_point_outside_its_folder(tmp_path, tiny_bert):
    folder = tmp_path / "onnx_variant"
    shutil.copytree(tiny_bert, folder)
    (folder / deploy.VARIANT_FILE).write_text(json.dumps({"variant": "onnx", "file": "../../elsewhere.onnx"}))
    with pytest.raises(DomainBertError, match=r"field 'file': expected a file name in the folder"):
        deploy.load_variant(folder)


# -- 3. no folder is ever wiped -----------------------------------------------------------------------


def a_run_folder(root: Path) -> Path:
    run = root / "runs" / "cls" / "version_0"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "epoch=0-step=10.ckpt").write_bytes(b"weights")
    (run / "config.yaml").write_text("model: {}\n")
    (run / "metrics.csv").write_text("step,val/loss\n10,0.5\n")
    return run


@bad_input
@pytest.mark.parametrize("name", ["", ".", "..", "../../victim", "/tmp/abs", "a/b"])
def test_export_dirname_must_be_a_plain_name(name, tmp_path, capsys):
    run = a_run_folder(tmp_path)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me")
    before = files_under(tmp_path)
    argv = ["fit", "--config", str(FIT), "--trainer.default_root_dir", str(run.parent), "--export.dirname", name]
    with pytest.raises(SystemExit) as exc:
        main(argv)
    lost = len(before - files_under(tmp_path))
    faults_summary.record("data_lost", lost)
    assert exc.value.code == 2 and lost == 0
    line = faults_summary.check_one_line(capsys.readouterr().err)
    assert f"export.dirname={name!r}" in line and "plain folder name" in line


@bad_input
@pytest.mark.parametrize("how", ["flag", "sweep file"])
def test_a_study_name_cannot_leave_the_sweeps_folder(how, tmp_path, monkeypatch):
    from domainbert.sweep import command as sweep

    monkeypatch.chdir(tmp_path)
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "precious.txt").write_text("keep me")
    before = files_under(tmp_path)
    space = SPACE
    argv = ["--config", str(FIT), "--n_trials", "1"]
    if how == "flag":
        argv += ["--study_name", "../../x"]
    else:
        space = tmp_path / "space.yaml"
        space.write_text(SPACE.read_text() + "study_name: ../../x\n")
        before.add("space.yaml")
    with pytest.raises(DomainBertError, match=r"study_name='../../x': expected a plain folder name"):
        sweep.main([*argv, "--sweep", str(space)])
    lost = len(before - files_under(tmp_path))
    faults_summary.record("data_lost", lost)
    assert lost == 0 and files_under(tmp_path) == before  # nothing written anywhere either


# -- 6. file modes follow the umask -------------------------------------------------------------------


@pytest.fixture(params=[0o022, 0o077], ids=["umask022", "umask077"])
def umask(request):
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def modes(folder: Path) -> Counter:
    return Counter(
        (p.is_dir(), stat.S_IMODE(p.stat().st_mode)) for p in [folder, *folder.rglob("*")] if not p.is_symlink()
    )


def test_outputs_follow_the_umask(umask, tmp_path, tiny_bert):
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from domainbert.core.checkpoint_io import AtomicCheckpointIO
    from domainbert.core.hf import export_hf
    from domainbert.sweep.report import _save

    out = tmp_path / "out"
    out.mkdir(mode=0o777 & ~umask)
    model = AutoModelForMaskedLM.from_pretrained(tiny_bert)
    export_hf(model, AutoTokenizer.from_pretrained(tiny_bert), out / "hf", source=str(tiny_bert), card="# card\n")
    atomic_write_text(out / "best.yaml", "a: 1\n")
    atomic_write_text(out / "trials.csv", "a\n1\n")
    AtomicCheckpointIO().save_checkpoint({"state_dict": model.state_dict()}, out / "checkpoints" / "last.ckpt")

    class Fig:
        def savefig(self, path, **kw):
            Path(path).write_bytes(b"\x89PNG")

    _save(Fig(), out / "history.png")
    got = modes(out)
    want = {(False, 0o666 & ~umask), (True, 0o777 & ~umask)}
    assert set(got) == want, {f"{'dir' if d else 'file'} {m:o}": n for (d, m), n in got.items()}
    assert got[(False, 0o666 & ~umask)] >= 8  # weights, tokenizer, card, yaml, csv, checkpoint, png...


# -- 8. dependencies -----------------------------------------------------------------------------------


def test_optuna_integration_is_not_a_dependency_and_nothing_imports_it():
    import tomllib

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert not [d for d in deps if d.lower().startswith(("optuna-integration", "optuna_integration"))]
    users = [p for p in (ROOT / "domainbert").rglob("*.py") if "optuna_integration" in p.read_text()]
    assert users == []


# -- 9. the fault summary ------------------------------------------------------------------------------


def test_fault_summary_counts_tracebacks_and_payloads(monkeypatch):
    monkeypatch.setattr(faults_summary, "RECORDED", Counter())
    monkeypatch.setattr(faults_summary, "_PENDING", Counter())
    monkeypatch.setattr(faults_summary, "MARKED", Counter({"kills": 1, "bad_inputs": 3}))
    assert faults_summary.check_one_line("warn: x\ndomainbert: error: f.csv: row 2: bad\n") == (
        "domainbert: error: f.csv: row 2: bad"
    )
    with pytest.raises(AssertionError, match="traceback"):
        faults_summary.check_one_line('Traceback (most recent call last):\n  File "x"\nValueError: no\n')
    with pytest.raises(AssertionError, match="one 'domainbert: error:' line"):
        faults_summary.check_one_line("domainbert: error: a\ndomainbert: error: b\n")
    faults_summary.record("data_lost", 2)
    faults_summary.record("code_executed")
    assert faults_summary.summary_line() == (
        "fault-injection: kills survived=1, bad inputs tried=3, tracebacks=1, data lost=2, code executed=1"
    )
    faults_summary._PENDING.clear()  # this test's counts are not sent on with its report (pytest -n)
