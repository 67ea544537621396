"""Task metrics against hand-computed values: accuracy/macro-F1, seqeval-style entity F1, SQuAD EM/F1.

Entity spans themselves (``get_entities``) are tested with the tag scheme, in ``test_tags.py``.
"""

import pytest
import torch

from domainbert.modules.metrics import EntityF1, SquadExactMatch, SquadF1, classification_metrics


def test_accuracy_is_micro_and_f1_is_macro():
    metrics = classification_metrics(num_labels=2)
    # targets 0 0 0 1, predictions 0 0 1 1 (as logits)
    logits = torch.tensor([[2.0, 0.0], [2.0, 0.0], [0.0, 2.0], [0.0, 2.0]])
    out = metrics(logits, torch.tensor([0, 0, 0, 1]))
    assert out["acc"].item() == pytest.approx(0.75)
    # class 0: P=1, R=2/3 -> F1=0.8; class 1: P=1/2, R=1 -> F1=2/3; macro = 0.7333
    assert out["f1_macro"].item() == pytest.approx((0.8 + 2 / 3) / 2, abs=1e-6)


def test_multilabel_accuracy_is_subset_accuracy():
    metrics = classification_metrics(num_labels=3, multi_label=True)
    probs = torch.tensor([[0.9, 0.8, 0.1], [0.9, 0.1, 0.1]])
    target = torch.tensor([[1, 1, 0], [1, 1, 0]])
    out = metrics(probs, target)
    assert out["acc"].item() == pytest.approx(0.5)
    # label 0: F1 1; label 1: P=1 R=1/2 -> 2/3; label 2: no positives, none predicted -> 0 in torchmetrics
    assert out["f1_macro"].item() == pytest.approx((1 + 2 / 3 + 0) / 3, abs=1e-6)


def test_entity_f1_seqeval_documentation_example():
    # seqeval's README example: f1_score(y_true, y_pred) == 0.50
    y_true = [["O", "O", "O", "B-MISC", "I-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]]
    y_pred = [["O", "O", "B-MISC", "I-MISC", "I-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]]
    metric = EntityF1()
    metric.update(y_pred, y_true)
    scores = metric.scores()
    assert scores["precision"].item() == pytest.approx(0.5)
    assert scores["recall"].item() == pytest.approx(0.5)
    assert metric.compute().item() == pytest.approx(0.5)


def test_entity_f1_accumulates_over_batches():
    metric = EntityF1()
    # batch 1: gold A(0-1), B(3); predicted A(0-1) only -> tp 1, fn 1
    metric.update([["B-A", "I-A", "O", "O"]], [["B-A", "I-A", "O", "B-B"]])
    # batch 2: gold nothing; predicted B(0) -> fp 1
    metric.update([["B-B", "O"]], [["O", "O"]])
    assert (metric.tp.item(), metric.fp.item(), metric.fn.item()) == (1, 1, 1)
    assert metric.compute().item() == pytest.approx(0.5)
    # partial overlap is a miss and a false alarm, not half a hit
    metric.reset()
    metric.update([["B-A", "O", "O"]], [["B-A", "I-A", "O"]])
    s = metric.scores()
    assert (s["precision"].item(), s["recall"].item(), s["f1"].item()) == (0.0, 0.0, 0.0)


def test_entity_f1_rejects_non_bio_tags_and_length_mismatch():
    metric = EntityF1()
    with pytest.raises(ValueError, match="PER"):
        metric.update([["PER"]], [["O"]])
    with pytest.raises(ValueError, match="2 predicted tags but 1 gold"):
        metric.update([["O", "O"]], [["O"]])


def score(metric, prediction: str, golds: list[str]) -> float:
    """The score of one answer: a fresh metric, one update."""
    m = metric()
    m.update([prediction], [golds])
    return m.compute().item()


def test_squad_normalisation_and_scores():
    # lower case, no punctuation, no articles, single spaces
    assert score(SquadExactMatch, "The  Cat, sat!", ["cat sat"]) == 1.0
    assert score(SquadExactMatch, "the Cat sat.", ["a dog", "cat sat"]) == 1.0
    assert score(SquadExactMatch, "cat", ["cat sat"]) == 0.0
    # "cat sat" vs "cat sat on": common 2, P = 2/2, R = 2/3 -> F1 = 0.8
    assert score(SquadF1, "the cat sat", ["a cat sat on"]) == pytest.approx(0.8)
    # best over the gold answers
    assert score(SquadF1, "the cat sat", ["dog", "a cat sat on", "mat"]) == pytest.approx(0.8)
    assert score(SquadF1, "dog", ["cat"]) == 0.0
    assert score(SquadF1, "", [""]) == 1.0
    # no gold answer: only an empty prediction matches
    assert (score(SquadExactMatch, "", []), score(SquadExactMatch, "x", []), score(SquadF1, "x", [])) == (1, 0, 0)


def test_squad_metrics_average_over_questions():
    em, f1 = SquadExactMatch(), SquadF1()
    preds = ["cat sat", "the cat sat"]
    golds = [["cat sat"], ["a cat sat on"]]
    em.update(preds, golds)
    f1.update(preds, golds)
    assert em.compute().item() == pytest.approx(0.5)
    assert f1.compute().item() == pytest.approx((1.0 + 0.8) / 2)
    em.update(["x"], [["y"]])
    assert em.compute().item() == pytest.approx(1 / 3)
    # fractions, not torchmetrics' percentages; 0 before any question
    em.reset()
    assert em.compute().item() == 0.0


def test_squad_metrics_reject_unpaired_lists():
    with pytest.raises(ValueError, match="2 predictions but 1 gold"):
        SquadExactMatch().update(["a", "b"], [["a"]])
