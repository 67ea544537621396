"""Each family record matches a real tiny model of its type: head parts, LoRA targets, prefix, positions, students.

A new record in ``domainbert.core.families`` needs its tiny config here (:data:`TINY`); the tests then check it
against the model ``transformers`` builds.
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
import torch
from torch import nn
from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM, AutoModelForSequenceClassification

from domainbert.core.families import FAMILIES, attribute, family, max_positions
from domainbert.distill.student import num_layers, student_from_teacher
from domainbert.errors import DomainBertError

VOCAB, POSITIONS = 120, 40

#: per family: the config fields of its tiny model beyond the generic sizes (a pad id other than the default,
#: where the record says positions count from it)
TINY: dict[str, dict] = {
    "bert": {},
    "roberta": {"pad_token_id": 3},
    "xlm-roberta": {"pad_token_id": 3},
    "camembert": {"pad_token_id": 3},
    "albert": {"embedding_size": 16},
    "distilbert": {},
    "electra": {"embedding_size": 16},
    "deberta": {},
    "deberta-v2": {},
    "mpnet": {"pad_token_id": 0},  # MPNet's position ids start after its own fixed padding index, not this one
}


def tiny_config(model_type: str, layers: int = 2, **extra):
    """A tiny config of ``model_type``, its sizes given under the generic names the record maps to its own."""
    layout = family(model_type).student
    sizes = {"num_hidden_layers": layers, "hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64}
    fields = {layout.name(k): v for k, v in sizes.items()}
    return AutoConfig.for_model(
        model_type, vocab_size=VOCAB, max_position_embeddings=POSITIONS, **fields, **TINY[model_type], **extra
    )


def _ids(length: int, batch: int = 2) -> torch.Tensor:
    return torch.randint(5, VOCAB, (batch, length), generator=torch.Generator().manual_seed(length))


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def mlm(request):
    """A tiny random masked-LM model of each family, in eval mode."""
    torch.manual_seed(0)
    return AutoModelForMaskedLM.from_config(tiny_config(request.param)).eval()


def test_every_record_has_its_tiny_model():
    assert sorted(TINY) == sorted(FAMILIES)
    assert all(name == record.model_type for name, record in FAMILIES.items())


def test_prefix_is_the_base_models_attribute(mlm):
    record = family(mlm.config)
    assert mlm.base_model_prefix == record.prefix
    assert isinstance(getattr(mlm, record.prefix), type(AutoModel.from_config(mlm.config)))
    assert any(name.startswith(record.prefix + ".") for name, _ in mlm.named_parameters())


@torch.no_grad()
def test_mlm_head_parts_exist_and_give_the_models_logits(mlm):
    head = family(mlm.config).mlm_head
    if head is None:
        pytest.skip(f"{mlm.config.model_type}: no MLM head described (the full model computes the logits)")
    assert isinstance(attribute(mlm, head.dense), nn.Linear)
    assert isinstance(attribute(mlm, head.norm), nn.LayerNorm)
    bias = attribute(mlm, head.bias)
    assert isinstance(bias, nn.Parameter) and bias.shape == (VOCAB,)
    ids = _ids(7)
    hidden = mlm.base_model(input_ids=ids).last_hidden_state
    torch.testing.assert_close(head.logits(mlm, hidden), mlm(input_ids=ids).logits)


def test_lora_targets_name_linear_modules_of_the_encoder(mlm):
    targets = family(mlm.config).lora_targets
    if targets is None:
        pytest.skip(f"{mlm.config.model_type}: no default LoRA targets (the user names them)")
    for target in targets:
        found = [m for name, m in mlm.base_model.named_modules() if name.rsplit(".", 1)[-1] == target]
        assert found and all(isinstance(m, nn.Linear) for m in found), target


@torch.no_grad()
def test_max_positions_is_the_longest_input_the_model_takes(mlm):
    config = mlm.config
    offset = family(config).position_offset(config)
    if config.model_type in ("roberta", "xlm-roberta", "camembert"):
        assert offset == config.pad_token_id + 1 == 4
    limit = max_positions(config)
    assert limit == POSITIONS - offset
    assert mlm(input_ids=_ids(limit)).logits.shape[1] == limit
    with pytest.raises((IndexError, RuntimeError)):
        mlm(input_ids=_ids(limit + 1))


def test_student_copies_the_teachers_layers(mlm):
    model_type = mlm.config.model_type
    layout = family(model_type).student
    torch.manual_seed(0)
    teacher = AutoModelForSequenceClassification.from_config(tiny_config(model_type, layers=4, num_labels=3))
    student, selected = student_from_teacher(teacher, 2)
    assert selected == [1, 3] and num_layers(student.config) == 2
    t_state, s_state = teacher.state_dict(), student.state_dict()
    if layout.layer_key is None:  # one set of layer weights, shared across the depth: the same names and values
        assert sorted(s_state) == sorted(t_state)
        assert all(torch.equal(s_state[k], t_state[k]) for k in s_state)
        return
    numbered = [k for k in s_state if re.search(layout.layer_key, k)]
    assert numbered and len(numbered) < len(s_state)
    for key in s_state:
        source = re.sub(layout.layer_key, lambda m: f"{m.group(1)}{selected[int(m.group(2))]}{m.group(3)}", key)
        assert torch.equal(s_state[key], t_state[source]), key
    layer_one = [k for k in numbered if re.search(layout.layer_key, k).group(2) == "1"]
    assert any(not torch.equal(s_state[k], t_state[k]) for k in layer_one)  # student layer 1 is teacher layer 3


def test_unknown_model_type_is_one_line_naming_it_and_the_known_ones():
    with pytest.raises(DomainBertError) as err:
        family("gpt2")
    message = str(err.value)
    assert "\n" not in message and "'gpt2'" in message
    assert all(name in message for name in FAMILIES)


def test_fallback_is_what_the_code_assumes_of_any_encoder():
    generic = family("gpt2", fallback=True)
    assert generic.prefix == "gpt2" and generic.mlm_head is None and generic.lora_targets is None
    assert generic.position_offset(None) == 0 and generic.student.name("hidden_size") == "hidden_size"
    config = SimpleNamespace(model_type="gpt2")
    assert family(config, fallback=True).model_type == "gpt2"
    assert max_positions(config) is None and max_positions(config, default=512) == 512
