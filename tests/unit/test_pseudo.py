"""Self-training's choice of pseudo-labelled rows: per class, the teacher's most confident predictions."""

from __future__ import annotations

import torch

from domainbert.adapt.pseudo import most_confident
from tests.helpers.tiny import tiny_classifier


def test_each_class_keeps_its_quota_of_most_confident_rows():
    probs = torch.tensor(
        [
            [0.90, 0.10],  # row 0: class 0, 0.90
            [0.60, 0.40],  # row 1: class 0, 0.60
            [0.20, 0.80],  # row 2: class 1, 0.80
            [0.95, 0.05],  # row 3: class 0, 0.95
            [0.45, 0.55],  # row 4: class 1, 0.55
        ]
    )
    assert most_confident(probs, [2, 1]) == [(3, 0), (0, 0), (2, 1)]


def test_a_class_predicted_less_often_than_its_quota_keeps_all_its_rows_and_zero_keeps_none():
    probs = torch.tensor([[0.7, 0.2, 0.1], [0.6, 0.3, 0.1], [0.1, 0.8, 0.1]])
    assert most_confident(probs, [0, 5, 5]) == [(2, 1)]


def test_an_ensemble_labels_with_the_mean_of_its_teachers_probabilities(tiny_bert, tmp_path):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from domainbert.adapt.pseudo import class_probabilities, ensemble_probabilities

    labels = ["api", "graphics", "network"]
    paths = [tiny_classifier(tiny_bert, tmp_path / f"t{i}", seed=i, labels=labels) for i in range(2)]
    texts = ["a library for drawing", "network daemon for sockets and more text here", "api"]
    alone = [
        class_probabilities(
            AutoModelForSequenceClassification.from_pretrained(p), AutoTokenizer.from_pretrained(p), texts
        )
        for p in paths
    ]
    assert not torch.allclose(alone[0], alone[1])  # the teachers differ, so the mean is a real test
    torch.testing.assert_close(ensemble_probabilities(paths, texts), (alone[0] + alone[1]) / 2)


def test_teachers_with_different_labels_are_refused(tiny_bert, tmp_path):
    import pytest

    from domainbert.adapt.pseudo import ensemble_probabilities
    from domainbert.errors import DomainBertError

    a = tiny_classifier(tiny_bert, tmp_path / "a", seed=0, labels=["api", "graphics"])
    b = tiny_classifier(tiny_bert, tmp_path / "b", seed=1, labels=["graphics", "api"])
    with pytest.raises(DomainBertError, match=r"teacher .*/b has labels \['graphics', 'api'\]"):
        ensemble_probabilities([a, b], ["some text"])


def test_soft_pseudolabels_keep_every_sampled_document_with_the_ensembles_probabilities(tiny_bert, tmp_path):
    import json

    from domainbert.adapt.pseudo import ensemble_probabilities, pseudolabel

    labels = ["api", "graphics", "network"]
    paths = [tiny_classifier(tiny_bert, tmp_path / f"t{i}", seed=i, labels=labels) for i in range(2)]
    task = tmp_path / "task.jsonl"
    task.write_text("".join(json.dumps({"text": f"task text {i}", "label": labels[i % 3]}) + "\n" for i in range(3)))
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(f"corpus document number {i} about drawing" for i in range(20)) + "\n")
    result = pseudolabel(paths, str(corpus), str(task), str(tmp_path / "out"), ratio=2.0, soft=True, seed=3)
    rows = [json.loads(line) for line in open(result["train"])]
    assert result["pseudo_rows"] == 6 and result["labelled_documents"] == 6  # ratio x 3 task rows, no filter
    gold = [json.loads(line) for line in task.read_text().splitlines()]
    one_hot = [{**r, "probabilities": {n: float(n == r["label"]) for n in labels}} for r in gold]
    assert rows[:3] == one_hot  # gold rows first, their label as one-hot probabilities (every row has the column)
    added = rows[3:]
    expected = ensemble_probabilities(paths, [r["text"] for r in added])
    for row, probs in zip(added, expected):
        assert list(row["probabilities"]) == labels
        torch.testing.assert_close(torch.tensor(list(row["probabilities"].values())), probs, atol=1e-6, rtol=0)
        assert row["label"] == labels[int(probs.argmax())]


def test_soft_pseudolabels_refuse_a_ratio_that_asks_for_no_document(tiny_bert, tmp_path):
    import json

    import pytest

    from domainbert.adapt.pseudo import pseudolabel
    from domainbert.errors import DomainBertError

    teacher = tiny_classifier(tiny_bert, tmp_path / "t", seed=0, labels=["api", "graphics"])
    task = tmp_path / "task.jsonl"
    rows = [{"text": "t 0", "label": "api"}, {"text": "t 1", "label": "graphics"}]
    task.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "corpus.txt").write_text("one document\nanother document\n")
    with pytest.raises(DomainBertError, match=r"ratio=0.1 of 2 task rows asks for no corpus document"):
        pseudolabel(teacher, str(tmp_path / "corpus.txt"), str(task), str(tmp_path / "out"), ratio=0.1, soft=True)
