"""One home for label agreement (``domainbert.data.contract``): fine-tuning heads, fixed teacher heads, the data."""

from __future__ import annotations

import logging

import pytest

from domainbert.data.contract import check_agreement, check_label_count, is_generic, model_labels
from domainbert.errors import DomainBertError

ABC = ["api", "graphics", "network"]


def test_count_and_names_must_agree():
    check_label_count(3, ABC)
    check_label_count(None, ABC)
    check_label_count(3, None)
    with pytest.raises(DomainBertError, match=r"data: X\.num_labels is 3 but label_names has 2 names"):
        check_label_count(3, ABC[:2], "data: X.")
    with pytest.raises(DomainBertError, match=r"model\.num_labels is 2 but label_names has 3 names"):
        model_labels(2, ABC)


def test_generic_names_are_a_size_only():
    assert is_generic(["LABEL_0", "LABEL_1"]) and not is_generic(["LABEL_1", "LABEL_0"]) and not is_generic(ABC)


def test_fine_tuning_takes_the_datas_set_and_keeps_a_checkpoints_order(caplog):
    order = ["network", "api", "graphics"]
    assert model_labels(3, ABC, order) == order  # the same set: the checkpoint's head keeps its ids
    assert model_labels(None, None, order) == order  # no data labels: the checkpoint's
    with caplog.at_level(logging.WARNING):
        assert model_labels(2, ["x", "y"], order, source="ckpt") == ["x", "y"]  # another set: a new head, said
    assert "ckpt has a head for the labels" in caplog.text and "replaced by a random one" in caplog.text
    assert model_labels(2, None, ["LABEL_0", "LABEL_1"]) == ["LABEL_0", "LABEL_1"]
    assert model_labels(None, ABC, ["LABEL_0", "LABEL_1", "LABEL_2"]) == ABC  # generic names are no label set
    with pytest.raises(DomainBertError, match="number of labels is unknown"):
        model_labels(None, None, None)


def test_a_fixed_head_needs_the_data_to_have_its_labels_in_its_order():
    assert model_labels(None, None, ABC, source="the teacher", fixed=True) == ABC
    assert model_labels(3, ABC, ABC, source="the teacher", fixed=True) == ABC
    with pytest.raises(DomainBertError, match="the data has 5 labels but the teacher's head has 3"):
        model_labels(5, None, ABC, source="the teacher", fixed=True)
    with pytest.raises(DomainBertError, match="2 label_names but the teacher's head has 3 outputs"):
        model_labels(None, ABC[:2], ABC, source="the teacher", fixed=True)
    with pytest.raises(DomainBertError, match=r"differ from the teacher's .*order matters"):
        model_labels(3, list(reversed(ABC)), ABC, source="the teacher", fixed=True)
    generic = ["LABEL_0", "LABEL_1", "LABEL_2"]  # a teacher without names takes the data's
    assert model_labels(3, ABC, generic, source="the teacher", fixed=True) == ABC


class _Data:
    def __init__(self, names, multi_label=False):
        self.label_names, self.num_labels, self.multi_label = names, len(names), multi_label

    def use_labels(self, names, source):
        self.label_names = list(names)


def test_at_setup_the_data_agrees_or_takes_the_models_order():
    check_agreement(None, ABC)  # plain dataloaders: nothing to check
    dm = _Data(["network", "api", "graphics"])
    check_agreement(dm, ABC, {"multi_label": False})
    assert dm.label_names == ABC  # re-encoded in the model's order
    with pytest.raises(DomainBertError, match=r"data\.multi_label=True but model\.teacher\.multi_label=False"):
        check_agreement(_Data(ABC, multi_label=True), ABC, {"multi_label": False}, owner="model.teacher")
    with pytest.raises(DomainBertError, match="differ from the data's"):
        check_agreement(_Data(["a", "b", "c"]), ABC)
    check_agreement(_Data(ABC), None)  # a task without labels
