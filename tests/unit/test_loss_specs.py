"""``model.losses``: loss terms typed for jsonargparse, a checkpoint's saved dicts rebuilt only as LossTerms,
bad entries named."""

from __future__ import annotations

import doctest
import importlib
import typing
from types import SimpleNamespace as NS

import pytest
import torch
from jsonargparse import ArgumentParser
from torch import nn

from domainbert.distill.losses import AttentionLoss, DistillLoss, HardLabelLoss, HiddenStateLoss, KLDivergenceLoss
from domainbert.distill.objective import build_loss, build_losses, default_losses, loss_configs, normalise_loss_spec
from domainbert.errors import DomainBertError

BUILT_IN = "domainbert.distill.losses"


class PlainL1(nn.Module):
    """An ``nn.Module`` with the terms' ``forward`` but no :class:`LossTerm`: never built from an entry."""

    built = 0

    def __init__(self, scale: float = 1.0) -> None:
        super().__init__()
        PlainL1.built += 1
        self.scale = scale

    def forward(self, student_out, teacher_out, batch):
        return self.scale * (student_out.logits - teacher_out.logits).abs().mean()


class ScaledL1(DistillLoss):
    """A term written against ``DistillLoss``, the base's older name: a LossTerm, its weight among its arguments."""

    def __init__(self, scale: float = 1.0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.scale = scale

    def forward(self, student_out, teacher_out, batch):
        return self.scale * (student_out.logits - teacher_out.logits).abs().mean()


@pytest.mark.parametrize("name", ["domainbert.distill.losses", "domainbert.distill.objective"])
def test_docstring_examples_run(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_a_term_carries_its_weight_name_and_arguments():
    term = HiddenStateLoss("cosine", {1: 2}, weight=0.5, name="cos_hidden")
    assert (term.weight, term.term_name) == (0.5, "cos_hidden")
    assert term.config()["class_path"] == f"{BUILT_IN}.HiddenStateLoss"
    assert term.config()["init_args"].items() >= {"kind": "cosine", "layer_map": {1: 2}, "weight": 0.5}.items()
    assert KLDivergenceLoss().term_name == "kl" and KLDivergenceLoss().weight == 1.0  # the built-ins' short names
    assert ScaledL1().term_name == "scaledl1"  # a term of another package: its class name in lower case
    rebuilt = build_loss(term.config())[1]  # what a checkpoint's hyper-parameters hold builds the same term
    assert (type(rebuilt), rebuilt.kind, rebuilt.layer_map, rebuilt.weight) == (HiddenStateLoss, "cosine", {1: 2}, 0.5)


@pytest.mark.parametrize("weight", [-0.1, float("nan"), "1", True])
def test_a_weight_below_zero_or_not_a_number_is_refused(weight):
    with pytest.raises(DomainBertError, match=r"HardLabelLoss: weight=.*expected a number >= 0"):
        HardLabelLoss(weight=weight)
    with pytest.raises(DomainBertError, match=r"model.losses\[0\] \(.*HardLabelLoss\): .*weight=.*>= 0"):
        build_losses([{"class_path": f"{BUILT_IN}.HardLabelLoss", "init_args": {"weight": weight}}])


def test_a_name_with_a_dot_is_refused():
    with pytest.raises(DomainBertError, match=r"name='a.b': expected a name without dots"):
        AttentionLoss(layer_map={1: 1}, name="a.b")


def test_a_saved_entry_is_class_path_and_init_args_only():
    bare = {"class_path": "HiddenStateLoss", "init_args": {"layer_map": {1: 1}, "weight": 0.3}}
    assert normalise_loss_spec(bare) == {"class_path": f"{BUILT_IN}.HiddenStateLoss", "init_args": bare["init_args"]}
    today = {"class_path": "my.pkg.Loss", "init_args": {"weight": 2.0}}
    assert normalise_loss_spec(today) == today  # nothing imported to check the form
    assert normalise_loss_spec({"class_path": "my.pkg.Loss"}) == {"class_path": "my.pkg.Loss", "init_args": {}}


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (3, r"model.losses\[0\]: got 3; expected \{class_path: <a LossTerm subclass>"),
        ({"init_args": {}}, r"model.losses\[0\]: \{'init_args': \{\}\} has no class_path; expected"),
        ({"class_path": "HardLabelLoss", "wieght": 1}, r"\[0\] \(HardLabelLoss\): unknown keys \['wieght'\]; expected"),
        ({"class_path": "HardLabelLoss", "init_args": [1]}, r"init_args is \[1\]; expected a mapping"),
        ({"class_path": "HardLabelLoss", "weight": 0.3}, r"\(HardLabelLoss\): unknown keys \['weight'\]; expected"),
        ("HardLabelLoss", r"\[0\]: got 'HardLabelLoss'; expected \{class_path: <a LossTerm subclass>"),
        (
            {"class_path": f"{__name__}.PlainL1"},
            r"PlainL1 is not a class derived from domainbert.distill.losses.LossTerm",
        ),
        (
            {"class_path": "domainbert.modules.mlm.MaskedLMModule", "init_args": {"init_from": "x"}},
            r"\[0\]: domainbert.modules.mlm.MaskedLMModule is not a class derived from .*LossTerm; model.losses",
        ),
        (
            {"class_path": "HardLabelLoss", "init_args": {"trust_remote_code": True}},
            r"init_args set trust_remote_code, which domainbert never takes from a checkpoint",
        ),
        ({"class_path": "HiddenLoss"}, r"'HiddenLoss' is no built-in loss term \(AttentionLoss, HardLabelLoss, "),
        ({"class_path": "no_such_pkg.Loss"}, r"cannot import 'no_such_pkg.Loss' .*expected the class path of an"),
        ({"class_path": "collections.OrderedDict"}, r"collections.OrderedDict is not a class derived from .*LossTerm"),
        (
            {"class_path": "KLDivergenceLoss", "init_args": {"temprature": 1.0}},
            r"KLDivergenceLoss\(temprature=1.0\) failed: .*its arguments are temperature, multi_label, weight, name",
        ),
        ({"class_path": "KLDivergenceLoss", "init_args": {"temperature": 0}}, r"\[0\] \(.*KLDivergenceLoss\): temper"),
        (
            nn.Linear(1, 1),
            r"\[0\]: Linear is an nn.Module but no domainbert.distill.losses.LossTerm; subclass LossTerm",
        ),
    ],
)
def test_a_bad_entry_is_named_with_what_was_expected(entry, message):
    built = PlainL1.built
    with pytest.raises(DomainBertError, match=message):
        build_losses([entry])
    assert PlainL1.built == built  # a class that is no LossTerm is refused before it is built


def test_terms_and_their_saved_dicts_build_named_weighted_terms_alike():
    entries = [
        KLDivergenceLoss(weight=0.5),
        {"class_path": "HiddenStateLoss", "init_args": {"layer_map": {1: 1}, "weight": 0.3}},
        ScaledL1(scale=2.0, weight=0.7, name="l1"),
    ]
    built = build_losses(entries)
    assert [(n, type(m).__name__, w) for n, m, w in built] == [
        ("kl", "KLDivergenceLoss", 0.5),
        ("hidden", "HiddenStateLoss", 0.3),
        ("l1", "ScaledL1", 0.7),
    ]
    value = built[2][1](NS(logits=torch.zeros(1, 2)), NS(logits=torch.ones(1, 2)), {})
    assert value.item() == pytest.approx(2.0)
    configs = loss_configs(entries)
    kl_args = {"temperature": 2.0, "multi_label": None, "weight": 0.5}  # every argument, as jsonargparse dumps them
    assert configs[0] == {"class_path": f"{BUILT_IN}.KLDivergenceLoss", "init_args": kl_args}
    assert configs[1] == {
        "class_path": f"{BUILT_IN}.HiddenStateLoss",
        "init_args": {"layer_map": {1: 1}, "weight": 0.3},
    }
    assert configs[2] == {
        "class_path": f"{__name__}.ScaledL1",
        "init_args": {"scale": 2.0, "weight": 0.7, "name": "l1"},
    }
    rebuilt = build_losses(configs)  # saved, they rebuild alike
    assert [(n, type(m), w) for n, m, w in rebuilt] == [(n, type(m), w) for n, m, w in built]
    assert rebuilt[2][1].scale == 2.0
    assert loss_configs(None) == default_losses()  # no list: the default terms, written out
    assert [(n, w) for n, _, w in build_losses(None)] == [("kl", 0.5), ("hard", 0.5)]


def _losses_parser() -> ArgumentParser:
    """A parser of ``losses`` typed exactly as :class:`DistillationModule` types it."""
    from domainbert.distill.module import DistillationModule

    hint = typing.get_type_hints(DistillationModule.__init__)["losses"]
    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--losses", type=hint)
    return parser


def _instantiate(parser: ArgumentParser, value):
    cfg = parser.parse_object({"losses": value})
    init = getattr(parser, "instantiate", None) or parser.instantiate_classes
    return cfg, init(cfg).losses


def test_jsonargparse_instantiates_terms_and_an_older_entry_is_refused_by_name():
    parser = _losses_parser()
    today = {
        "class_path": "domainbert.distill.losses.HiddenStateLoss",
        "init_args": {"kind": "cosine", "layer_map": {2: 4}},
    }
    today["init_args"]["weight"] = 0.5
    _, terms = _instantiate(parser, [today, {"class_path": "HardLabelLoss", "init_args": {"kind": "ce"}}])
    assert isinstance(terms[0], HiddenStateLoss) and terms[0].weight == 0.5 and terms[0].layer_map == {2: 4}
    assert isinstance(terms[1], HardLabelLoss) and terms[1].kind == "ce"  # a bare class name, as jsonargparse finds it
    assert [(n, w) for n, _, w in build_losses(terms)] == [("hidden", 0.5), ("hard", 1.0)]
    older = {"class_path": "HiddenStateLoss", "init_args": {"layer_map": {1: 1}}, "weight": 0.3}
    _, terms = _instantiate(parser, [older])
    assert terms[0] == older  # jsonargparse passes it on as a dict, which names what is wrong
    with pytest.raises(DomainBertError, match=r"\[0\] \(HiddenStateLoss\): unknown keys \['weight'\]; expected"):
        build_losses(terms)


def test_a_misspelt_argument_in_todays_form_is_named_when_built():
    parser = _losses_parser()
    _, terms = _instantiate(parser, [{"class_path": "HiddenStateLoss", "init_args": {"kindd": "cosine"}}])
    with pytest.raises(DomainBertError, match=r"model.losses\[0\]: .*HiddenStateLoss\(kindd='cosine'\) failed"):
        build_losses(terms)
