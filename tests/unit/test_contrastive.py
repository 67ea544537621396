"""Unsupervised SimCSE continued pretraining: the loss, the pooling, a short fit, every family, the export."""

import math

import lightning.pytorch as L
import pytest
import torch
import torch.nn.functional as F

from domainbert.errors import DomainBertError
from domainbert.modules.contrastive import ContrastiveModule, info_nce, pool
from tests.helpers.mlm import fixed_batch, small_corpus
from tests.helpers.tiny import FAMILIES


def _trainer(max_steps: int, callbacks=()) -> L.Trainer:
    return L.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=max_steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        callbacks=list(callbacks),
    )


class _Losses(L.Callback):
    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.losses.append(float(outputs["loss"]))


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


def test_a_short_fit_lowers_the_loss(tiny_bert, corpus_file, tmp_path):
    L.seed_everything(0, verbose=False)
    module = ContrastiveModule(str(tiny_bert), learning_rate=1e-3, warmup_ratio=0.0, temperature=0.05)
    dm = small_corpus(module, corpus_file, tmp_path, packing=False)  # 64 texts, 8 batches of 8
    losses = _Losses()
    _trainer(40, [losses]).fit(module, datamodule=dm)
    assert len(losses.losses) == 40 and all(math.isfinite(x) for x in losses.losses)
    first, last = sum(losses.losses[:8]) / 8, sum(losses.losses[-8:]) / 8  # the same 8 batches, epochs 1 and 5
    assert last < 0.8 * first, f"the loss did not fall: {first:.3f} -> {last:.3f}"


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


def test_the_export_loads_into_a_classifier(tiny_bert, corpus_file, tmp_path):
    from domainbert.modules.classification import SequenceClassificationModule

    L.seed_everything(0, verbose=False)
    module = ContrastiveModule(str(tiny_bert), learning_rate=1e-3, warmup_ratio=0.0)
    before = module.model.embeddings.word_embeddings.weight.detach().clone()
    pooler = module.model.pooler.dense.weight.detach().clone()
    assert not any(p.requires_grad for p in module.model.pooler.parameters()), "the unused pooler is frozen (DDP)"
    _trainer(3).fit(module, datamodule=small_corpus(module, corpus_file, tmp_path, packing=False))
    trained = module.model.embeddings.word_embeddings.weight.detach()
    assert not torch.equal(before, trained), "training changed the encoder"
    assert torch.equal(module.model.pooler.dense.weight, pooler), "and left the pooler as it was"
    out = module.export_hf(tmp_path / "hf")
    cls = SequenceClassificationModule(init_from=str(out), label_names=["api", "graphics"])
    assert all(k.startswith("classifier.") for k in cls.missing_keys), cls.missing_keys
    torch.testing.assert_close(cls.model.bert.embeddings.word_embeddings.weight, trained, rtol=0, atol=0)
    layer = "encoder.layer.1.output.dense.weight"
    torch.testing.assert_close(cls.model.bert.state_dict()[layer], module.model.state_dict()[layer], rtol=0, atol=0)


def test_a_batch_of_one_is_refused_or_skipped(tiny_bert, corpus_file, tmp_path):
    module = ContrastiveModule(str(tiny_bert))
    dm = small_corpus(module, corpus_file, tmp_path, packing=False)
    dm.batch_size = 1
    with pytest.raises(DomainBertError, match="batch_size to 2 or more"):
        _trainer(1).fit(module, datamodule=dm)
    batch = fixed_batch(small_corpus(module, corpus_file, packing=False))
    one = {k: v[:1] for k, v in batch.items()}
    assert module.training_step(one, 0) is None, "a last partial batch of one row is skipped"
