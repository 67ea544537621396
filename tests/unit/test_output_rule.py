"""The one rule of every command's output (domainbert.core.files.check_output), from the command line, checked first.

An output is new, empty or marked as domainbert's; never one of the command's inputs (nor inside or holding one),
never the root, a home or a project folder, even with ``--overwrite true``; refused in one line before any model is
loaded. And one pipeline at a time writes a folder (its lock in ``out``).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from pathlib import Path

import pytest

from domainbert.cli import main
from domainbert.core.files import MARKER, check_output
from domainbert.errors import DomainBertError
from tests.helpers import FIX, faults_summary


def _digests(folder: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


def _refused(capsys, args: list[str]) -> str:
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 2
    return faults_summary.check_one_line(capsys.readouterr().err)


@pytest.fixture
def no_loading(monkeypatch):
    """Fail the test if a model is loaded (the output is checked before any work)."""
    from domainbert.core import hf
    from domainbert.deploy import command

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the output was checked")

    monkeypatch.setattr(hf, "load_model", refuse)
    monkeypatch.setattr(hf, "load_tokenizer", refuse)
    monkeypatch.setattr(command, "load_variant", refuse)


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A home folder with the user's files in it."""
    folder = tmp_path / "home"
    (folder / "docs").mkdir(parents=True)
    (folder / "docs" / "thesis.tex").write_text("years of work\n")
    monkeypatch.setenv("HOME", str(folder))
    return folder


def _vocab(model: str, out: str) -> list[str]:
    corpus = str(FIX / "corpus.txt")
    return ["vocab", "extend", "--model", model, "--corpus", corpus, "--out", out, "--overwrite", "true"]


def test_vocab_extend_never_replaces_the_home_folder_even_with_overwrite(tiny_bert, home, capsys, no_loading):
    before = _digests(home)
    line = _refused(capsys, _vocab(str(tiny_bert), "~"))
    assert "it is a home folder" in line and "even with --overwrite" in line and str(home) in line
    assert _digests(home) == before


def test_vocab_extend_never_replaces_its_own_model_even_with_overwrite(tiny_bert, capsys, no_loading):
    before = _digests(Path(tiny_bert))
    line = _refused(capsys, _vocab(str(tiny_bert), str(tiny_bert)))
    assert f"vocab: --out {tiny_bert} would overwrite the input {tiny_bert}" in line
    assert _digests(Path(tiny_bert)) == before


def test_vocab_extend_never_writes_inside_its_own_model(tiny_bert, capsys, no_loading):
    line = _refused(capsys, _vocab(str(tiny_bert), str(Path(tiny_bert) / "extended")))
    assert f"lies inside the input {tiny_bert}" in line
    assert not (Path(tiny_bert) / "extended").exists()


def _export(model: str, out: str) -> list[str]:
    return ["export", "--model", model, "--out", out, "--latency_examples", "2", "--repeats", "1"]


def test_export_never_writes_into_a_folder_of_the_users(tiny_bert, tmp_path, capsys, no_loading):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "report.md").write_text("my report\n")
    (mine / "report.json").write_text('{"mine": true}\n')
    before = _digests(mine)
    line = _refused(capsys, _export(str(tiny_bert), str(mine)))
    assert f"export: --out: {mine} exists and was not written by domainbert" in line
    assert _digests(mine) == before and sorted(p.name for p in mine.iterdir()) == ["report.json", "report.md"]


@pytest.mark.parametrize("where", ["root", "project", "file"])
def test_export_refuses_the_root_a_project_and_a_file_before_any_work(tiny_bert, tmp_path, capsys, no_loading, where):
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text("[project]\nname = 'mine'\n")
    (tmp_path / "notes.txt").write_text("notes\n")
    out = {"root": "/", "project": str(project), "file": str(tmp_path / "notes.txt")}[where]
    line = _refused(capsys, _export(str(tiny_bert), out))
    said = {
        "root": "it is the root of the file system",
        "project": "it is a project folder (it holds pyproject.toml)",
        "file": "exists and is not a folder domainbert wrote",
    }[where]
    assert f"domainbert: error: export: --out: {out}" in line and said in line
    assert not (project / MARKER).exists() and (tmp_path / "notes.txt").read_text() == "notes\n"
    assert not Path("/", MARKER).exists()


def test_the_rule_refuses_a_folder_holding_the_home_and_an_output_inside_an_input(home, tmp_path):
    with pytest.raises(DomainBertError, match=f"it holds the home folder {home}"):
        check_output(tmp_path, what="out")
    data = tmp_path / "data"
    data.mkdir()
    with pytest.raises(DomainBertError, match="lies inside the input"):
        check_output(data / "out", [str(data)], what="out")
    marked = tmp_path / "marked"
    marked.mkdir()
    (marked / MARKER).write_text("")
    (marked / "x.txt").write_text("")
    assert check_output(marked, [str(data)]) == marked  # domainbert's own folder: reused
    (marked / ".git").mkdir()
    with pytest.raises(DomainBertError, match=r"project folder \(it holds .git\)"):
        check_output(marked, overwrite=True)  # marked or not, a repository is never an output


def test_a_pipeline_refuses_the_home_folder_as_out(tiny_bert, home, capsys):
    args = ["pipeline", "--base_model", str(tiny_bert), "--task_train", str(FIX / "cls_train.jsonl")]
    args += ["--task_val", str(FIX / "cls_val.jsonl"), "--out", str(home), "--dapt.enabled", "false"]
    before = _digests(home)
    line = _refused(capsys, args)
    assert f"out: {home}: it is a home folder" in line
    assert _digests(home) == before and not (home / MARKER).exists()


def test_a_second_pipeline_on_the_same_out_is_refused_while_the_first_holds_it(tmp_path):
    from domainbert.pipeline.runner import LOCK, Runner

    out = tmp_path / "p"
    first = Runner(out)
    holder = os.open(out / LOCK, os.O_RDWR)  # another process's open file: flock treats it as another holder
    try:
        first.close()  # this process lets go; "another pipeline" now holds it
        fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.pwrite(holder, b"4242\n", 0)
        with pytest.raises(DomainBertError, match=r"out: .*p is in use by another pipeline \(pid 4242\)"):
            Runner(out)
    finally:
        os.close(holder)  # as the kernel does when that process ends, however it ends
    again = Runner(out)  # a lock file left behind is no lock: the next pipeline runs
    assert (out / LOCK).read_text().strip() == str(os.getpid())
    again.close()
