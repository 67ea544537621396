"""Tokenized splits shared across stages (domainbert.data.token_cache): what the fingerprint follows and ignores, and
that a second data module reads the first one's file, says so in one line and calls no tokenizer."""

from __future__ import annotations

import os
import shutil

import datasets
import pytest
from transformers import AutoTokenizer

from domainbert.data import token_cache
from domainbert.data.classification import ClassificationDataModule
from tests.helpers import FIX

TRAIN, VAL = FIX / "cls_train.jsonl", FIX / "cls_val.jsonl"


def _module(tok, cache, train=TRAIN, **kw) -> ClassificationDataModule:
    dm = ClassificationDataModule(train=str(train), val=str(VAL), cache_dir=str(cache), **{"max_length": 64, **kw})
    dm.connect(tok)
    return dm


def _fingerprint(dm: ClassificationDataModule, split: str = "train") -> str:
    ds = dm.raw(split)
    return token_cache.fingerprint(ds, dm.encoder(split), batched=True, remove_columns=ds.column_names)


def _lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith("[cache]")]


def test_two_loads_of_one_tokenizer_from_two_folders_give_one_fingerprint(tiny_bert, tmp_path):
    copy = shutil.copytree(tiny_bert, tmp_path / "exported")  # a later stage's copy of the same tokenizer files
    first, second = AutoTokenizer.from_pretrained(tiny_bert), AutoTokenizer.from_pretrained(copy)
    assert first is not second and first.name_or_path != second.name_or_path
    assert token_cache.tokenizer_fingerprint(first) == token_cache.tokenizer_fingerprint(second)
    assert _fingerprint(_module(first, tmp_path / "ds")) == _fingerprint(_module(second, tmp_path / "ds"))


def test_a_call_with_truncation_leaves_the_tokenizer_fingerprint_as_it_was(tiny_bert):
    tok = AutoTokenizer.from_pretrained(tiny_bert)
    before = token_cache.tokenizer_fingerprint(tok)
    tok(["the server exports network packets"] * 2, truncation=True, max_length=8, padding="max_length")
    assert token_cache.tokenizer_fingerprint(tok) == before


def test_the_remembered_tokenizer_state_gives_the_fingerprint_of_a_fresh_computation(tiny_bert, monkeypatch):
    tok = AutoTokenizer.from_pretrained(tiny_bert)
    first = token_cache.tokenizer_fingerprint(tok)
    assert token_cache.tokenizer_fingerprint(tok) == first  # the remembered state
    monkeypatch.setattr(token_cache, "_LAST_STATE", ("", b""))
    assert token_cache.tokenizer_fingerprint(tok) == first  # computed afresh
    tok.backend_tokenizer.normalizer = None  # a change outside the vocabulary and the special tokens
    assert token_cache.tokenizer_fingerprint(tok) != first


def test_the_fingerprint_follows_max_length_the_file_content_the_vocabulary_and_the_split(tiny_bert, tmp_path):
    tok = AutoTokenizer.from_pretrained(tiny_bert)
    train = tmp_path / "cls_train.jsonl"
    train.write_bytes(TRAIN.read_bytes())
    base = _fingerprint(_module(tok, tmp_path / "ds", train=train))
    assert _fingerprint(_module(tok, tmp_path / "ds", train=train)) == base
    assert _fingerprint(_module(tok, tmp_path / "ds", train=train, max_length=32)) != base
    train.write_text(TRAIN.read_text(encoding="utf-8").replace("graphical", "vector", 1), encoding="utf-8")
    later = train.stat().st_mtime + 10
    os.utime(train, (later, later))
    assert _fingerprint(_module(tok, tmp_path / "ds", train=train)) != base, "the same file, edited"
    extended = AutoTokenizer.from_pretrained(tiny_bert)
    extended.add_tokens(["kubernetes"])
    assert token_cache.tokenizer_fingerprint(extended) != token_cache.tokenizer_fingerprint(tok)
    dm = _module(tok, tmp_path / "ds")
    first = _fingerprint(dm)
    assert _fingerprint(_module(extended, tmp_path / "ds")) != first
    ds = dm.raw("train")
    keep = token_cache.fingerprint(ds, dm.encoder("train"), batched=True, remove_columns=[])
    assert keep != first, "map options that change the rows count"


def test_a_second_module_reuses_the_first_ones_files_in_one_line_each_and_calls_no_tokenizer(
    tiny_bert, tmp_path, capsys, monkeypatch
):
    first = _module(AutoTokenizer.from_pretrained(tiny_bert), tmp_path / "ds")
    first.setup("fit")
    assert _lines(capsys) == [], "a split tokenized now says nothing more than the progress bar"
    tok = AutoTokenizer.from_pretrained(tiny_bert)
    monkeypatch.setattr(type(tok), "__call__", lambda *a, **k: pytest.fail("a reused split calls no tokenizer"))
    second = _module(tok, tmp_path / "ds", seed=7)
    second.setup("fit")
    train_file, val_file = (second.datasets[s].cache_files[0]["filename"] for s in ("train", "validation"))
    assert _lines(capsys) == [
        f"[cache] tokenized cls_train.jsonl (60 rows, max_length 64) reused from {token_cache.shown([train_file])}",
        f"[cache] tokenized cls_val.jsonl (15 rows, max_length 64) reused from {token_cache.shown([val_file])}",
    ]
    assert train_file == first.datasets["train"].cache_files[0]["filename"]
    assert second.datasets["train"]["input_ids"] == first.datasets["train"]["input_ids"]


def test_a_split_kept_in_memory_says_nothing(tiny_bert, capsys):
    tok = AutoTokenizer.from_pretrained(tiny_bert)
    dm = ClassificationDataModule(max_length=64, labels=["api", "graphics", "network"])
    dm.connect(tok)
    ds = datasets.Dataset.from_dict({"text": ["an api for sql tables"], "label": ["api"]})
    out = token_cache.tokenize(ds, dm.encoder("train"), "rows.jsonl", batched=True, remove_columns=["text", "label"])
    out2 = token_cache.tokenize(ds, dm.encoder("train"), "rows.jsonl", batched=True, remove_columns=["text", "label"])
    assert out["input_ids"] == out2["input_ids"] and _lines(capsys) == []


def test_shown_names_the_home_folder_and_the_shards_pattern(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    one = tmp_path / "ds" / "cache-ab12.arrow"
    assert token_cache.shown([one]) == "~/ds/cache-ab12.arrow"
    shards = [tmp_path / "ds" / f"cache-ab12_0000{i}_of_00002.arrow" for i in range(2)]
    assert token_cache.shown(shards) == "~/ds/cache-ab12_*.arrow"


def test_a_file_edited_with_its_modification_time_restored_is_read_and_tokenized_anew(tiny_bert, tmp_path):
    tok = AutoTokenizer.from_pretrained(tiny_bert)
    train = tmp_path / "train.jsonl"
    train.write_bytes(TRAIN.read_bytes())
    first = _module(tok, tmp_path / "ds", train=train)
    first.setup("fit")
    stamp = train.stat()
    rows = TRAIN.read_text(encoding="utf-8").splitlines()
    edited = "\n".join([rows[1], rows[0], *rows[2:]]) + "\n"  # same bytes, same size: two rows swapped
    assert len(edited.encode()) == stamp.st_size and edited != TRAIN.read_text(encoding="utf-8")
    train.write_text(edited, encoding="utf-8")
    os.utime(train, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))  # the modification time put back
    second = _module(tok, tmp_path / "ds", train=train)
    second.setup("fit")
    assert second.datasets["train"]["input_ids"][0] == first.datasets["train"]["input_ids"][1]
    assert second.datasets["train"]["input_ids"][1] == first.datasets["train"]["input_ids"][0]
    assert second.raw("train")[0] == first.raw("train")[1], "the read rows, not only the tokenized ones, are new"


@pytest.mark.parametrize("damage", ["cut", "replaced"])
def test_a_kept_split_cut_short_or_replaced_is_tokenized_again_in_one_line(tiny_bert, tmp_path, capsys, damage):
    tok = AutoTokenizer.from_pretrained(tiny_bert)
    first = _module(tok, tmp_path / "ds")
    first.setup("fit")
    want = list(first.datasets["train"]["input_ids"])  # a Column reads the mapped file lazily: copy it first
    kept = first.datasets["train"].cache_files[0]["filename"]
    other = first.datasets["validation"].cache_files[0]["filename"]
    data = open(kept, "rb").read()
    with open(kept, "wb") as fh:
        fh.write(data[: len(data) // 2] if damage == "cut" else open(other, "rb").read())
    capsys.readouterr()
    for _ in range(2):  # the next run tokenizes again; the one after reuses the new file
        again = _module(tok, tmp_path / "ds")
        again.setup("fit")
        assert list(again.datasets["train"]["input_ids"]) == want
    lines = [line for line in _lines(capsys) if "cls_train" in line]
    assert lines[0] == (
        f"[cache] tokenized cls_train.jsonl: the kept file {token_cache.shown([kept])} was cut short or replaced; "
        "tokenizing again"
    )
    assert len(lines) == 2 and "reused from" in lines[1]


def test_a_kept_file_without_a_record_that_cannot_be_read_is_tokenized_again(tiny_bert, tmp_path, capsys):
    tok = AutoTokenizer.from_pretrained(tiny_bert)
    first = _module(tok, tmp_path / "ds")
    first.setup("fit")
    want = list(first.datasets["train"]["input_ids"])  # a Column reads the mapped file lazily: copy it first
    kept = first.datasets["train"].cache_files[0]["filename"]
    for record in (tmp_path / "ds").rglob("domainbert-tokenized-*.json"):
        record.unlink()  # as an older domainbert left its files
    with open(kept, "r+b") as fh:
        fh.truncate(100)
    capsys.readouterr()
    again = _module(tok, tmp_path / "ds")
    again.setup("fit")
    assert list(again.datasets["train"]["input_ids"]) == want
    assert any("was cut short or replaced; tokenizing again" in line for line in _lines(capsys))
