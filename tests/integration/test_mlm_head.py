"""An MLM head that starts useful: identity transform, tied decoder, unigram bias; never touching a trained head."""

import math

import pytest
import torch
from transformers import AutoModelForMaskedLM

from domainbert.core.mlm_head import head_parts, identity_transform, unigram_bias
from domainbert.data.corpus import CorpusDataModule
from domainbert.modules.mlm import MaskedLMModule

FAMILIES = ["bert", "roberta", "distilbert", "electra"]


@pytest.mark.parametrize("family", FAMILIES)
def test_identity_transform_and_unigram_bias_equal_hand_computed_values(tiny_models, family):
    model = AutoModelForMaskedLM.from_pretrained(tiny_models[family])
    assert identity_transform(model)
    dense, norm, bias = head_parts(model)
    if dense.weight.shape[0] == dense.weight.shape[1]:
        assert torch.equal(dense.weight, torch.eye(dense.weight.shape[0]))
    assert torch.equal(norm.weight, torch.ones_like(norm.weight)) and not norm.bias.any()
    batches = [{"input_ids": torch.tensor([[5, 5, 6, 0]])}, {"input_ids": torch.tensor([[5, 7, 0, 0]])}]
    assert unigram_bias(model, batches, exclude=[0])
    n = bias.shape[0]
    total = n + 5  # add-one smoothing over the vocabulary, plus the 5 non-pad tokens seen
    assert bias[5].item() == pytest.approx(math.log(4 / total), rel=1e-5)  # 3 sightings + 1
    assert bias[6].item() == pytest.approx(math.log(2 / total), rel=1e-5)
    assert bias[0].item() == pytest.approx(math.log(1 / total), rel=1e-5)  # padding is not counted


def _val_loss(module, dm) -> float:
    module.eval()
    losses = []
    with torch.no_grad():
        for i, batch in enumerate(dm.val_dataloader()):
            ids, labels = module.masker(batch["input_ids"], generator=torch.Generator().manual_seed(i))
            losses.append(module.model(input_ids=ids, labels=labels).loss.item())
    return sum(losses) / len(losses)


def _headless(source, tmp_path):
    """A copy of a tiny checkpoint without its MLM head, as sentence embedders ship."""
    from transformers import AutoModel

    headless = tmp_path / "headless"
    AutoModel.from_pretrained(source).save_pretrained(headless)
    for f in source.iterdir():
        if f.name.startswith(("tokenizer", "vocab", "special")):
            (headless / f.name).write_bytes(f.read_bytes())
    return headless


def test_a_headless_checkpoint_starts_with_a_far_lower_loss_than_a_random_head(tiny_models, corpus_file, tmp_path):
    """The tiny BERT is saved without its head (as a sentence embedder is); its embeddings are trained-like random."""
    headless = _headless(tiny_models["bert"], tmp_path)
    losses = {}
    for init in ("random", "embeddings"):
        torch.manual_seed(0)
        module = MaskedLMModule(str(headless), head_init=init)
        assert module.head_missing
        dm = CorpusDataModule(train=str(corpus_file), val_ratio=0.2, batch_size=16, max_length=32)
        dm.connect(module.tokenizer)
        dm.setup("fit")
        if init == "embeddings":
            unigram_bias(module.model, dm.train_dataloader(), exclude=module.tokenizer.all_special_ids)
        losses[init] = _val_loss(module, dm)
    assert losses["embeddings"] < losses["random"] - 0.5, losses


def test_a_trained_head_is_never_reinitialised(tiny_bert):
    before = AutoModelForMaskedLM.from_pretrained(tiny_bert).state_dict()
    module = MaskedLMModule(str(tiny_bert), head_init="embeddings")
    assert not module.head_missing
    after = module.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_a_fit_sets_the_bias_from_the_training_data_without_special_tokens(tiny_models, tmp_path, monkeypatch):
    import domainbert.core.mlm_head as mlm_head
    from domainbert.cli import cli_main

    headless = _headless(tiny_models["bert"], tmp_path)
    calls = []
    monkeypatch.setattr(mlm_head, "unigram_bias_from_data", lambda *a, **k: calls.append(k) or True)
    args = ["fit", "--config", "configs/pretrain/tiny_debug.yaml", "--model.init_from", str(headless)]
    args += ["--trainer.val_check_interval", "2", "--trainer.limit_val_batches", "1"]
    args += ["--trainer.max_steps", "2", "--trainer.default_root_dir", str(tmp_path / "runs")]
    cli_main(args)
    assert len(calls) == 1 and 0 in calls[0]["exclude"]  # padding and special tokens are not counted
