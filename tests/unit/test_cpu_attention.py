"""A bf16 fit on the CPU trains on eager attention and evaluates on SDPA; anything else keeps its attention."""

import lightning.pytorch as L
import torch

from domainbert.core.compat import attn_implementation
from domainbert.core.cpu_attention import attention_for, bf16_on_cpu, switchable
from domainbert.modules.classification import SequenceClassificationModule


def _impl(module) -> str:
    return attn_implementation(module.model.config)


def test_bf16_on_cpu_reads_the_trainer_precision():
    assert bf16_on_cpu(L.Trainer(accelerator="cpu", precision="bf16-mixed", logger=False))
    assert not bf16_on_cpu(L.Trainer(accelerator="cpu", precision="32-true", logger=False))


def test_only_an_sdpa_model_under_bf16_switches(tiny_bert):
    bf16 = L.Trainer(accelerator="cpu", precision="bf16-mixed", logger=False)
    fp32 = L.Trainer(accelerator="cpu", precision="32-true", logger=False)
    module = SequenceClassificationModule(str(tiny_bert), label_names=["a", "b"])
    assert _impl(module) == "sdpa"
    assert switchable(module.model, bf16)
    assert not switchable(module.model, fp32)
    module.model.set_attn_implementation("eager")  # e.g. a distillation term reads attention maps
    assert not switchable(module.model, bf16)


def test_the_module_switches_with_its_mode_and_ends_the_fit_on_sdpa(tiny_bert):
    module = SequenceClassificationModule(str(tiny_bert), label_names=["a", "b"])
    module.train()
    assert _impl(module) == "sdpa"  # no fit started: nothing switches
    module._switch_attention = True  # what on_fit_start sets under bf16 on the CPU
    module.train()
    assert _impl(module) == "eager"
    module.eval()
    assert _impl(module) == "sdpa"
    module.train()
    module.on_fit_end()
    assert _impl(module) == "sdpa"
    module.train()
    assert _impl(module) == "sdpa"  # the fit is over


def test_eager_and_sdpa_agree_on_the_loss_and_its_gradients(tiny_bert):
    module = SequenceClassificationModule(str(tiny_bert), label_names=["a", "b"]).eval()  # no dropout
    ids = torch.randint(5, 90, (4, 12))
    mask = torch.ones_like(ids)
    mask[:2, 8:] = 0
    grads = []
    for training in (True, False):
        attention_for(module.model, training)
        module.model.zero_grad()
        out = module.model(input_ids=ids, attention_mask=mask, labels=torch.tensor([0, 1, 1, 0]))
        out.loss.backward()
        grads.append((out.loss.detach(), module.model.base_model.embeddings.word_embeddings.weight.grad.clone()))
    torch.testing.assert_close(grads[0][0], grads[1][0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grads[0][1], grads[1][1], rtol=1e-4, atol=1e-6)
