"""Domain vocabulary, the functions: a new word becomes one token and its rows start as the mean of its old pieces.

The ``vocab extend`` / ``vocab train`` commands, end to end, are in tests/integration/test_vocab.py.
"""

from __future__ import annotations

import re

import pytest
import torch
from transformers import AutoModelForMaskedLM, AutoTokenizer

from domainbert.adapt import vocab
from tests.helpers.tiny import FAMILIES
from tests.helpers.vocab import lines, load, mlm_bias, span_ids


@pytest.mark.parametrize("family", FAMILIES)
def test_new_word_is_one_token_and_starts_as_mean_of_its_pieces(tiny_models, corpus_file, family):
    model, tok = load(tiny_models[family])
    old_tok = AutoTokenizer.from_pretrained(tiny_models[family])
    torch.manual_seed(0)
    with torch.no_grad():  # a random bias, so that "mean of the old entries" is not trivially zero
        mlm_bias(model).normal_()
    old_emb = model.get_input_embeddings().weight.detach().clone()
    old_bias = mlm_bias(model).detach().clone()
    n_old = len(tok)

    added = vocab.extend(model, tok, lines(corpus_file), top_k=8, min_freq=5)

    assert 0 < len(added) <= 8
    assert [c.count for c in added] == sorted((c.count for c in added), reverse=True)
    assert all(c.count >= 5 for c in added)
    assert len(tok) == n_old + len(added) == model.get_input_embeddings().weight.shape[0]
    assert sorted(c.new_id for c in added) == list(range(n_old, n_old + len(added)))
    emb, bias = model.get_input_embeddings().weight, mlm_bias(model)
    assert torch.equal(emb[:n_old], old_emb) and torch.equal(bias[:n_old], old_bias)
    for c in added:
        text = f"It has {c.word} and more {c.word}, then {c.word}."
        for m in re.finditer(re.escape(c.word), text):
            # the old tokenizer split the word into exactly the recorded pieces; the new one gives one new token
            assert span_ids(old_tok, text, m.start(), m.end()) == c.piece_ids, (c.word, family)
            assert span_ids(tok, text, m.start(), m.end()) == [c.new_id], (c.word, family)
        assert len(c.piece_ids) > 1
        assert torch.allclose(emb[c.new_id], old_emb[c.piece_ids].mean(0), atol=1e-6, rtol=0)
        assert torch.allclose(bias[c.new_id], old_bias[c.piece_ids].mean(0), atol=1e-6, rtol=0)


def test_counts_follow_the_tokenizer_normalizer(tiny_bert, corpus_file):
    """The uncased BERT tokenizer counts "Daemon" and "daemon" as one word: 78 occurrences, counted by hand."""
    tok = AutoTokenizer.from_pretrained(tiny_bert)
    text = corpus_file.read_text(encoding="utf-8")
    counts = vocab.count_forms(tok, lines(corpus_file))
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
    added = vocab.extend(model, tok, lines(corpus_file), top_k=4, min_freq=5)
    new_out = model.get_output_embeddings().weight
    assert new_out.shape[0] == len(tok)
    for c in added:
        assert torch.allclose(new_out[c.new_id], old_out[c.piece_ids].mean(0), atol=1e-6, rtol=0)


def test_wordpiece_with_added_tokens_falls_back_to_added_words(tiny_bert, corpus_file):
    """A tokenizer that already has added tokens above its WordPiece vocabulary still gets one-token words."""
    model, tok = load(tiny_bert)
    tok.add_tokens(["<extra>"])
    model.resize_token_embeddings(len(tok))
    n_old = len(tok)
    added = vocab.extend_vocabulary(model, tok, lines(corpus_file), top_k=3, min_freq=5)
    assert len(added) == 3 and len(tok) == n_old + 3 == model.get_input_embeddings().weight.shape[0]
    for word in added:
        new_id = tok.convert_tokens_to_ids(word)
        assert new_id >= n_old
        assert span_ids(tok, f"a {word}, b", 2, 2 + len(word)) == [new_id]
        assert span_ids(tok, f"a {word}x b", 2, 2 + len(word)) != [new_id]  # whole words only


@pytest.mark.parametrize("family", ["bert", "roberta", "albert"], ids=["wordpiece", "byte-level", "unigram"])
def test_the_tokenizer_adopts_the_extended_backend_in_place(tiny_models, corpus_file, tmp_path, family):
    """Pin of the one private attribute domainbert sets (``_tokenizer``, under transformers' read-only
    ``backend_tokenizer``): after :func:`vocab.adopt_backend` the same tokenizer object has the new vocabulary,
    length and encodings, and saves them. A transformers release that keeps state elsewhere fails here."""
    tok = AutoTokenizer.from_pretrained(tiny_models[family])
    cands = vocab.find_candidates(tok, vocab.count_forms(tok, lines(corpus_file)), min_freq=5)[:3]
    new, cands = vocab.add_words(tok, cands)
    word = cands[0].word
    text = f"see {word} here"
    assert span_ids(tok, text, 4, 4 + len(word)) == cands[0].piece_ids  # before: the old pieces
    same = tok
    vocab.adopt_backend(tok, new)
    assert tok is same and tok.backend_tokenizer is new.backend_tokenizer
    assert len(tok) == len(new) and tok.get_vocab() == new.get_vocab()
    assert tok.added_tokens_decoder == new.added_tokens_decoder
    assert span_ids(tok, text, 4, 4 + len(word)) == [cands[0].new_id]
    assert tok(text)["input_ids"] == new(text)["input_ids"]
    tok.save_pretrained(tmp_path / "saved")
    reloaded = AutoTokenizer.from_pretrained(tmp_path / "saved")
    assert len(reloaded) == len(new) and reloaded(text)["input_ids"] == new(text)["input_ids"]
