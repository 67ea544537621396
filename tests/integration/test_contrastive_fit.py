"""Unsupervised SimCSE continued pretraining through the Trainer: the loss falls, the export, a batch size of one.

The loss, the pooling and single steps are in tests/unit/test_contrastive.py.
"""

import math

import lightning.pytorch as L
import pytest
import torch

from domainbert.errors import DomainBertError
from domainbert.modules.contrastive import ContrastiveModule
from tests.helpers.mlm import LossRecorder, quiet_trainer, small_corpus


def test_a_short_fit_lowers_the_loss(tiny_bert, corpus_file, tmp_path):
    L.seed_everything(0, verbose=False)
    module = ContrastiveModule(str(tiny_bert), learning_rate=1e-3, warmup_ratio=0.0, temperature=0.05)
    dm = small_corpus(module, corpus_file, tmp_path, packing=False)  # 64 texts, 8 batches of 8
    losses = LossRecorder()
    quiet_trainer(40, [losses]).fit(module, datamodule=dm)
    assert len(losses.losses) == 40 and all(math.isfinite(x) for x in losses.losses)
    first, last = sum(losses.losses[:8]) / 8, sum(losses.losses[-8:]) / 8  # the same 8 batches, epochs 1 and 5
    assert last < 0.8 * first, f"the loss did not fall: {first:.3f} -> {last:.3f}"


def test_the_export_loads_into_a_classifier(tiny_bert, corpus_file, tmp_path):
    from domainbert.modules.classification import SequenceClassificationModule

    L.seed_everything(0, verbose=False)
    module = ContrastiveModule(str(tiny_bert), learning_rate=1e-3, warmup_ratio=0.0)
    before = module.model.embeddings.word_embeddings.weight.detach().clone()
    pooler = module.model.pooler.dense.weight.detach().clone()
    assert not any(p.requires_grad for p in module.model.pooler.parameters()), "the unused pooler is frozen (DDP)"
    quiet_trainer(3).fit(module, datamodule=small_corpus(module, corpus_file, tmp_path, packing=False))
    trained = module.model.embeddings.word_embeddings.weight.detach()
    assert not torch.equal(before, trained), "training changed the encoder"
    assert torch.equal(module.model.pooler.dense.weight, pooler), "and left the pooler as it was"
    out = module.export_hf(tmp_path / "hf")
    cls = SequenceClassificationModule(init_from=str(out), label_names=["api", "graphics"])
    assert all(k.startswith("classifier.") for k in cls.missing_keys), cls.missing_keys
    torch.testing.assert_close(cls.model.bert.embeddings.word_embeddings.weight, trained, rtol=0, atol=0)
    layer = "encoder.layer.1.output.dense.weight"
    torch.testing.assert_close(cls.model.bert.state_dict()[layer], module.model.state_dict()[layer], rtol=0, atol=0)


def test_a_batch_size_of_one_is_refused(tiny_bert, corpus_file, tmp_path):
    module = ContrastiveModule(str(tiny_bert))
    dm = small_corpus(module, corpus_file, tmp_path, packing=False)
    dm.batch_size = 1
    with pytest.raises(DomainBertError, match="batch_size to 2 or more"):
        quiet_trainer(1).fit(module, datamodule=dm)
