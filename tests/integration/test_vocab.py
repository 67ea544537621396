"""Domain vocabulary: new words become one token, new rows start as the mean of their old pieces, and saves reload."""

from __future__ import annotations

import json
import re

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForMaskedLM, AutoTokenizer, BertModel

from domainbert import cli
from domainbert.adapt import vocab
from domainbert.errors import DomainBertError
from tests.helpers.tiny import FAMILIES


def _lines(corpus_file) -> list[str]:
    return corpus_file.read_text(encoding="utf-8").splitlines()


def _span_ids(tokenizer, text: str, start: int, end: int) -> list[int]:
    """Ids of the tokens covering characters ``start:end`` of ``text``, in running text."""
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    return [
        i
        for i, (a, b) in zip(enc["input_ids"], enc["offset_mapping"], strict=True)
        if (a < end and b > start) or a == b == start
    ]


def _bias(model) -> torch.Tensor:
    return model.get_output_embeddings().bias


def _load(path):
    return AutoModelForMaskedLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)


@pytest.mark.parametrize("family", FAMILIES)
def test_new_word_is_one_token_and_starts_as_mean_of_its_pieces(tiny_models, corpus_file, family):
    model, tok = _load(tiny_models[family])
    old_tok = AutoTokenizer.from_pretrained(tiny_models[family])
    torch.manual_seed(0)
    with torch.no_grad():  # a random bias, so that "mean of the old entries" is not trivially zero
        _bias(model).normal_()
    old_emb = model.get_input_embeddings().weight.detach().clone()
    old_bias = _bias(model).detach().clone()
    n_old = len(tok)

    added = vocab.extend(model, tok, _lines(corpus_file), top_k=8, min_freq=5)

    assert 0 < len(added) <= 8
    assert [c.count for c in added] == sorted((c.count for c in added), reverse=True)
    assert all(c.count >= 5 for c in added)
    assert len(tok) == n_old + len(added) == model.get_input_embeddings().weight.shape[0]
    assert sorted(c.new_id for c in added) == list(range(n_old, n_old + len(added)))
    emb, bias = model.get_input_embeddings().weight, _bias(model)
    assert torch.equal(emb[:n_old], old_emb) and torch.equal(bias[:n_old], old_bias)
    for c in added:
        text = f"It has {c.word} and more {c.word}, then {c.word}."
        for m in re.finditer(re.escape(c.word), text):
            # the old tokenizer split the word into exactly the recorded pieces; the new one gives one new token
            assert _span_ids(old_tok, text, m.start(), m.end()) == c.piece_ids, (c.word, family)
            assert _span_ids(tok, text, m.start(), m.end()) == [c.new_id], (c.word, family)
        assert len(c.piece_ids) > 1
        assert torch.allclose(emb[c.new_id], old_emb[c.piece_ids].mean(0), atol=1e-6, rtol=0)
        assert torch.allclose(bias[c.new_id], old_bias[c.piece_ids].mean(0), atol=1e-6, rtol=0)


def test_counts_follow_the_tokenizer_normalizer(tiny_bert, corpus_file):
    """The uncased BERT tokenizer counts "Daemon" and "daemon" as one word: 78 occurrences, counted by hand."""
    tok = AutoTokenizer.from_pretrained(tiny_bert)
    text = corpus_file.read_text(encoding="utf-8")
    counts = vocab.count_forms(tok, _lines(corpus_file))
    assert counts["daemon"] == len(re.findall(r"\bdaemon\b", text, flags=re.IGNORECASE)) == 78
    found = {c.word: c for c in vocab.find_candidates(tok, counts, min_freq=78)}
    assert "daemon" in found and found["daemon"].pieces == tok.tokenize("daemon")
    assert all(c.count >= 78 for c in found.values())


def test_untied_output_embedding_rows_start_as_mean(tiny_bert, corpus_file):
    tok = AutoTokenizer.from_pretrained(tiny_bert)
    model = AutoModelForMaskedLM.from_pretrained(tiny_bert, tie_word_embeddings=False)
    out, inp = model.get_output_embeddings(), model.get_input_embeddings()
    with torch.no_grad():
        out.weight.normal_()
    assert out.weight.data_ptr() != inp.weight.data_ptr()
    old_out = out.weight.detach().clone()
    added = vocab.extend(model, tok, _lines(corpus_file), top_k=4, min_freq=5)
    new_out = model.get_output_embeddings().weight
    assert new_out.shape[0] == len(tok)
    for c in added:
        assert torch.allclose(new_out[c.new_id], old_out[c.piece_ids].mean(0), atol=1e-6, rtol=0)


def test_wordpiece_with_added_tokens_falls_back_to_added_words(tiny_bert, corpus_file):
    """A tokenizer that already has added tokens above its WordPiece vocabulary still gets one-token words."""
    model, tok = _load(tiny_bert)
    tok.add_tokens(["<extra>"])
    model.resize_token_embeddings(len(tok))
    n_old = len(tok)
    added = vocab.extend_vocabulary(model, tok, _lines(corpus_file), top_k=3, min_freq=5)
    assert len(added) == 3 and len(tok) == n_old + 3 == model.get_input_embeddings().weight.shape[0]
    for word in added:
        new_id = tok.convert_tokens_to_ids(word)
        assert new_id >= n_old
        assert _span_ids(tok, f"a {word}, b", 2, 2 + len(word)) == [new_id]
        assert _span_ids(tok, f"a {word}x b", 2, 2 + len(word)) != [new_id]  # whole words only


@pytest.mark.parametrize("family", FAMILIES)
def test_cli_extend_saves_a_loadable_model(tiny_models, corpus_file, tmp_path, family):
    src = tiny_models[family]
    out = tmp_path / "ext"
    cli.main(["vocab", "extend", "--model", str(src), "--corpus", str(corpus_file), "--top_k", "6", "--min_freq", "5",
              "--out", str(out)])  # fmt: skip
    model, tok = _load(out)
    src_model, src_tok = _load(src)
    rows = model.get_input_embeddings().weight
    assert len(tok) == rows.shape[0] == model.config.vocab_size == len(src_tok) + 6
    info = json.loads((out / "vocab_extension.json").read_text(encoding="utf-8"))
    assert info["added"] == 6 and info["tokens_per_word"]["after"] < info["tokens_per_word"]["before"]
    src_rows = src_model.get_input_embeddings().weight
    for w in info["words"]:
        assert tok.convert_tokens_to_ids(w["token"]) == w["id"]
        ids = src_tok.convert_tokens_to_ids(w["old_pieces"])
        assert torch.allclose(rows[w["id"]], src_rows[ids].mean(0), atol=1e-6, rtol=0)
        assert torch.allclose(_bias(model)[w["id"]], _bias(src_model)[ids].mean(0), atol=1e-6, rtol=0)
    word = info["words"][0]["token"].lstrip("▁")
    assert _span_ids(tok, f"see {word} here", 4, 4 + len(word)) == [info["words"][0]["id"]]


def test_extend_keeps_the_source_pooler_and_prints_a_summary(tiny_bert, corpus_file, tmp_path, capsys):
    src = tmp_path / "with_pooler"
    torch.manual_seed(1)
    BertModel.from_pretrained(tiny_bert).save_pretrained(src)  # a headless checkpoint with a trained pooler
    AutoTokenizer.from_pretrained(tiny_bert).save_pretrained(src)
    out = tmp_path / "ext"
    vocab.main(["extend", "--model", str(src), "--corpus", str(corpus_file), "--top_k", "3", "--min_freq", "5",
                "--out", str(out)])  # fmt: skip
    saved = load_file(str(out / "model.safetensors"))
    pooler = load_file(str(src / "model.safetensors"))["pooler.dense.weight"]
    assert torch.equal(saved["bert.pooler.dense.weight"], pooler)
    printed = capsys.readouterr().out
    assert "added 3 tokens" in printed and "tokens per word" in printed


def test_extend_refuses_to_overwrite(tiny_bert, corpus_file, tmp_path):
    out = tmp_path / "ext"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    args = ["extend", "--model", str(tiny_bert), "--corpus", str(corpus_file), "--top_k", "2", "--min_freq", "5"]
    with pytest.raises(DomainBertError, match="already exists"):
        vocab.main([*args, "--out", str(out)])
    assert (out / "keep.txt").read_text() == "mine"
    vocab.main([*args, "--out", str(out), "--overwrite", "true"])
    assert not (out / "keep.txt").exists() and (out / "tokenizer.json").exists()


@pytest.mark.parametrize("content", [None, "", "\n\n\n"], ids=["missing", "empty", "blank"])
def test_bad_corpus_names_the_file(tiny_bert, tmp_path, capsys, content):
    corpus = tmp_path / "corpus.txt"
    if content is not None:
        corpus.write_text(content)
    out = tmp_path / "ext"
    with pytest.raises(SystemExit) as exc:
        cli.main(["vocab", "extend", "--model", str(tiny_bert), "--corpus", str(corpus), "--out", str(out)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"domainbert: error: {corpus}" in err and "Traceback" not in err
    assert not out.exists()


def test_help_shows_docstrings(capsys):
    with pytest.raises(SystemExit) as exc:
        vocab.main(["extend", "--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    assert "--top_k" in text and "the fewest occurrences a word needs" in text


@pytest.mark.parametrize("lowercase", [True, False])
def test_train_wordpiece(corpus_file, tmp_path, lowercase):
    out = tmp_path / "tok"
    cli.main(["vocab", "train", "--corpus", str(corpus_file), "--vocab_size", "300", "--out", str(out),
              "--lowercase", str(lowercase).lower()])  # fmt: skip
    tok = AutoTokenizer.from_pretrained(out)
    assert type(tok).__name__ == "BertTokenizer" and 100 < len(tok) <= 300
    assert tok.convert_tokens_to_ids(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]) == [0, 1, 2, 3, 4]
    line = _lines(corpus_file)[0]
    enc = tok(line)
    assert enc["input_ids"][0] == tok.cls_token_id and enc["input_ids"][-1] == tok.sep_token_id
    assert tok.unk_token_id not in enc["input_ids"]
    assert ("The" in tok.tokenize(line)) is (not lowercase)
    assert tok.decode(enc["input_ids"], skip_special_tokens=True).split()[1:3] == [
        w.lower() if lowercase else w for w in line.split()[1:3]
    ]


def test_train_bad_input(tmp_path):
    with pytest.raises(DomainBertError, match="nothing.txt"):
        vocab.main(["train", "--corpus", str(tmp_path / "nothing.txt"), "--out", str(tmp_path / "t")])
    with pytest.raises(DomainBertError, match="vocab_size=3"):
        vocab.train_wordpiece(["some text"], vocab_size=3)
