"""Serving in bf16: the Linear weights cast once give the logits autocast gives, and the model is left as it was."""

from __future__ import annotations

import torch
from torch import nn
from transformers import BertConfig, BertForMaskedLM, BertForSequenceClassification

from domainbert.deploy.bench import TorchRunner, linear_weights_bf16


def _classifier() -> BertForSequenceClassification:
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, num_labels=3
    )
    return BertForSequenceClassification(config).eval()


def _batch() -> dict:
    ids = torch.randint(5, 50, (4, 9), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[2:, 6:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def test_bf16_runner_gives_autocasts_logits_bit_for_bit_and_leaves_the_model_in_float32():
    model, batch = _classifier(), _batch()
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        expected = model(**batch).logits.float()
    runner = TorchRunner(model, bf16=True)
    assert len(runner.bf16_weights) == 2 * 2 * 6 + 2 * 2  # 6 Linear layers a block, the pooler and the head
    assert torch.equal(runner(batch), expected)
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert not TorchRunner(model).bf16_weights  # float32 serving casts nothing


def test_a_linear_weight_tied_to_the_word_embeddings_stays_in_float32():
    torch.manual_seed(0)
    config = BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    model = BertForMaskedLM(config)
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight
    names = linear_weights_bf16(model)
    assert "cls.predictions.decoder.weight" not in names and "bert.embeddings.word_embeddings.weight" not in names
    assert "cls.predictions.transform.dense.weight" in names
    assert all(t.dtype == torch.bfloat16 for t in names.values())


def test_weights_already_in_bf16_are_not_cast_again():
    model = _classifier().to(torch.bfloat16)
    assert linear_weights_bf16(model) == {}
    assert isinstance(model.classifier, nn.Linear)


def test_the_copies_are_cast_once_per_model_and_again_when_a_weight_changes():
    model, batch = _classifier(), _batch()
    first = linear_weights_bf16(model)
    assert linear_weights_bf16(model) is first  # a second runner of the same model casts nothing
    with torch.no_grad():
        model.classifier.weight.add_(1.0)  # a training step, a loaded checkpoint
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        expected = model(**batch).logits.float()
    assert torch.equal(TorchRunner(model, bf16=True)(batch), expected)
    assert linear_weights_bf16(model) is not first


def test_a_model_in_bf16_runs_as_it_is_and_one_with_float32_weights_under_autocast():
    model, batch = _classifier().to(torch.bfloat16), _batch()
    seen = []
    model.classifier.register_forward_hook(lambda *_: seen.append(torch.is_autocast_enabled("cpu")))
    with torch.inference_mode():
        expected = model(**batch).logits.float()
    assert torch.equal(TorchRunner(model, bf16=True)(batch), expected)
    assert seen == [False, False]  # no autocast: every operation reads bf16 already
    model.classifier.float()  # one float32 layer left: autocast casts its input
    TorchRunner(model, bf16=True)(batch)
    assert seen[-1] is True
