"""Each distillation loss term against a value computed by hand."""

from __future__ import annotations

import math
from types import SimpleNamespace as NS

import pytest
import torch

from domainbert.distill.losses import (
    AttentionLoss,
    HardLabelLoss,
    HiddenStateLoss,
    KLDivergenceLoss,
    LossTerm,
    ModelPair,
    uniform_layer_map,
)
from domainbert.distill.objective import build_loss
from domainbert.errors import DomainBertError


def _softmax(xs):
    e = [math.exp(x) for x in xs]
    return [v / sum(e) for v in e]


def _kl(p, q):
    return sum(a * math.log(a / b) for a, b in zip(p, q))


def test_kl_matches_hand_computation_with_temperature():
    s = [[1.0, 2.0, 0.5], [0.0, 0.0, 3.0]]
    t = [[2.0, 1.0, 0.0], [1.0, -1.0, 2.0]]
    temp = 2.0
    expected = 0.0
    for a, b in zip(s, t):
        expected += _kl(_softmax([x / temp for x in b]), _softmax([x / temp for x in a]))
    expected = expected / 2 * temp**2
    loss = KLDivergenceLoss(temperature=temp)(NS(logits=torch.tensor(s)), NS(logits=torch.tensor(t)), {})
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    # identical distributions cost nothing
    same = KLDivergenceLoss(2.0)(NS(logits=torch.tensor(t)), NS(logits=torch.tensor(t)), {})
    assert same.item() == pytest.approx(0.0, abs=1e-6)


def test_kl_counts_only_masked_positions_for_mlm():
    # (B=1, S=3, V=2): only position 1 has a label; the others must not contribute
    s = torch.tensor([[[5.0, -5.0], [0.0, 1.0], [-9.0, 9.0]]])
    t = torch.tensor([[[-5.0, 5.0], [1.0, 0.0], [9.0, -9.0]]])
    labels = torch.tensor([[-100, 1, -100]])
    loss = KLDivergenceLoss(temperature=1.0)(NS(logits=s), NS(logits=t), {"labels": labels})
    expected = _kl(_softmax([1.0, 0.0]), _softmax([0.0, 1.0]))
    assert loss.item() == pytest.approx(expected, rel=1e-5)


def test_kl_multi_label_is_bernoulli_kl():
    s, t = torch.tensor([[0.0, 1.0]]), torch.tensor([[2.0, -1.0]])
    sig = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    expected = 0.0
    for a, b in zip([0.0, 1.0], [2.0, -1.0]):
        p, q = sig(b), sig(a)
        expected += p * math.log(p / q) + (1 - p) * math.log((1 - p) / (1 - q))
    loss = KLDivergenceLoss(temperature=1.0, multi_label=True)(NS(logits=s), NS(logits=t), {})
    assert loss.item() == pytest.approx(expected, rel=1e-5)


def test_kl_rejects_shape_mismatch_and_bad_temperature():
    with pytest.raises(DomainBertError, match="same label set"):
        KLDivergenceLoss()(NS(logits=torch.zeros(2, 3)), NS(logits=torch.zeros(2, 4)), {})
    with pytest.raises(DomainBertError, match="temperature"):
        KLDivergenceLoss(temperature=0)


def test_hard_label_ce_and_bce():
    logits = torch.tensor([[2.0, 0.0], [0.0, 1.0]])
    ce = HardLabelLoss()(NS(logits=logits), None, {"labels": torch.tensor([0, 0])})
    expected = (-math.log(_softmax([2.0, 0.0])[0]) - math.log(_softmax([0.0, 1.0])[0])) / 2
    assert ce.item() == pytest.approx(expected, rel=1e-5)
    # per-token labels with -100 are ignored
    tok = HardLabelLoss()(NS(logits=logits[None]), None, {"labels": torch.tensor([[0, -100]])})
    assert tok.item() == pytest.approx(-math.log(_softmax([2.0, 0.0])[0]), rel=1e-5)
    bce = HardLabelLoss()(NS(logits=torch.tensor([[0.0]])), None, {"labels": torch.tensor([[1.0]])})
    assert bce.item() == pytest.approx(math.log(2), rel=1e-5)


def test_hidden_state_mse_and_cosine_over_real_tokens():
    hs = (torch.zeros(1, 2, 2), torch.tensor([[[1.0, 0.0], [7.0, 7.0]]]))
    ht = (torch.zeros(1, 2, 2), torch.zeros(1, 2, 2), torch.tensor([[[0.0, 1.0], [0.0, 0.0]]]))
    batch = {"attention_mask": torch.tensor([[1, 0]])}  # the second token is padding
    mse = HiddenStateLoss("mse", layer_map={1: 2})(NS(hidden_states=hs), NS(hidden_states=ht), batch)
    assert mse.item() == pytest.approx(1.0)  # ((1-0)^2 + (0-1)^2) / 2
    cos = HiddenStateLoss("cosine", layer_map={1: 2})(NS(hidden_states=hs), NS(hidden_states=ht), batch)
    assert cos.item() == pytest.approx(1.0)  # orthogonal: 1 - 0
    both = HiddenStateLoss("mse", layer_map={0: 0, 1: 2})(NS(hidden_states=hs), NS(hidden_states=ht), batch)
    assert both.item() == pytest.approx(0.5)  # mean over the two pairs


def test_hidden_state_projection_when_widths_differ():
    loss = HiddenStateLoss("mse", layer_map={1: 1}, student_width=2, teacher_width=3)
    assert loss.projection is not None and loss.projection.weight.shape == (3, 2)
    with torch.no_grad():
        loss.projection.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]))
    hs = (None, torch.tensor([[[1.0, 2.0]]]))
    ht = (None, torch.tensor([[[1.0, 2.0, 0.0]]]))
    value = loss(NS(hidden_states=hs), NS(hidden_states=ht), {"attention_mask": torch.ones(1, 1)})
    assert value.item() == pytest.approx(9.0 / 3)  # projected [1, 2, 3] vs [1, 2, 0]
    value.backward()
    assert loss.projection.weight.grad is not None


def test_uniform_layer_map_is_tinybert():
    assert uniform_layer_map(3, 6) == {0: 0, 1: 2, 2: 4, 3: 6}
    assert uniform_layer_map(4, 12) == {0: 0, 1: 3, 2: 6, 3: 9, 4: 12}
    with pytest.raises(DomainBertError, match="at most as many"):
        uniform_layer_map(4, 2)
    with pytest.raises(DomainBertError, match="out of range"):
        HiddenStateLoss(layer_map={1: 9}, student_layers=2, teacher_layers=4)


def test_attention_loss_masked_mse():
    a = torch.tensor([[[[0.5, 0.5], [1.0, 0.0]]]])  # (B=1, H=1, 2, 2)
    b = torch.tensor([[[[1.0, 0.0], [0.0, 1.0]]]])
    full = AttentionLoss(layer_map={1: 1})(NS(attentions=(a,)), NS(attentions=(b,)), {})
    assert full.item() == pytest.approx((0.25 + 0.25 + 1 + 1) / 4)
    masked = AttentionLoss(layer_map={1: 1})(
        NS(attentions=(a,)), NS(attentions=(b,)), {"attention_mask": torch.tensor([[1, 0]])}
    )
    assert masked.item() == pytest.approx(0.25)  # only query 0 / key 0 is a real pair
    # different head counts: compare head means
    b2 = torch.cat([b, a], dim=1)  # 2 heads
    value = AttentionLoss(layer_map={1: 1})(NS(attentions=(a,)), NS(attentions=(b2,)), {})
    expected = ((a - (a + b) / 2) ** 2).mean().item()
    assert value.item() == pytest.approx(expected)


def test_build_loss_from_spec():
    name, loss, w = build_loss({"class_path": "HiddenStateLoss", "init_args": {"layer_map": {1: 1}, "weight": 0.3}})
    assert name == "hidden" and isinstance(loss, HiddenStateLoss) and w == 0.3 == loss.weight
    name, loss, _ = build_loss(
        {"class_path": "domainbert.distill.losses.KLDivergenceLoss", "init_args": {"name": "kl2"}}
    )
    assert name == "kl2" and isinstance(loss, KLDivergenceLoss)
    with pytest.raises(DomainBertError, match="cannot import"):
        build_loss({"class_path": "domainbert.distill.losses.NoSuchLoss"})
    with pytest.raises(DomainBertError, match="unknown keys"):
        build_loss({"class_path": "HardLabelLoss", "wieght": 1})


def test_terms_written_against_the_older_base_class_name_still_subclass_it():
    import domainbert.distill.losses as terms

    assert terms.DistillLoss is terms.LossTerm


def test_both_layer_wise_losses_resolve_their_map_the_same_way():
    for cls in (HiddenStateLoss, AttentionLoss):
        assert cls(student_layers=2, teacher_layers=4).layer_map == {1: 2, 2: 4} | (
            {0: 0} if cls is HiddenStateLoss else {}
        )
        with pytest.raises(DomainBertError, match=f"{cls.__name__} has no layer map yet: give it a layer_map"):
            cls()(NS(hidden_states=(), attentions=(1,)), NS(hidden_states=(), attentions=(1,)), {})
        with pytest.raises(DomainBertError, match="out of range"):
            cls(layer_map={1: 9}, student_layers=2, teacher_layers=4)


def test_a_term_given_no_shapes_takes_them_when_bound_to_the_models():
    pair = ModelPair(student_layers=2, teacher_layers=4, student_width=16, teacher_width=32, multi_label=True)
    hidden, attention, kl = HiddenStateLoss(kind="cosine"), AttentionLoss(), KLDivergenceLoss()
    for term in (hidden, attention, kl):
        term.bind(pair)
    assert hidden.layer_map == {0: 0, 1: 2, 2: 4} and hidden.projection.weight.shape == (32, 16)
    assert attention.layer_map == {1: 2, 2: 4} and kl.multi_label is True  # as the teacher is
    copied = ModelPair(2, 4, 16, 16, default_map={0: 0, 1: 1, 2: 3})
    hidden = HiddenStateLoss()
    hidden.bind(copied)
    assert hidden.layer_map == {0: 0, 1: 1, 2: 3} and hidden.projection is None  # a copied student's own layers
    with pytest.raises(DomainBertError, match="layer_map entry 3: 1 is out of range"):
        HiddenStateLoss(layer_map={3: 1}).bind(copied)  # a map given without depths is checked once bound
    single = KLDivergenceLoss(multi_label=False)
    single.bind(pair)
    assert single.multi_label is False  # given, it stays


def _configs():
    from transformers import BertConfig

    small = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32)
    big = BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=4, num_attention_heads=2, intermediate_size=64)
    return small, big


def test_the_objective_keeps_the_terms_with_a_weight():
    from domainbert.distill.objective import build_losses, build_objective

    small, big = _configs()
    entries = [
        KLDivergenceLoss(weight=0.5),
        HardLabelLoss(weight=0.0),
        HiddenStateLoss(weight=1.0),
        AttentionLoss(weight=0.2),
        {"class_path": "HardLabelLoss", "init_args": {"name": "kl"}},
        HardLabelLoss(weight=0.25, name="gold"),
    ]
    obj = build_objective(build_losses(entries), small, big)
    assert list(obj.terms) == ["kl", "hidden", "attention", "kl_", "gold"]  # a later term never replaces one
    assert obj.weights == {"kl": 0.5, "hidden": 1.0, "attention": 0.2, "kl_": 1.0, "gold": 0.25}
    assert {n: t.weight for n, t in obj.terms.items()} == obj.weights  # each term carries its own weight
    assert obj.terms["gold"] is entries[5]
    assert obj.terms["hidden"].layer_map == {0: 0, 1: 2, 2: 4}  # TinyBERT's uniform map
    assert obj.terms["hidden"].projection.weight.shape == (32, 16)  # widths differ: a learned projection
    assert obj.needs("needs_hidden_states") and obj.needs("needs_attentions") and obj.needs("needs_teacher", True)
    copied = build_objective(build_losses([HiddenStateLoss(weight=1.0)]), small, big, default_map={0: 0, 1: 1, 2: 3})
    assert copied.terms["hidden"].layer_map == {0: 0, 1: 1, 2: 3}  # a copied student's own layers
    hard_only = build_objective(build_losses([HardLabelLoss()]), small, big)
    assert not hard_only.needs("needs_teacher", True)  # the teacher need not run at all
    with pytest.raises(DomainBertError, match=r"model.losses: no term has a weight above 0"):
        build_objective(build_losses([KLDivergenceLoss(weight=0.0)]), small, big)
    with pytest.raises(DomainBertError, match=r"model.losses: no term has a weight above 0"):
        build_objective(build_losses([]), small, big)
    assert build_objective(build_losses([LossTerm(weight=0.5)]), small, big).weights == {"lossterm": 0.5}
    with pytest.raises(DomainBertError, match=r"HiddenStateLoss: weight=-1.0: expected a number >= 0"):
        HiddenStateLoss(weight=-1.0)


def test_without_a_list_the_terms_are_todays_default():
    from domainbert.distill.objective import build_losses, build_objective

    small, big = _configs()
    obj = build_objective(build_losses(None), small, big, multi_label=True)
    assert obj.weights == {"kl": 0.5, "hard": 0.5} and obj.terms["kl"].temperature == 2.0
    assert obj.terms["kl"].multi_label is True
