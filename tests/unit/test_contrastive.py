"""Unsupervised SimCSE continued pretraining: the loss, the pooling, one step in every family, validation.

The fits (the loss falls, the export, a batch size of one) are in tests/integration/test_contrastive_fit.py.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from domainbert.errors import DomainBertError
from domainbert.modules.contrastive import ContrastiveModule, info_nce, pool
from tests.helpers.mlm import fixed_batch, small_corpus
from tests.helpers.tiny import FAMILIES


def test_info_nce_matches_the_formula():
    g = torch.Generator().manual_seed(0)
    z1, z2, t = torch.randn(3, 4, generator=g), torch.randn(3, 4, generator=g), 0.5
    expected = 0.0
    for i in range(3):
        sims = [float(F.cosine_similarity(z1[i], z2[j], dim=0)) / t for j in range(3)]
        expected += -sims[i] + math.log(sum(math.exp(s) for s in sims))
    torch.testing.assert_close(info_nce(z1, z2, t), torch.tensor(expected / 3), rtol=1e-5, atol=1e-6)
    eye = 3.0 * torch.eye(3, 4)  # identical views, orthogonal rows: log(1 + (n - 1) e^(-1/t)), whatever the norms
    torch.testing.assert_close(info_nce(eye, eye, 1.0), torch.tensor(math.log(1 + 2 / math.e)))
    with pytest.raises(DomainBertError, match="at least 2 rows"):
        info_nce(z1[:1], z2[:1], t)


def test_mean_pooling_ignores_padding():
    hidden = torch.randn(1, 5, 8)
    padded = torch.cat([hidden, torch.randn(1, 3, 8)], dim=1)  # three padding positions of noise
    mask = torch.tensor([[1] * 5 + [0] * 3])
    torch.testing.assert_close(pool(padded, mask, "mean"), pool(hidden, torch.ones(1, 5), "mean"))
    torch.testing.assert_close(pool(padded, mask, "mean"), hidden.mean(dim=1))
    torch.testing.assert_close(pool(padded, mask, "cls"), hidden[:, 0])


def test_padding_does_not_change_the_embedding(tiny_bert):
    module = ContrastiveModule(str(tiny_bert)).eval()
    enc = module.tokenizer(["a short text", "a rather longer text about packages and libraries"], padding=True)
    batch = {k: torch.tensor(v) for k, v in enc.items()}
    alone = {k: torch.tensor(v) for k, v in module.tokenizer(["a short text"]).items()}
    with torch.no_grad():
        torch.testing.assert_close(module(batch)[:1], module(alone), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
def test_one_step_in_every_family(tiny_models, corpus_file, family):
    module = ContrastiveModule(str(tiny_models[family]))
    batch = fixed_batch(small_corpus(module, corpus_file, packing=False))
    assert set(batch) <= {"input_ids", "attention_mask", "token_type_ids"}
    if family in ("roberta", "distilbert"):
        assert "token_type_ids" not in module.model_inputs(batch)
    opt = torch.optim.AdamW(module.parameters(), lr=1e-3)
    loss = module.training_step(batch, 0)
    assert loss is not None and torch.isfinite(loss)
    loss.backward()
    opt.step()
    assert module.model.training


def test_validation_is_deterministic_and_keeps_the_mode(tiny_bert, corpus_file):
    module = ContrastiveModule(str(tiny_bert))
    batch = fixed_batch(small_corpus(module, corpus_file, packing=False))
    module.eval()
    scores = []
    rng = torch.get_rng_state()
    for _ in range(2):
        module.validation_step(batch, 3)
        scores.append([m.compute().item() for m in (module.val_loss, module.val_alignment, module.val_top1)])
        for m in (module.val_loss, module.val_alignment, module.val_top1):
            m.reset()
    # the same masks twice, and dropout really on (two different views: alignment below 1)
    assert scores[0] == scores[1] and 0 < scores[0][1] < 1 - 1e-6 and 0 <= scores[0][2] <= 1
    assert torch.equal(torch.get_rng_state(), rng), "the fixed validation masks leave the global RNG as it was"
    assert not module.model.training, "validation restores the mode it found"


def test_a_last_batch_of_one_row_is_skipped(tiny_bert, corpus_file):
    module = ContrastiveModule(str(tiny_bert))
    batch = fixed_batch(small_corpus(module, corpus_file, packing=False))
    one = {k: v[:1] for k, v in batch.items()}
    assert module.training_step(one, 0) is None, "a last partial batch of one row is skipped"
