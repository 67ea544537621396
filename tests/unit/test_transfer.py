"""The transfer set: corpus documents appended, unlabelled, to a distillation's training split."""

from __future__ import annotations

import json
import logging

import pytest

from domainbert.core.hf import load_tokenizer
from domainbert.data.classification import ClassificationDataModule
from domainbert.data.masking import IGNORE_INDEX
from domainbert.data.transfer import TransferSet, as_transfer, transfer_rows
from domainbert.errors import DomainBertError
from tests.helpers import FIX
from tests.helpers.tiny import make_tiny


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return load_tokenizer(str(make_tiny("bert", tmp_path_factory.mktemp("tiny") / "bert")))


def _corpus(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("documents", [0, -3, True, 2.5])
def test_documents_must_be_a_positive_count(documents):
    with pytest.raises(DomainBertError, match=r"data\.transfer\.documents=.*positive number"):
        TransferSet("corpus.txt", documents=documents)


def test_settings_from_a_path_or_a_mapping():
    assert as_transfer("c.txt") == TransferSet("c.txt")
    assert as_transfer({"path": "c.txt", "documents": None}).documents is None
    with pytest.raises(DomainBertError, match=r"unknown keys \['docs'\]"):
        as_transfer({"path": "c.txt", "docs": 3})


def test_task_texts_are_left_out_and_the_sample_is_seeded(tmp_path):
    path = _corpus(tmp_path / "c.txt", ["Alpha  beta", "gamma", "", "delta", "epsilon", "zeta"])
    rows = transfer_rows(TransferSet(path, documents=None), ["alpha beta", "Gamma"], "body", "y")
    assert sorted(rows["body"]) == ["delta", "epsilon", "zeta"]  # whitespace and case do not hide a task text
    assert rows["y"] == [None] * 3
    a = transfer_rows(TransferSet(path, documents=2, seed=1), [], "text", "label")["text"]
    b = transfer_rows(TransferSet(path, documents=2, seed=1), [], "text", "label")["text"]
    c = [transfer_rows(TransferSet(path, documents=2, seed=s), [], "text", "label")["text"] for s in range(2, 8)]
    assert a == b and len(a) == 2 and any(x != a for x in c)


def test_a_corpus_smaller_than_asked_gives_all_it_has_and_says_so(tmp_path, caplog):
    path = _corpus(tmp_path / "c.txt", ["one", "two"])
    with caplog.at_level(logging.WARNING, logger="domainbert.data.transfer"):
        rows = transfer_rows(TransferSet(path, documents=5), [], "text", "label")
    assert len(rows) == 2 and "only 2 usable documents" in caplog.text


def test_a_corpus_of_task_texts_only_is_refused(tmp_path):
    path = _corpus(tmp_path / "c.txt", ["one", "two"])
    with pytest.raises(DomainBertError, match="no document in column 'text' that is not already a task text"):
        transfer_rows(TransferSet(path), ["One", "two"], "text", "label")


def test_the_training_split_gains_unlabelled_rows(tokenizer):
    dm = ClassificationDataModule(
        train=str(FIX / "cls_train.jsonl"),
        val=str(FIX / "cls_val.jsonl"),
        batch_size=4,
        transfer={"path": str(FIX / "corpus.txt"), "documents": 10},
    )
    dm.connect(tokenizer)
    dm.setup("fit")
    task = len(dm.raw("train"))
    train = dm.datasets["train"]
    assert len(train) == task + 10
    assert train["labels"][task:] == [IGNORE_INDEX] * 10
    assert IGNORE_INDEX not in train["labels"][:task]
    assert len(dm.datasets["validation"]) == len(dm.raw("validation"))  # validation untouched


def test_validation_and_test_texts_never_enter_the_transfer_set(tmp_path, tokenizer):
    val = [json.loads(line) for line in (FIX / "cls_val.jsonl").read_text().splitlines()]
    path = _corpus(tmp_path / "c.txt", [r["text"] for r in val] + ["a corpus document of its own"])
    dm = ClassificationDataModule(
        train=str(FIX / "cls_train.jsonl"),
        val=str(FIX / "cls_val.jsonl"),
        transfer={"path": path, "documents": None},
    )
    dm.connect(tokenizer)
    dm.setup("fit")
    assert len(dm.datasets["train"]) == len(dm.raw("train")) + 1


@pytest.mark.parametrize(
    "option, named",
    [
        ({"multi_label": True}, "data.multi_label"),
        ({"text_pair_column": "text_b"}, "data.text_pair_column"),
        ({"soft_label_column": "probabilities"}, "data.soft_label_column"),
        ({"augment": {"delete_prob": 0.1}}, "data.augment"),
    ],
)
def test_options_a_transfer_set_does_not_combine_with_are_named(option, named):
    with pytest.raises(DomainBertError, match=f"does not combine with {named}"):
        ClassificationDataModule(train=str(FIX / "cls_train.jsonl"), transfer=str(FIX / "corpus.txt"), **option)
