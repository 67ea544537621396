"""Version 0.1.0's loss options (``alpha``..``delta``, ``temperature``, ``hidden_loss``, ``layer_map``,
``extra_losses``) read as the ``model.losses`` they mean, in a config's text, a mapping and a checkpoint."""

from __future__ import annotations

import pytest
import yaml

from domainbert.distill.objective import build_losses
from domainbert.distill.released import from_released, released_config, released_text
from domainbert.errors import DomainBertError
from tests.helpers import FIX

BUILT_IN = "domainbert.distill.losses"
OLD_CONFIG = FIX / "old_main" / "distill" / "config.yaml"


def _entry(cls: str, **init_args) -> dict:
    return {"class_path": f"{BUILT_IN}.{cls}", "init_args": init_args}


def test_the_released_defaults_are_todays_default_terms():
    with pytest.warns(FutureWarning, match=r"old\.yaml: the 0\.1\.0 loss options \(alpha\) are read as model\.losses"):
        read = from_released({"teacher": "t", "alpha": 0.5}, "old.yaml")
    assert read == {
        "teacher": "t",
        "losses": [_entry("KLDivergenceLoss", weight=0.5, temperature=2.0), _entry("HardLabelLoss", weight=0.5)],
    }
    built = build_losses(read["losses"])
    assert [(n, w) for n, _, w in built] == [(n, w) for n, _, w in build_losses(None)] == [("kl", 0.5), ("hard", 0.5)]


def test_every_released_option_becomes_a_term_or_a_term_option():
    released = {"temperature": 4.0, "alpha": 0.3, "beta": 0.0, "gamma": 0.2, "delta": 0.1, "hidden_loss": "cosine"}
    released |= {"layer_map": {1: 2}, "student_layers": 1}
    released["extra_losses"] = [{"class_path": "domainbert.losses.HardLabelLoss", "init_args": {}, "weight": 0.4}]
    with pytest.warns(FutureWarning, match=r"write those"):
        read = from_released(released, "old.ckpt")
    assert list(read) == ["losses", "student_layers"]  # the list stands where the first old option stood
    assert read["losses"] == [
        _entry("KLDivergenceLoss", weight=0.3, temperature=4.0),  # beta 0: no hard-label term
        _entry("HiddenStateLoss", weight=0.2, kind="cosine", layer_map={1: 2}),
        _entry("AttentionLoss", weight=0.1, layer_map={1: 2}),
        _entry("HardLabelLoss", weight=0.4, name="hardlabelloss"),  # 0.1.0's path and name, weight inside init_args
    ]


def test_arguments_without_released_options_come_back_unwarned(recwarn):
    given = {"teacher": "t", "losses": [_entry("HardLabelLoss")]}
    assert from_released(given, "new.yaml") == given
    contrastive = (
        "model:\n  class_path: domainbert.modules.contrastive.ContrastiveModule\n  init_args: {temperature: 0.1}\n"
    )
    assert released_text(contrastive, "c.yaml") is contrastive  # another module's temperature is its own
    assert released_text("model: {init_args: {temperature: 0.1}}", "c.yaml") == "model: {init_args: {temperature: 0.1}}"
    assert not [w for w in recwarn if issubclass(w.category, FutureWarning)]


def test_losses_beside_released_options_is_one_line_naming_both():
    with pytest.raises(DomainBertError, match=r"^x.yaml: sets model.losses and gamma, the 0.1.0 form of it; keep"):
        from_released({"losses": [], "gamma": 0.1}, "x.yaml")


def test_a_released_config_file_is_read_as_todays(recwarn):
    text = released_text(OLD_CONFIG.read_text(), "config.yaml")
    init_args = yaml.safe_load(text)["model"]["init_args"]
    assert not {"alpha", "beta", "gamma", "delta", "temperature", "hidden_loss", "layer_map", "extra_losses"} & set(
        init_args
    )
    assert [e["class_path"].rsplit(".", 1)[-1] for e in init_args["losses"]] == [
        "KLDivergenceLoss",
        "HardLabelLoss",
        "HiddenStateLoss",
    ]
    assert init_args["losses"][2]["init_args"] == {"weight": 0.1, "kind": "mse"}
    assert init_args["teacher"] == "/tmp/fixroot/cls/tiny_classification/version_0/hf"  # the rest as it was
    assert len([w for w in recwarn if issubclass(w.category, FutureWarning)]) == 1


def test_a_checkpoints_hparams_merged_by_ckpt_path_are_read_as_todays():
    merged = {"validate": {"model": {"class_path": "domainbert.modules.distill.DistillationModule"}}}
    merged["validate"]["model"]["dict_kwargs"] = {"teacher": "t", "gamma": 0.1, "extra_losses": None}
    with pytest.warns(FutureWarning):
        read = released_config(merged, "a checkpoint")
    kwargs = read["validate"]["model"]["dict_kwargs"]
    assert kwargs["teacher"] == "t" and [e["init_args"]["weight"] for e in kwargs["losses"]] == [0.5, 0.5, 0.1]
    other = {"model": {"class_path": "domainbert.modules.mlm.MaskedLMModule", "init_args": {"alpha": 1}}}
    assert released_config(other, "x") == other  # another class's options are its own
