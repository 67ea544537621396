"""The masked-LM module without training: the sparse head's loss, head warm-up detection, the NSP objective.

The runs that train (loss falls, head warm-up, export, resume) are in tests/integration/test_mlm.py.
"""

import pytest
import torch
from transformers import AutoTokenizer

from domainbert.data.masking import IGNORE_INDEX
from domainbert.errors import DomainBertError
from domainbert.modules.mlm import MaskedLMModule
from tests.helpers.mlm import fixed_batch, small_corpus


@pytest.mark.parametrize("family", ["bert", "roberta", "albert", "distilbert", "electra"])
def test_sparse_logits_give_the_full_loss(tiny_models, corpus_file, family):
    module = MaskedLMModule(str(tiny_models[family]), sparse_logits=True).eval()
    dense = MaskedLMModule(str(tiny_models[family]), sparse_logits=False).eval()
    assert module._head_fn is not None, "every supported family has a sparse head"
    dm = small_corpus(module, corpus_file)
    batch = fixed_batch(dm)
    with torch.no_grad():
        sparse = module(batch, salt=5)
        ids, labels = module.mask(batch, 5)
        ref = module.model(**module.model_inputs(batch, ids), labels=labels).loss
        dense_out = dense(batch, salt=5)
    assert (labels != IGNORE_INDEX).sum() > 0
    torch.testing.assert_close(sparse["loss"], ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(dense_out["loss"], ref, rtol=1e-5, atol=1e-5)


def test_evaluation_counts_the_correct_masked_tokens_and_a_training_step_skips_the_count(tiny_bert, corpus_file):
    module = MaskedLMModule(str(tiny_bert)).eval()
    batch = fixed_batch(small_corpus(module, corpus_file))
    with torch.no_grad():
        out = module(batch, salt=5)
        ids, labels = module.mask(batch, 5)
        logits = module.model(**module.model_inputs(batch, ids)).logits
    picked = labels != IGNORE_INDEX
    assert int(out["correct"]) == int((logits[picked].argmax(-1) == labels[picked]).sum())
    assert "correct" not in module.train()(batch, salt=5)


def test_no_warmup_when_the_head_is_trained(tiny_bert):
    module = MaskedLMModule(str(tiny_bert))
    assert module.head_missing == [] and module.head_warmup_steps == 0


def test_a_negative_head_warmup_is_refused_naming_the_option(tiny_bert):
    with pytest.raises(DomainBertError, match=r"^model\.head_warmup_steps=-1: expected a whole number of steps >= 0"):
        MaskedLMModule(str(tiny_bert), head_warmup_steps=-1)


def test_nsp_objective(tiny_bert, corpus_file, tmp_path):
    from transformers import BertForPreTraining

    pre = tmp_path / "pre"
    BertForPreTraining.from_pretrained(tiny_bert).save_pretrained(pre)
    AutoTokenizer.from_pretrained(tiny_bert).save_pretrained(pre)
    module = MaskedLMModule(str(pre), objective="mlm+nsp", head_warmup_steps=0, learning_rate=3e-3)
    dm = small_corpus(module, corpus_file, tmp_path, nsp=True)
    dm.setup("fit")
    labels = torch.tensor([dm.train_ds[i]["next_sentence_label"] for i in range(len(dm.train_ds))])
    assert 0.3 < labels.float().mean() < 0.7
    batch = next(iter(dm.train_dataloader()))
    assert set(batch) >= {"input_ids", "token_type_ids", "next_sentence_label"}
    out = module(batch, salt=0)
    assert "nsp_loss" in out and torch.isfinite(out["loss"])
    with pytest.raises(DomainBertError, match="next-sentence head"):
        MaskedLMModule(str(tiny_bert).replace("bert", "roberta"), objective="mlm+nsp")


def test_pretraining_runs_without_dropout_and_exports_the_checkpoints(tiny_bert, tmp_path):
    from transformers import AutoConfig

    original = AutoConfig.from_pretrained(tiny_bert)
    assert original.hidden_dropout_prob > 0 and original.attention_probs_dropout_prob > 0
    module = MaskedLMModule(str(tiny_bert))  # dropout 0 by default
    assert {m.p for m in module.model.modules() if isinstance(m, torch.nn.Dropout)} == {0.0}
    saved = AutoConfig.from_pretrained(module.export_hf(tmp_path / "hf"))
    assert saved.hidden_dropout_prob == original.hidden_dropout_prob
    assert saved.attention_probs_dropout_prob == original.attention_probs_dropout_prob
    assert module.model.config.hidden_dropout_prob == 0.0  # the module's own config is left as it was
    kept = MaskedLMModule(str(tiny_bert), hidden_dropout=None, attention_dropout=None)
    assert {m.p for m in kept.model.modules() if isinstance(m, torch.nn.Dropout)} == {original.hidden_dropout_prob}
    assert kept.export_config is None  # nothing overridden: nothing to restore
