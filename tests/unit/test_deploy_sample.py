"""The sample classifier the examples load: the same seed writes the same weights, the caller's random state is
kept, its labels are its config's, and a bad label list is refused naming the field."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from domainbert.deploy.load import load_variant
from domainbert.deploy.sample import sample_classifier
from domainbert.errors import DomainBertError


def test_the_same_seed_writes_the_same_weights_and_another_seed_others(tmp_path):
    weights = [load_file(str(sample_classifier(tmp_path / str(s), seed=s) / "model.safetensors")) for s in (0, 0, 1)]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    assert not all(torch.equal(weights[0][k], weights[2][k]) for k in weights[0])


def test_the_callers_random_state_is_left_as_it_was(tmp_path):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    sample_classifier(tmp_path / "m", seed=7)
    assert torch.equal(torch.rand(3), expected)


def test_it_loads_as_a_classifier_of_its_labels_and_layers(tmp_path):
    model, tokenizer, info = load_variant(sample_classifier(tmp_path / "m", labels=("a", "b", "c"), layers=2))
    assert model.config.id2label == {0: "a", 1: "b", 2: "c"} and model.config.num_hidden_layers == 2
    assert info == {"variant": "fp32"} and tokenizer.tokenize("the fonts") == ["the", "fonts"]


@pytest.mark.parametrize("labels", [["only"], ["a", "a"]])
def test_fewer_than_two_distinct_labels_are_refused_naming_the_field(tmp_path, labels):
    with pytest.raises(DomainBertError, match=r"sample_classifier: labels: expected two or more distinct names"):
        sample_classifier(tmp_path / "m", labels=labels)
    assert not (tmp_path / "m").exists()
