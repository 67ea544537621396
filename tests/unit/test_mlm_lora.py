"""LoRA on the masked-LM objective: adapters and the MLM head train, the encoder's weights stay, the export merges."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModel, AutoModelForMaskedLM

from domainbert.errors import DomainBertError
from domainbert.modules.lora import LoraSettings
from domainbert.modules.mlm import MaskedLMModule
from tests.helpers.mlm import fixed_batch, small_corpus

#: the attention projections each family adapts by default (domainbert.core.families)
TARGETS = {
    "bert": {"query", "value"},
    "roberta": {"query", "value"},
    "albert": {"query", "value"},
    "electra": {"query", "value"},
    "distilbert": {"q_lin", "v_lin"},
}


def _lora(path, r: int = 4, **kw) -> MaskedLMModule:
    torch.manual_seed(0)
    settings = LoraSettings(r=r, alpha=2 * r, dropout=0.0, **kw.pop("settings", {}))
    return MaskedLMModule(str(path), head_warmup_steps=0, lora=settings, **kw)


def _trainable(module) -> list[str]:
    return [n for n, p in module.named_parameters() if p.requires_grad]


def _adapter_counts(module) -> tuple[int, int]:
    """(adapter parameters, what r predicts: r * (in + out) summed over the adapted linear layers)."""
    lora = sum(p.numel() for n, p in module.named_parameters() if "lora_" in n)
    predicted = 0
    for mod in module.model.modules():
        if hasattr(mod, "lora_A"):
            base = mod.get_base_layer()
            predicted += mod.r["default"] * (base.in_features + base.out_features)
    return lora, predicted


def _step(module, batch, lr: float = 5e-2, steps: int = 1) -> None:
    """``steps`` plain AdamW steps on the trainable parameters (no Trainer)."""
    opt = torch.optim.AdamW([p for p in module.parameters() if p.requires_grad], lr=lr, weight_decay=0.0)
    for i in range(steps):
        loss = module(batch, salt=i)["loss"]
        opt.zero_grad()
        loss.backward()
        opt.step()


@pytest.mark.parametrize("family", sorted(TARGETS))
def test_only_the_adapters_and_the_mlm_head_train(tiny_models, family):
    module = _lora(tiny_models[family])
    prefix = f"model.{module.model.base_model_prefix}."
    adapted = {n for n, mod in module.model.named_modules() if hasattr(mod, "lora_A")}
    assert {n.rsplit(".", 1)[-1] for n in adapted} == TARGETS[family]
    assert all(n.startswith(module.model.base_model_prefix + ".") for n in adapted), "adapters in the encoder only"
    trainable = _trainable(module)
    head = [n for n, _ in module.named_parameters() if module.is_head_param(n)]
    assert head and set(head) <= set(trainable), "the MLM head trains in full"
    assert all(module.is_head_param(n) or "lora_" in n for n in trainable), trainable
    frozen = [n for n, p in module.named_parameters() if not p.requires_grad]
    assert all(n.startswith(prefix) for n in frozen) and any("word_embeddings" in n for n in frozen)
    assert module.hparams.lora == {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": None, "bias": "none"}


@pytest.mark.parametrize("r", [2, 8])
def test_the_trainable_fraction_is_what_r_predicts(tiny_bert, r):
    module = _lora(tiny_bert, r=r)
    lora, predicted = _adapter_counts(module)
    # tiny BERT: 2 layers x (query, value), each 32 -> 32
    assert lora == predicted == r * 2 * 2 * (32 + 32)
    head = sum(p.numel() for n, p in module.named_parameters() if module.is_head_param(n))
    total = sum(p.numel() for p in module.parameters())
    trainable = sum(p.numel() for p in module.parameters() if p.requires_grad)
    assert trainable == lora + head
    plain = sum(p.numel() for p in MaskedLMModule(str(tiny_bert), head_warmup_steps=0).parameters())
    assert total == plain + lora, "the adapters are the only weights added"
    assert trainable / total == pytest.approx((256 * r + head) / (plain + 256 * r))


def test_a_step_moves_the_adapters_and_the_head_and_leaves_the_encoders_weights(tiny_bert, corpus_file, tmp_path):
    module = _lora(tiny_bert)
    batch = fixed_batch(small_corpus(module, corpus_file, tmp_path))
    before = {n: p.detach().clone() for n, p in module.named_parameters()}
    _step(module, batch)
    after = dict(module.named_parameters())
    moved = {n for n in before if not torch.equal(before[n], after[n])}
    assert {n for n in moved if "lora_" not in n} <= {n for n in before if module.is_head_param(n)}
    assert any("lora_B" in n for n in moved) and any("predictions.transform" in n for n in moved)
    base = [n for n in before if not module.is_head_param(n) and "lora_" not in n]
    assert base and not set(base) & moved, "the encoder's own weights (base layers, embeddings) are unchanged"


def _sentence_transformers(tiny_bert, dest):
    """``tiny_bert`` as a mean-pooled sentence-transformers folder."""
    shutil.copytree(tiny_bert, dest)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    (dest / "modules.json").write_text(json.dumps(modules))
    (dest / "1_Pooling").mkdir()
    pooling = {"word_embedding_dimension": 32, "pooling_mode_mean_tokens": True, "pooling_mode_cls_token": False}
    (dest / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    return dest


def _files(folder) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


def test_the_merged_export_gives_the_adapted_models_outputs_without_peft(tiny_bert, corpus_file, tmp_path):
    source = _sentence_transformers(tiny_bert, tmp_path / "st")
    module = _lora(source)
    batch = fixed_batch(small_corpus(module, corpus_file, tmp_path))
    _step(module, batch, steps=3)
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in batch}
    module.eval()
    with torch.no_grad():
        logits = module.model(**inputs).logits
        hidden = module.model.base_model(**inputs).last_hidden_state
    out = module.export_hf(tmp_path / "lora" / "hf")
    assert not any("lora" in k or "base_layer" in k for k in load_file(str(out / "model.safetensors")))
    with torch.no_grad():
        got = AutoModelForMaskedLM.from_pretrained(out).eval()(**inputs).logits
        got_hidden = AutoModel.from_pretrained(out).eval()(**inputs).last_hidden_state
    assert torch.allclose(got, logits, atol=1e-5) and torch.allclose(got_hidden, hidden, atol=1e-5)
    assert not torch.allclose(hidden, AutoModel.from_pretrained(source).eval()(**inputs).last_hidden_state)
    plain = MaskedLMModule(str(source), head_warmup_steps=0).export_hf(tmp_path / "full" / "hf")
    assert _files(out) == _files(plain) and {"modules.json", "1_Pooling/config.json"} <= _files(out)
    assert any("lora_A" in n for n, _ in module.named_parameters()), "the module keeps its adapters"


def test_the_head_warm_up_freezes_the_adapters_and_unfreezing_trains_only_them(tiny_bert):
    module = _lora(tiny_bert)
    adapters_and_head = set(_trainable(module))
    module.set_encoder_frozen(True)
    assert _trainable(module) and all(module.is_head_param(n) for n in _trainable(module))
    module.set_encoder_frozen(False)
    assert (
        set(_trainable(module))
        == adapters_and_head
        == module.encoder_trainable | {n for n, _ in module.named_parameters() if module.is_head_param(n)}
    )


def test_whole_word_masking_trains_the_adapters(tiny_bert, corpus_file, tmp_path):
    module = _lora(tiny_bert, whole_word_mask=True)
    plain = MaskedLMModule(str(tiny_bert), head_warmup_steps=0, whole_word_mask=True)
    batch = fixed_batch(small_corpus(module, corpus_file, tmp_path))
    for a, b in zip(module.mask(batch, 5), plain.mask(batch, 5), strict=True):
        assert torch.equal(a, b), "the same whole-word masks with and without LoRA"
    module(batch, salt=5)["loss"].backward()
    grads = {n for n, p in module.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}
    assert any("lora_B" in n for n in grads) and all("lora_" in n or module.is_head_param(n) for n in grads)


def test_targets_outside_the_encoder_are_refused_in_one_line(tiny_bert):
    with pytest.raises(DomainBertError, match=r"lora.target_modules=\['decoder'\]: no module of the bert encoder"):
        _lora(tiny_bert, settings={"target_modules": ["decoder"]})


def test_feed_forward_targets_adapt_the_encoders_dense_layers_not_the_heads(tiny_bert):
    module = _lora(tiny_bert, settings={"target_modules": ["query", "value", "dense"]})
    adapted = {n for n, mod in module.model.named_modules() if hasattr(mod, "lora_A")}
    assert all(n.startswith("bert.") for n in adapted)
    assert {n.split("layer.0.", 1)[1] for n in adapted if "layer.0." in n} == {
        "attention.self.query",
        "attention.self.value",
        "attention.output.dense",
        "intermediate.dense",
        "output.dense",
    }
    assert not any(n.endswith("lora_A.default.weight") and "cls." in n for n, _ in module.named_parameters())


def test_the_pipeline_stage_form_builds_a_lora_module(tiny_bert, corpus_file, tmp_path):
    from domainbert.cli.lightning_cli import cli_main

    stage = "domainbert/pipeline/stages/dapt.yaml"
    args = ["--model.init_from", str(tiny_bert), "--data.train", str(corpus_file)]
    cli = cli_main(
        ["--config", stage, *args, "--model.lora", "{r: 4}", "--trainer.default_root_dir", str(tmp_path)], run=False
    )
    module = cli.model
    assert module.hparams.lora == {"r": 4, "alpha": 16, "dropout": 0.1, "target_modules": None, "bias": "none"}
    assert _adapter_counts(module)[0] == 4 * 2 * 2 * (32 + 32)


def test_gradient_checkpointing_still_trains_the_adapters(tiny_bert, corpus_file, tmp_path):
    module = _lora(tiny_bert, gradient_checkpointing=True)
    batch = fixed_batch(small_corpus(module, corpus_file, tmp_path))
    module(batch, salt=1)["loss"].backward()
    assert all(p.grad is not None for n, p in module.named_parameters() if "lora_A" in n)


def test_next_sentence_heads_and_weights_the_checkpoint_lacked_train_in_full(tiny_bert):
    module = _lora(tiny_bert, objective="mlm+nsp")
    trainable = set(_trainable(module))
    assert {"model.cls.seq_relationship.weight", "model.bert.pooler.dense.weight"} <= trainable  # the pooler is new
    assert "model.bert.pooler.dense.weight" in module.encoder_trainable
    assert all("lora_" in n or module.is_head_param(n) or ".pooler." in n for n in trainable)
