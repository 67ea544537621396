"""``domainbert sweep --out`` follows the rule of every command's output, before any trial or study.

New, empty, or domainbert's (the marker; or, from an older domainbert, a ``study.db`` holding the study); never a
folder of the user's, one of the sweep's inputs, a home or the root: each refused in one line, the folder untouched.
"""

from __future__ import annotations

import argparse
import shutil

import optuna
import pytest

from domainbert.cli import main
from domainbert.core.files import MARKER
from domainbert.errors import DomainBertError
from domainbert.sweep.worker import claim_out
from tests.helpers import FIX, ROOT, TINY_CLS, faults_summary

SPACE = str(ROOT / "configs" / "sweep" / "lr_warmup.yaml")
FIT = ["--config", TINY_CLS, "--data.train", str(FIX / "cls_train.jsonl"), "--data.val", str(FIX / "cls_val.jsonl")]


def _refused(out: str, capsys, config: str = TINY_CLS) -> str:
    """``domainbert sweep --out out``'s one error line (exit status 2)."""
    with pytest.raises(SystemExit) as exc:
        main(["sweep", "--sweep", SPACE, "--n_trials", "1", "--out", out, "--config", config, *FIT[2:]])
    assert exc.value.code == 2
    return faults_summary.check_one_line(capsys.readouterr().err)


def _ns(out: str | None, config: str = TINY_CLS) -> argparse.Namespace:
    return argparse.Namespace(out=out, config=[config], sweep=SPACE)


@pytest.mark.faults(bad_inputs=1)
def test_a_users_folder_is_refused_and_left_untouched(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine\n")
    line = _refused("mine", capsys)
    assert "--out: " in line and "mine exists and was not written by domainbert" in line
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["notes.txt"]


@pytest.mark.faults(bad_inputs=1)
def test_a_home_folder_is_refused(tmp_path, monkeypatch, capsys):
    home = tmp_path / "home"
    (home / "docs").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    assert "home folder" in _refused("~", capsys)
    assert sorted(p.name for p in home.iterdir()) == ["docs"]


@pytest.mark.faults(bad_inputs=1)
def test_a_folder_holding_its_own_config_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cfg").mkdir()
    config = shutil.copy(TINY_CLS, tmp_path / "cfg" / "fit.yaml")
    line = _refused(str(tmp_path / "cfg"), capsys, config=str(config))
    assert "would overwrite the input" in line and "fit.yaml" in line
    assert sorted(p.name for p in (tmp_path / "cfg").iterdir()) == ["fit.yaml"]


def test_a_new_folder_is_marked_and_a_rerun_reuses_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert claim_out(_ns(None), "st", []) == tmp_path / "runs" / "sweeps" / "st"
    assert (tmp_path / "runs" / "sweeps" / "st" / MARKER).is_file()
    (tmp_path / "runs" / "sweeps" / "st" / "trials.csv").write_text("number\n")
    assert claim_out(_ns(None), "st", []) == tmp_path / "runs" / "sweeps" / "st"


def test_an_older_sweeps_folder_is_known_by_its_study(tmp_path):
    old = tmp_path / "old"
    old.mkdir()
    optuna.create_study(storage=f"sqlite:///{old / 'study.db'}", study_name="st")
    (old / "trials.csv").write_text("number\n")
    with pytest.raises(DomainBertError, match=r"not written by domainbert"):
        claim_out(_ns(str(old)), "another-study", [])
    assert not (old / MARKER).exists()
    assert claim_out(_ns(str(old)), "st", []) == old and (old / MARKER).is_file()


def test_a_file_an_override_names_is_an_input(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text('{"text": "a", "label": "x"}\n')
    with pytest.raises(DomainBertError, match=r"^--out .*data would overwrite the input .*train.jsonl"):
        claim_out(_ns(str(tmp_path / "data")), "st", ["--data.train", str(tmp_path / "data" / "train.jsonl")])
    with pytest.raises(DomainBertError, match=r"would overwrite the input"):
        claim_out(_ns(str(tmp_path / "data")), "st", [f"--data.train={tmp_path / 'data' / 'train.jsonl'}"])


@pytest.mark.faults(bad_inputs=1)
def test_a_wrong_out_is_refused_before_the_fit_config_is_parsed(tmp_path, monkeypatch, capsys):
    # parsing the fit config imports Lightning, seconds of work: a refused --out must not wait for it
    import domainbert.sweep.worker as worker

    monkeypatch.setattr(worker, "check_fit", lambda *_: pytest.fail("the fit config was parsed before --out"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine\n")
    line = _refused("mine", capsys)
    assert "mine exists and was not written by domainbert" in line
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["notes.txt"]


def test_the_first_check_creates_and_marks_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert claim_out(_ns(None), "st", [], check_only=True) == tmp_path / "runs" / "sweeps" / "st"
    assert list(tmp_path.iterdir()) == []
    old = tmp_path / "old"
    old.mkdir()
    optuna.create_study(storage=f"sqlite:///{old / 'study.db'}", study_name="st")
    assert claim_out(_ns(str(old)), "st", [], check_only=True) == old  # an older sweep's folder, known by its study
    assert not (old / MARKER).exists()
    with pytest.raises(DomainBertError, match=r"not written by domainbert"):
        claim_out(_ns(str(old)), "another-study", [], check_only=True)
