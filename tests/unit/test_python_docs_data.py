"""The bundled python-docs domain: its files match MANIFEST.json, its splits share no text, every label is in
every split, and ``make_python_docs.py --check`` notices a changed file."""

import gzip
import hashlib
import importlib.util
import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "examples" / "data" / "python-docs"
SPLITS = ("train", "validation", "test")


def _rows(split: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / f"{split}.jsonl").read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def manifest() -> dict:
    return json.loads((DATA / "MANIFEST.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def maker():
    script = ROOT / "examples" / "data" / "make_python_docs.py"
    spec = importlib.util.spec_from_file_location("make_python_docs", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_files_match_the_manifest(manifest):
    assert set(manifest["files"]) == {f"{s}.jsonl" for s in SPLITS} | {"corpus.txt.gz"}
    for name, entry in manifest["files"].items():
        assert hashlib.sha256((DATA / name).read_bytes()).hexdigest() == entry["sha256"], name
    for split in SPLITS:
        rows = _rows(split)
        assert len(rows) == manifest["files"][f"{split}.jsonl"]["rows"]
        assert dict(Counter(r["label"] for r in rows)) == manifest["balance"][split]
    with gzip.open(DATA / "corpus.txt.gz", "rt", encoding="utf-8") as f:
        assert sum(1 for _ in f) == manifest["files"]["corpus.txt.gz"]["rows"]
    assert manifest["source"]["python"].count(".") == 2, "the Python version the docstrings came from"


def test_splits_share_no_text_and_the_corpus_holds_none_of_them(maker):
    keys = {s: {maker.key(r["text"]) for r in _rows(s)} for s in SPLITS}
    for split in SPLITS:
        assert len(keys[split]) == len(_rows(split)), f"{split} repeats a text"
    assert not keys["train"] & keys["validation"]
    assert not keys["train"] & keys["test"]
    assert not keys["validation"] & keys["test"]
    with gzip.open(DATA / "corpus.txt.gz", "rt", encoding="utf-8") as f:
        corpus = {maker.key(line) for line in f}
    assert not corpus & (keys["train"] | keys["validation"] | keys["test"]), "a task text is in the corpus"


def test_every_label_has_rows_in_every_split(manifest):
    labels = set(manifest["balance"]["train"])
    assert 10 <= len(labels) <= 20
    for split in SPLITS:
        counts = manifest["balance"][split]
        assert set(counts) == labels, split
        assert min(counts.values()) >= 10, f"{split}: a label has fewer than 10 rows"


def test_check_mode_notices_a_changed_file(maker, tmp_path, capsys):
    copy = tmp_path / "python-docs"
    shutil.copytree(DATA, copy)
    assert maker.main(["--check", "--out", str(copy)]) == 0
    rows = (copy / "validation.jsonl").read_text(encoding="utf-8").splitlines()
    (copy / "validation.jsonl").write_text("\n".join(rows[1:]) + "\n", encoding="utf-8")
    assert maker.main(["--check", "--out", str(copy)]) == 1
    problems = maker.check(copy)
    assert any("sha256" in p for p in problems) and any("rows" in p for p in problems)
