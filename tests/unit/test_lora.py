"""LoRA: per-family targets, a trained and saved head, merged exports equal to the adapted model."""

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from domainbert.errors import DomainBertError
from domainbert.modules.classification import SequenceClassificationModule
from domainbert.modules.lora import LoraSettings, head_modules, merged, target_modules

FIX = Path(__file__).resolve().parents[1] / "fixtures"
TARGETS = {
    "bert": {"query", "value"},
    "roberta": {"query", "value"},
    "albert": {"query", "value"},
    "electra": {"query", "value"},
    "distilbert": {"q_lin", "v_lin"},
}
HEADS = {
    "bert": ["classifier"],
    "roberta": ["classifier"],
    "albert": ["classifier"],
    "electra": ["classifier"],
    "distilbert": ["pre_classifier", "classifier"],
}


def _batch(tok, texts):
    return dict(tok(texts, padding=True, return_tensors="pt"))


@pytest.mark.parametrize("family", sorted(TARGETS))
def test_lora_trains_adapters_and_head_only_and_merges(tiny_models, family, tmp_path):
    torch.manual_seed(0)
    m = SequenceClassificationModule(
        str(tiny_models[family]), num_labels=3, lora=LoraSettings(r=4, alpha=8, dropout=0.0), classifier_dropout=0.0
    )
    inner = m.model.base_model.model
    assert head_modules(inner) == HEADS[family]
    adapted = {n.split(".")[-1] for n, mod in m.model.named_modules() if hasattr(mod, "lora_A")}
    assert adapted == TARGETS[family]
    trainable = [n for n, p in m.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n or "modules_to_save" in n for n in trainable)
    # the pooler the MLM checkpoint lacked is new, so it trains in full rather than staying random
    assert family not in ("bert", "albert") or any("pooler" in n for n in trainable)
    assert any("classifier" in n and "modules_to_save" in n for n in trainable)
    # a few steps move the loss down
    tok = AutoTokenizer.from_pretrained(tiny_models[family])
    batch = _batch(tok, ["the server parses packets", "a simple module", "graphical images in real time"])
    labels = torch.tensor([0, 1, 2])
    opt = torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=2e-2)
    losses = []
    for _ in range(30):
        loss = m.compute_loss(m(batch), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert sum(losses[-3:]) / 3 < 0.6 * losses[0]
    # merged export: a plain model without adapters, giving the adapted model's outputs
    m.eval()
    with torch.no_grad():
        expected = m(batch)
    m.export_hf(tmp_path / "hf")
    reloaded = AutoModelForSequenceClassification.from_pretrained(tmp_path / "hf").eval()
    from safetensors.torch import load_file

    keys = load_file(str(tmp_path / "hf" / "model.safetensors")).keys()
    assert not any("lora" in k or "modules_to_save" in k for k in keys)
    with torch.no_grad():
        got = reloaded(**batch).logits
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)
    assert m.model.peft_config  # the module still holds its adapters after the export


def test_merged_leaves_plain_models_alone(tiny_bert):
    model = AutoModelForSequenceClassification.from_pretrained(tiny_bert, num_labels=2)
    assert merged(model) is model


def test_unknown_family_asks_for_targets():
    with pytest.raises(DomainBertError, match="target_modules"):
        target_modules("gpt2")


def test_a_bias_peft_does_not_know_is_one_line_naming_the_option_and_the_choices():
    from domainbert.modules.lora import as_settings

    with pytest.raises(DomainBertError) as err:
        as_settings({"bias": "sideways"})
    assert str(err.value) == "lora.bias='sideways': expected one of none, all, lora_only"


def test_what_peft_itself_refuses_is_one_domainbert_error(tiny_bert, monkeypatch):
    """A refusal from inside peft (a NotImplementedError, say) is a DomainBertError, not a traceback."""
    import peft

    def refuse(model, config):
        raise NotImplementedError(f"Requested bias: {config.bias}, is not implemented.")

    monkeypatch.setattr(peft, "get_peft_model", refuse)
    with pytest.raises(DomainBertError, match=r"^lora: peft refused the settings: Requested bias: all, is not impl"):
        SequenceClassificationModule(str(tiny_bert), num_labels=2, lora=LoraSettings(bias="all"))
