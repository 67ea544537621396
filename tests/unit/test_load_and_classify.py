"""The Python API's load-and-predict path: ``load_variant`` then ``classify`` (their docstring examples run in
tests/unit/test_doctests.py)."""

from __future__ import annotations

import pytest
import torch

from domainbert.deploy.classifier import classify
from domainbert.deploy.load import load_variant
from tests.helpers.tiny import tiny_classifier

LABELS = ["api", "graphics", "network"]


@pytest.fixture(scope="module")
def folder(tiny_models, tmp_path_factory) -> str:
    return tiny_classifier(tiny_models["bert"], tmp_path_factory.mktemp("cls") / "hf", seed=0, labels=LABELS)


def test_classify_gives_the_models_softmax_and_its_argmax_label(folder):
    model, tokenizer, _ = load_variant(folder)
    texts = ["a library for fonts", "a daemon that serves files over the network to many clients"]
    rows = classify(model, tokenizer, texts, batch_size=1)
    with torch.no_grad():
        for text, row in zip(texts, rows, strict=True):
            probs = model(**tokenizer(text, return_tensors="pt")).logits.softmax(-1)[0].tolist()
            assert row["probabilities"] == {name: round(p, 6) for name, p in zip(LABELS, probs, strict=True)}
            assert row["label"] == LABELS[max(range(3), key=probs.__getitem__)]


def test_a_multi_label_model_gets_the_labels_over_the_threshold(folder):
    model, tokenizer, _ = load_variant(folder)
    model.config.problem_type = "multi_label_classification"
    with torch.no_grad():
        logits = model(**tokenizer("a library for fonts", return_tensors="pt")).logits[0]
    threshold = float(torch.sigmoid(logits).median())
    row = classify(model, tokenizer, ["a library for fonts"], threshold=threshold)[0]
    assert row["labels"] == [n for n, p in zip(LABELS, torch.sigmoid(logits).tolist(), strict=True) if p >= threshold]
    assert "label" not in row
