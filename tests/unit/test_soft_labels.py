"""Soft targets: a teacher's class probabilities as training labels (``data.soft_label_column``)."""

from __future__ import annotations

import json
import math
import re

import pytest
import torch

from domainbert.data.classification import ClassificationDataModule, soft_label_problem, soft_target
from domainbert.errors import DomainBertError

LABEL2ID = {"admin": 0, "libs": 1, "net": 2}


def test_a_soft_cell_is_normalised_in_label_order_and_a_gold_row_is_one_hot():
    assert soft_target({"net": 3.0, "admin": 1.0}, "net", LABEL2ID) == [0.25, 0.0, 0.75]
    assert soft_target(None, "libs", LABEL2ID) == [0.0, 1.0, 0.0]
    assert soft_target({"admin": 0.2, "libs": None, "net": 0.2}, "admin", LABEL2ID) == [0.5, 0.0, 0.5]


@pytest.mark.parametrize(
    ("cell", "expected"),
    [
        ({"admin": 0.5, "games": 0.5}, r"labels \['games'\] outside the label set"),
        ({"admin": -0.1, "libs": 1.1}, "expected probabilities"),
        ({"admin": float("nan")}, "expected probabilities"),
        ({"admin": "high"}, "expected probabilities"),
        ({"admin": 0.0, "libs": 0.0}, "sum to 0"),
        ([0.2, 0.8], "expected a mapping of label name to probability"),
    ],
)
def test_a_bad_soft_cell_says_what_is_wrong(cell, expected):
    assert soft_label_problem(cell, LABEL2ID) is not None
    assert re.search(expected, soft_label_problem(cell, LABEL2ID))


def test_good_and_empty_soft_cells_pass():
    assert soft_label_problem(None, LABEL2ID) is None
    assert soft_label_problem({"admin": 0.1, "libs": 0.9, "net": None}, LABEL2ID) is None


def test_soft_cross_entropy_equals_the_hand_computed_value():
    from domainbert.modules.classification import SequenceClassificationModule

    module = SequenceClassificationModule.__new__(SequenceClassificationModule)
    torch.nn.Module.__init__(module)
    module._hparams = type("H", (), {"multi_label": False})()
    module.class_weight = None
    logits = torch.tensor([[2.0, 0.0, -1.0], [0.0, 1.0, 0.0]])
    targets = torch.tensor([[0.7, 0.3, 0.0], [0.0, 1.0, 0.0]])
    hand = 0.0
    for row, target in zip(logits.tolist(), targets.tolist()):
        log_z = math.log(sum(math.exp(v) for v in row))
        hand += -sum(t * (v - log_z) for t, v in zip(target, row))
    got = SequenceClassificationModule.compute_loss(module, logits, targets)
    assert got.item() == pytest.approx(hand / 2, rel=1e-6)
    # the same rows as class ids give the hard loss of the one-hot row
    hard = SequenceClassificationModule.compute_loss(module, logits[1:], torch.tensor([1]))
    assert hard.item() == pytest.approx(-(1.0 - math.log(2 + math.e)), rel=1e-6)


def _rows(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_the_training_batches_carry_probabilities_and_validation_keeps_ids(tiny_bert, tmp_path):
    from transformers import AutoTokenizer

    train = _rows(
        tmp_path / "train.jsonl",
        [
            {"text": "a daemon for sockets", "label": "net"},
            {"text": "a library of parsers", "label": "libs", "probabilities": {"libs": 0.6, "net": 0.4}},
            {"text": "tools for the admin", "label": "admin"},
        ],
    )
    val = _rows(tmp_path / "val.jsonl", [{"text": "network tools", "label": "net"}])
    dm = ClassificationDataModule(train=train, val=val, soft_label_column="probabilities", batch_size=4)
    dm.connect(AutoTokenizer.from_pretrained(tiny_bert))
    dm.setup("fit")
    labels = next(iter(dm.train_dataloader()))["labels"]
    assert labels.dtype == torch.float32 and labels.shape == (3, 3)
    expected = sorted([[0.0, 0.0, 1.0], [0.0, 0.6, 0.4], [1.0, 0.0, 0.0]])
    torch.testing.assert_close(torch.tensor(sorted(labels.tolist())), torch.tensor(expected))
    assert next(iter(dm.val_dataloader()))["labels"].tolist() == [2]


def test_a_bad_soft_cell_names_file_row_and_column(tiny_bert, tmp_path):
    from transformers import AutoTokenizer

    train = _rows(
        tmp_path / "train.jsonl",
        [
            {"text": "a daemon", "label": "net"},
            {"text": "a library", "label": "libs", "probabilities": {"libs": 0.5, "games": 0.5}},
        ],
    )
    dm = ClassificationDataModule(train=train, soft_label_column="probabilities")
    dm.connect(AutoTokenizer.from_pretrained(tiny_bert))
    with pytest.raises(DomainBertError, match=r"train.jsonl: row 2: column 'probabilities' names labels \['games'\]"):
        dm.setup("fit")


def test_soft_labels_refuse_multi_label_data():
    with pytest.raises(DomainBertError, match="soft_label_column is for single-label data"):
        ClassificationDataModule(soft_label_column="probabilities", multi_label=True)


def test_length_grouping_of_augmented_rows_counts_the_text_not_the_soft_cell(tiny_bert, tmp_path):
    from transformers import AutoTokenizer

    train = _rows(
        tmp_path / "train.jsonl",
        [
            {"text": "a daemon for sockets", "label": "net"},
            {"text": "parsers", "label": "libs", "probabilities": {"libs": 0.6, "net": 0.4}},
        ],
    )
    dm = ClassificationDataModule(
        train=train, soft_label_column="probabilities", group_by_length=True, augment={"swap_prob": 0.5}
    )
    dm.connect(AutoTokenizer.from_pretrained(tiny_bert))
    dm.setup("fit")
    assert dm.lengths(dm.datasets["train"]) == [4, 1]  # words of the text only
