import pytest
import torch
from transformers import AutoTokenizer

from domainbert.data.masking import IGNORE_INDEX, Masker, word_scheme
from domainbert.errors import DomainBertError

TEXT = "The daemon provides network packets for embedded systems. The library renders vector graphics."


def _batch(tok, n=64):
    enc = tok([TEXT] * n, return_tensors="pt", padding="max_length", max_length=48, truncation=True)
    return enc["input_ids"], enc["attention_mask"]


@pytest.mark.parametrize("family", ["bert", "roberta", "albert"])
def test_rates_80_10_10_and_specials_never_masked(tiny_models, family):
    tok = AutoTokenizer.from_pretrained(tiny_models[family])
    ids, mask = _batch(tok, 256)
    masker = Masker(tok)
    out, labels = masker(ids, mask, generator=torch.Generator().manual_seed(0))
    picked = labels != IGNORE_INDEX
    special = torch.isin(ids, torch.tensor(tok.all_special_ids))
    assert not (picked & special).any(), "special tokens or padding were masked"
    assert not (picked & (mask == 0)).any()
    eligible = (~special & (mask == 1)).sum().item()
    rate = picked.sum().item() / eligible
    assert abs(rate - 0.15) < 0.015, rate
    n = picked.sum().item()
    as_mask = (out[picked] == tok.mask_token_id).sum().item() / n
    unchanged = (out[picked] == ids[picked]).sum().item() / n
    assert abs(as_mask - 0.8) < 0.03, as_mask
    # "unchanged" includes random draws that hit the same token (rare with ~200 tokens)
    assert abs(unchanged - 0.1) < 0.03, unchanged
    assert abs(1 - as_mask - unchanged - 0.1) < 0.03
    # untouched positions are exactly the input
    assert torch.equal(out[~picked], ids[~picked])
    assert torch.equal(labels[picked], ids[picked])


def test_masks_are_fresh_per_draw_and_reproducible(tiny_bert):
    tok = AutoTokenizer.from_pretrained(tiny_bert)
    ids, mask = _batch(tok, 8)
    m = Masker(tok)
    a = m(ids, mask, generator=torch.Generator().manual_seed(1))[1]
    b = m(ids, mask, generator=torch.Generator().manual_seed(2))[1]
    c = m(ids, mask, generator=torch.Generator().manual_seed(1))[1]
    assert not torch.equal(a, b)
    assert torch.equal(a, c)


@pytest.mark.parametrize("family,scheme", [("bert", "wordpiece"), ("roberta", "bpe"), ("albert", "sentencepiece")])
def test_whole_words_masked_together(tiny_models, family, scheme):
    tok = AutoTokenizer.from_pretrained(tiny_models[family])
    assert word_scheme(tok) == scheme
    ids, mask = _batch(tok, 128)
    m = Masker(tok, whole_word=True)
    _, labels = m(ids, mask, generator=torch.Generator().manual_seed(0))
    picked = labels != IGNORE_INDEX
    # map every token to its word through the tokenizer's own word ids (the reference)
    word_ids = tok(TEXT, max_length=48, truncation=True).word_ids()
    n_words_split = 0
    for row in range(ids.shape[0]):
        by_word: dict[int, set] = {}
        for pos, w in enumerate(word_ids):
            if w is not None:
                by_word.setdefault(w, set()).add(bool(picked[row, pos]))
        for w, states in by_word.items():
            pieces = sum(1 for x in word_ids if x == w)
            n_words_split += pieces > 1
            assert len(states) == 1, f"{family}: word {w} partly masked in row {row}"
    assert n_words_split > 0, "the fixture must contain words split into several pieces"
    assert picked.any()


def test_bad_ratios_and_a_tokenizer_without_mask_token_are_user_errors(tiny_bert):
    tok = AutoTokenizer.from_pretrained(tiny_bert)
    for kwargs in ({"probability": 0.0}, {"probability": 1.0}, {"mask_ratio": 0.8, "random_ratio": 0.3}):
        with pytest.raises(DomainBertError, match="masking ratios"):
            Masker(tok, **kwargs)
    tok.mask_token = None
    with pytest.raises(DomainBertError, match="has no mask token"):
        Masker(tok)
