"""The embedding and probe cache: what its key covers, that a hit gives back the very tensors computed, that a corrupt
entry is recomputed, that it can be turned off, and that a cached probe is the probe a fresh fit gives."""

from __future__ import annotations

import os
import shutil

import pytest
import torch
from transformers import AutoModel

from domainbert.adapt.probe_cmd import read_split
from domainbert.core import cache_store
from domainbert.core.embed import embed_texts
from domainbert.core.embed_cache import Embedder, cached_probe
from domainbert.core.hf import load_model, load_tokenizer
from domainbert.core.probe import select_probe
from tests.helpers import FIX

TEXTS = ["The server exports network packets.", "The tool renders graphical images.", "An api for sql tables."]


@pytest.fixture
def model(tiny_bert, tmp_path):
    """A copy of the tiny BERT of this test's own (its weights may be rewritten)."""
    return shutil.copytree(tiny_bert, tmp_path / "bert")


def _embedder(model, **kw) -> Embedder:
    encoder = load_model(AutoModel, str(model))[0]
    return Embedder(str(model), load_tokenizer(str(model)), encoder, **{"bf16": False, **kw})


def _lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith("[cache]")]


def test_the_key_follows_the_texts_max_length_pooling_and_weights_but_not_the_files_mtime(model, tmp_path):
    data = tmp_path / "train.jsonl"
    shutil.copy(FIX / "cls_train.jsonl", data)
    texts = read_split(str(data), "text", None, "label", None)[0]
    base = _embedder(model)
    key = base.key(texts)
    os.utime(data, ns=(10**18, 10**18))  # only the modification time
    assert base.key(read_split(str(data), "text", None, "label", None)[0]) == key
    data.write_text(data.read_text().replace("server", "servers", 1))  # the content
    assert base.key(read_split(str(data), "text", None, "label", None)[0]) != key
    assert _embedder(model, max_length=64).key(texts) != key
    assert _embedder(model, pooling="cls").key(texts) != key
    assert _embedder(model, batch_size=8).key(texts) != key
    assert _embedder(model, bf16=True).key(texts) != key
    assert base.key([(t, "") for t in texts]) != key  # a pair column
    weights = model / "model.safetensors"
    encoder = load_model(AutoModel, str(model))[0]
    with torch.no_grad():
        encoder.embeddings.word_embeddings.weight.mul_(2.0)
    encoder.save_pretrained(model)  # the same folder, other weights
    assert weights.is_file() and _embedder(model).key(texts) != key


def test_a_hit_gives_back_the_computed_tensors_and_says_where_from(model, capsys):
    first = _embedder(model)
    x, key = first.embed(TEXTS, "train.jsonl")
    assert torch.equal(x, embed_texts(first.encoder(), first.tokenizer, TEXTS, bf16=False))
    what = f"embeddings of train.jsonl (3 rows, {model.parent.name}/bert, max_length 128, mean)"
    (line,) = _lines(capsys)
    assert line.startswith(f"[cache] {what} computed in ") and line.endswith(
        f" s, stored in {cache_store.shown('embeddings', key)}"
    )
    again = Embedder(str(model), first.tokenizer, lambda: pytest.fail("a hit loads no model"), bf16=False)
    y, key2 = again.embed(TEXTS, "train.jsonl")
    assert key2 == key and torch.equal(y, x) and y.dtype == x.dtype
    assert _lines(capsys) == [f"[cache] {what} reused from {cache_store.shown('embeddings', key)}"]


@pytest.mark.parametrize("damage", ["truncated", "garbage", "other digest", "no sidecar", "sidecar not json"])
def test_a_corrupt_entry_is_recomputed_and_rewritten(model, capsys, damage):
    x, key = _embedder(model).embed(TEXTS, "train.jsonl")
    tensors, sidecar = cache_store.paths("embeddings", key)
    if damage == "truncated":
        tensors.write_bytes(tensors.read_bytes()[:-16])
    elif damage == "garbage":
        tensors.write_bytes(b"\0" * tensors.stat().st_size)
    elif damage == "other digest":
        sidecar.write_text(sidecar.read_text().replace('"sha256": "', '"sha256": "0'))
    elif damage == "no sidecar":
        sidecar.unlink()
    else:
        sidecar.write_text("{")
    capsys.readouterr()
    y, _ = _embedder(model).embed(TEXTS, "train.jsonl")
    assert torch.equal(y, x) and " computed in " in _lines(capsys)[0]
    assert cache_store.read("embeddings", key) is not None, "the entry was written again"
    _embedder(model).embed(TEXTS, "train.jsonl")
    assert " reused from " in _lines(capsys)[0]


def test_turned_off_it_reads_and_writes_nothing_and_gives_the_same_numbers(model, capsys, monkeypatch):
    x, _ = _embedder(model).embed(TEXTS, "train.jsonl")
    monkeypatch.setenv(cache_store.ENV, "off")
    capsys.readouterr()
    y, key = _embedder(model).embed(TEXTS, "train.jsonl")
    assert key is None and torch.equal(y, x) and _lines(capsys) == []
    monkeypatch.setenv("DOMAINBERT_CACHE", str(model.parent / "other-cache"))
    _embedder(model).embed(TEXTS, "train.jsonl")
    assert not (model.parent / "other-cache").exists()


def test_a_cache_folder_that_cannot_be_written_is_no_error(model, capsys, monkeypatch):
    blocker = model.parent / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("DOMAINBERT_CACHE", str(blocker))  # the cache root is a file: nothing can be stored
    x, key = _embedder(model).embed(TEXTS, "train.jsonl")
    assert key is not None and x.shape[0] == 3
    assert _lines(capsys)[0].endswith("not stored (cache not writable)")


def _task(n: int = 90, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % 3
    x = torch.randn(n, 8, generator=g) + torch.nn.functional.one_hot(y, 8).float() * 1.5
    return x, y


def test_a_cached_probe_is_the_probe_a_fresh_fit_gives(capsys):
    x, y = _task()
    keys, ys = {"train": "k-train", "val": "k-val"}, {"train": y[:60], "val": y[60:]}
    fresh = select_probe(x[:60], y[:60], x[60:], y[60:], 3, grid=(0.01, 1.0))

    def fit():
        return select_probe(x[:60], y[:60], x[60:], y[60:], 3, grid=(0.01, 1.0))

    first = cached_probe(keys, ys, ["a", "b", "c"], fit, "train.jsonl", grid=(0.01, 1.0))
    assert " fitted, stored in " in _lines(capsys)[0]
    cached = cached_probe(
        keys, ys, ["a", "b", "c"], lambda: pytest.fail("a hit fits nothing"), "train.jsonl", (0.01, 1.0)
    )
    (line,) = _lines(capsys)
    assert line.startswith(f"[cache] probe of train.jsonl (C={fresh.c}, 3 labels) reused from ")
    for probe in (first, cached):
        assert probe.c == fresh.c and probe.val_scores == fresh.val_scores
        assert torch.equal(probe.weight, fresh.weight) and torch.equal(probe.bias, fresh.bias)
    other_labels = {"train": y[:60].flip(0), "val": y[60:]}
    calls = []
    cached_probe(keys, other_labels, ["a", "b", "c"], lambda: calls.append(1) or fresh, "train.jsonl", (0.01, 1.0))
    cached_probe(keys, ys, ["a", "b", "c"], lambda: calls.append(1) or fresh, "train.jsonl", (0.1, 1.0))
    cached_probe({**keys, "val": None}, ys, ["a", "b", "c"], lambda: calls.append(1) or fresh, "train.jsonl")
    assert len(calls) == 3, "other labels, another grid, an uncached split: each fits"
