"""The tools' outputs (probe, select, pseudolabel, soup): new, empty or domainbert's, never an input, checked first.

Each command runs through ``domainbert.cli.main`` in-process: a refusal is one ``domainbert: error:`` line, no
model is loaded before it (``load_model`` is replaced by one that fails the test), and the user's files are
byte-identical afterwards.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
from pathlib import Path

import pytest

from domainbert.cli import main
from domainbert.core.files import MARKER
from tests.helpers import FIX, faults_summary
from tests.helpers.tiny import tiny_classifier

LABELS = ["api", "graphics", "network"]  # the labels of tests/fixtures/cls_train.jsonl


def _classifier(tiny_bert, out: Path, seed: int) -> str:
    """A tiny classifier with the fixture task's labels, its head saved."""
    return tiny_classifier(tiny_bert, out, seed, LABELS)


def _digests(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (relative path -> sha256), to show nothing of it changed."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _refused(capsys, args: list[str]) -> str:
    """Run ``domainbert <args>``; assert it exits 2 with one error line (no traceback); return the line."""
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 2
    return faults_summary.check_one_line(capsys.readouterr().err)


@pytest.fixture
def no_loading(monkeypatch):
    """Fail the test if any model is loaded (the output must be checked before any work)."""
    from domainbert.core import hf

    def load_model(*args, **kwargs):
        raise AssertionError("a model was loaded before the output was checked")

    monkeypatch.setattr(hf, "load_model", load_model)


@pytest.fixture
def read_only(monkeypatch, tmp_path) -> Path:
    """A folder on a "read-only file system": creating anything under it raises ``OSError`` errno 30."""
    root = tmp_path / "ro"
    root.mkdir()
    real_mkdir, real_open = os.mkdir, os.open

    def under(path) -> bool:
        return os.path.abspath(os.fspath(path)).startswith(str(root))

    def mkdir(path, *args, **kwargs):
        if under(path):
            raise OSError(errno.EROFS, "Read-only file system", os.fspath(path))
        return real_mkdir(path, *args, **kwargs)

    def os_open(path, flags, *args, **kwargs):
        if under(path) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise OSError(errno.EROFS, "Read-only file system", os.fspath(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", mkdir)
    monkeypatch.setattr(os, "open", os_open)
    return root


@pytest.mark.faults(bad_inputs=1)
@pytest.mark.parametrize("where", ["same", "parent"])
def test_soup_never_writes_over_one_of_its_models(tiny_bert, tmp_path, capsys, no_loading, where):
    models = [_classifier(tiny_bert, tmp_path / "runs" / f"m{i}" / "hf", seed=i) for i in range(2)]
    (Path(models[0]) / MARKER).write_text("an hf/ export: domainbert wrote it\n")  # as fine-tuning exports are
    before = _digests(tmp_path / "runs")
    out = models[0] if where == "same" else str(tmp_path / "runs")

    line = _refused(capsys, ["soup", "--models", json.dumps(models), "--out", out])

    lost = sum(1 for k, v in before.items() if _digests(tmp_path / "runs").get(k) != v)
    faults_summary.record("data_lost", lost)
    assert lost == 0
    assert f"soup: --out {out} would overwrite the input {models[0]}" in line


@pytest.mark.faults(bad_inputs=1)
def test_select_never_writes_over_its_corpus(tmp_path, capsys, no_loading):
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / MARKER).write_text("")  # even a folder domainbert marked: its inputs are never replaced
    corpus = folder / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": f"document {i} about sockets"}) + "\n" for i in range(20)))
    before = corpus.read_bytes()
    task = str(FIX / "cls_train.jsonl")

    line = _refused(capsys, ["select", "--model", "m", "--corpus", str(corpus), "--task", task, "--out", str(folder)])

    assert corpus.read_bytes() == before
    assert f"select: --out {folder} would overwrite the input {corpus}" in line
    assert sorted(p.name for p in folder.iterdir()) == sorted([MARKER, "corpus.jsonl"])  # no result.json either


@pytest.mark.faults(bad_inputs=1)
def test_pseudolabel_never_writes_over_the_tasks_train_file(tiny_bert, tmp_path, capsys, no_loading):
    folder = tmp_path / "task"
    folder.mkdir()
    train = folder / "train.jsonl"
    train.write_bytes((FIX / "cls_train.jsonl").read_bytes())
    before = _digests(folder)
    args = ["pseudolabel", "--model", str(tiny_bert), "--corpus", str(FIX / "corpus.txt"), "--task", str(train)]

    line = _refused(capsys, [*args, "--out", str(folder)])

    assert _digests(folder) == before
    assert f"pseudolabel: --out {folder} would overwrite the input {train}" in line


@pytest.mark.faults(bad_inputs=1)
def test_probe_refuses_an_output_that_is_a_file_before_embedding_anything(tmp_path, capsys, no_loading):
    out = tmp_path / "results.txt"
    out.write_text("the user's notes\n")
    train = str(FIX / "cls_train.jsonl")

    line = _refused(capsys, ["probe", "--model", "m", "--train", train, "--out", str(out)])

    assert out.read_text() == "the user's notes\n"
    assert f"probe: --out: {out} exists and is not a folder domainbert wrote" in line


@pytest.mark.faults(bad_inputs=1)
def test_a_folder_of_the_users_is_never_a_tools_output(tmp_path, capsys, no_loading):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep\n")
    train = str(FIX / "cls_train.jsonl")

    line = _refused(capsys, ["probe", "--model", "m", "--train", train, "--out", str(mine)])

    assert f"{mine} exists and was not written by domainbert" in line
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]


@pytest.mark.faults(bad_inputs=1)
@pytest.mark.parametrize("tool", ["probe", "select", "pseudolabel", "soup"])
def test_a_read_only_output_folder_is_one_line_before_any_work(
    tiny_bert, tmp_path, capsys, monkeypatch, read_only, tool
):
    from domainbert.core import hf

    teachers = [_classifier(tiny_bert, tmp_path / f"t{i}", seed=i) for i in range(2)]

    def load_model(*args, **kwargs):  # set after the teachers were saved: the command itself loads nothing
        raise AssertionError("a model was loaded before the output was checked")

    monkeypatch.setattr(hf, "load_model", load_model)
    train, corpus, out = str(FIX / "cls_train.jsonl"), str(FIX / "corpus.txt"), str(read_only / "out")
    args = {
        "probe": ["--model", str(tiny_bert), "--train", train],
        "select": ["--model", str(tiny_bert), "--corpus", corpus, "--task", train, "--k", "2"],
        "pseudolabel": ["--model", teachers[0], "--corpus", corpus, "--task", train],
        "soup": ["--models", json.dumps(teachers)],
    }[tool]
    line = _refused(capsys, [tool, *args, "--out", out])

    assert "Read-only file system" in line and str(read_only / "out") in line and "Errno" not in line
    assert not any(read_only.iterdir())


@pytest.mark.faults(bad_inputs=1)
def test_pseudolabel_refuses_a_teacher_without_a_trained_classification_head(tiny_bert, tmp_path, capsys):
    task = tmp_path / "task.jsonl"  # the labels a head-less model's config names (LABEL_0, LABEL_1)
    task.write_text("".join(json.dumps({"text": f"task text {i}", "label": f"LABEL_{i % 2}"}) + "\n" for i in range(4)))
    out = tmp_path / "out"
    args = ["pseudolabel", "--model", str(tiny_bert), "--corpus", str(FIX / "corpus.txt"), "--task", str(task)]

    line = _refused(capsys, [*args, "--out", str(out)])

    assert f"pseudolabel: the teacher {tiny_bert} has no trained classification head" in line
    assert "classifier.weight" in line and "fine-tuning" in line
    assert not (out / "train.jsonl").exists() and not (out / "result.json").exists()


def test_a_rerun_into_its_own_output_folder_is_allowed(tiny_bert, tmp_path):
    from domainbert.adapt.pseudo import pseudolabel

    teacher = _classifier(tiny_bert, tmp_path / "t", seed=0)
    task, corpus, out = str(FIX / "cls_train.jsonl"), str(FIX / "corpus.txt"), str(tmp_path / "out")
    first = pseudolabel(teacher, corpus, task, out, ratio=0.5, max_documents=50)
    again = pseudolabel(teacher, corpus, task, out, ratio=0.5, max_documents=50)
    assert (tmp_path / "out" / MARKER).is_file()
    assert {k: v for k, v in first.items() if k != "seconds"} == {k: v for k, v in again.items() if k != "seconds"}


@pytest.mark.faults(bad_inputs=1)
def test_a_truncated_gzip_corpus_is_one_line_naming_the_file_and_the_line_reached(tmp_path, capsys, no_loading):
    import gzip

    whole = gzip.compress("".join(f"corpus document number {i} about sockets\n" for i in range(5000)).encode())
    corpus = tmp_path / "corpus.txt.gz"
    corpus.write_bytes(whole[: len(whole) // 2])  # a download that broke off half-way
    args = ["select", "--model", "m", "--corpus", str(corpus), "--task", str(FIX / "cls_train.jsonl")]

    line = _refused(capsys, [*args, "--out", str(tmp_path / "out")])

    assert f"{corpus}: the gzip file is truncated: its text breaks off after line " in line
    reached = int(line.split("after line ")[1].split()[0])
    assert 0 < reached < 5000
