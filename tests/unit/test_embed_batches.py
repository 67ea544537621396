"""sorted_batches and embed_texts: batches in order of token count, padded per batch, rows back in text order."""

from __future__ import annotations

import torch
from transformers import AutoModel

from domainbert.core.embed import embed_texts, sorted_batches, token_counts
from domainbert.core.hf import load_model, load_tokenizer

# character length and token count disagree: the long word is one rare word split into many pieces or one token
TEXTS = [
    "the tool renders graphical images and the tool renders graphical images",
    "zqxjvkwpfhgtb",
    "an api",
    "the server exports network packets",
    "sql",
    "the server",
]
PAIRS = [(t, "the tool") for t in TEXTS]


def test_batches_follow_token_counts_and_pad_to_their_longest(tiny_bert):
    tokenizer = load_tokenizer(str(tiny_bert))
    counts = [len(ids) for ids in tokenizer(TEXTS, truncation=True, max_length=12)["input_ids"]]
    batches = list(sorted_batches(tokenizer, TEXTS, 2, 12, "cpu"))
    rows = [i for ids, _ in batches for i in ids]
    assert sorted(rows) == list(range(len(TEXTS)))
    assert [counts[i] for i in rows] == sorted(counts)  # shortest first, by tokens, not characters
    for ids, inputs in batches:
        assert inputs["input_ids"].shape == (len(ids), max(counts[i] for i in ids))  # padded to the batch's longest
        assert inputs["attention_mask"].sum(1).tolist() == [counts[i] for i in ids]
        assert set(inputs) <= set(tokenizer.model_input_names)
    assert list(sorted_batches(tokenizer, [], 2, 12, "cpu")) == []


def test_pairs_are_batched_as_pairs(tiny_bert):
    tokenizer = load_tokenizer(str(tiny_bert))
    want = tokenizer([p[0] for p in PAIRS], [p[1] for p in PAIRS], truncation=True, max_length=12)["input_ids"]
    for ids, inputs in sorted_batches(tokenizer, PAIRS, 4, 12, "cpu"):
        assert inputs["token_type_ids"].shape == inputs["input_ids"].shape  # padded with the ids
        for row, i in enumerate(ids):
            real = inputs["input_ids"][row][inputs["attention_mask"][row].bool()].tolist()
            assert real == want[i]


def test_token_counts_are_the_same_in_chunks(tiny_bert):
    tokenizer = load_tokenizer(str(tiny_bert))
    assert token_counts(tokenizer, TEXTS * 3, 12, chunk=4) == token_counts(tokenizer, TEXTS * 3, 12)
    assert token_counts(tokenizer, TEXTS, 12) == [
        len(i) for i in tokenizer(TEXTS, truncation=True, max_length=12)["input_ids"]
    ]


def test_embeddings_come_back_in_text_order_and_match_one_at_a_time(tiny_bert):
    encoder, _ = load_model(AutoModel, str(tiny_bert))
    tokenizer = load_tokenizer(str(tiny_bert))
    together = embed_texts(encoder, tokenizer, TEXTS, batch_size=4, bf16=False)
    alone = torch.cat([embed_texts(encoder, tokenizer, [t], batch_size=1, bf16=False) for t in TEXTS])
    torch.testing.assert_close(together, alone, rtol=1e-4, atol=1e-5)
