"""Task metrics as torchmetrics ``Metric`` objects: classification, entity-level tagging F1, SQuAD EM/F1.

Classification uses torchmetrics' own accuracy and F1. Tagging and QA metrics are written here:

- :class:`EntityF1` matches BIO entity spans the way ``seqeval`` does by default (conlleval rules: an
  ``I-X`` after ``O`` or after another type opens a new entity), counting true positives, false
  positives and false negatives over the whole epoch (micro average over entities).
- :class:`SquadExactMatch` and :class:`SquadF1` follow the official SQuAD v1.1 evaluation script:
  answers are lower-cased and stripped of punctuation, articles and extra spaces; a prediction scores
  the best value over the gold answers.
"""

from __future__ import annotations

import collections
import re
import string
from collections.abc import Sequence

import torch
from torchmetrics import Metric, MetricCollection
from torchmetrics.classification import (
    MulticlassAccuracy,
    MulticlassF1Score,
    MultilabelExactMatch,
    MultilabelF1Score,
)

# -- classification ---------------------------------------------------------------------------------


def classification_metrics(num_labels: int, multi_label: bool = False) -> MetricCollection:
    """Accuracy and macro-F1 for ``num_labels`` classes.

    Multi-class: ``acc`` is plain (micro) accuracy and ``f1_macro`` the unweighted mean of per-class F1.
    Multi-label: ``acc`` is subset accuracy (every label of a row right) and ``f1_macro`` the mean of
    per-label F1; predictions are sigmoid probabilities thresholded at 0.5.
    """
    if multi_label:
        return MetricCollection(
            {
                "acc": MultilabelExactMatch(num_labels=num_labels),
                "f1_macro": MultilabelF1Score(num_labels=num_labels, average="macro"),
            }
        )
    return MetricCollection(
        {
            "acc": MulticlassAccuracy(num_classes=num_labels, average="micro"),
            "f1_macro": MulticlassF1Score(num_classes=num_labels, average="macro"),
        }
    )


# -- tagging ----------------------------------------------------------------------------------------


def split_tag(tag: str) -> tuple[str, str]:
    """``"B-PER"`` -> ``("B", "PER")``; ``"O"`` -> ``("O", "")``.

    Raises:
        ValueError: a tag that is neither ``O`` nor ``B-``/``I-`` followed by a type.
    """
    if tag == "O":
        return "O", ""
    if len(tag) > 2 and tag[0] in "BI" and tag[1] in "-_":
        return tag[0], tag[2:]
    raise ValueError(f"tag {tag!r} is not in BIO form (O, B-TYPE or I-TYPE)")


def get_entities(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """Entity spans ``(type, first, last)`` (inclusive) of one BIO sequence, by conlleval/seqeval rules.

    An entity starts at ``B-X``, or at ``I-X`` when the previous tag is ``O`` or of another type; it
    continues over ``I-X`` of the same type and ends before anything else.
    """
    out: list[tuple[str, int, int]] = []
    start, kind = None, ""
    for i, tag in enumerate(tags):
        prefix, typ = split_tag(tag)
        begins = prefix == "B" or (prefix == "I" and (start is None or typ != kind))
        if start is not None and (prefix == "O" or begins):
            out.append((kind, start, i - 1))
            start = None
        if begins:
            start, kind = i, typ
    if start is not None:
        out.append((kind, start, len(tags) - 1))
    return out


class EntityF1(Metric):
    """Entity-level precision, recall and F1 over BIO sequences (micro average over entities).

    ``update(preds, targets)`` takes lists of tag-string sequences, one per sentence, with
    ``len(preds[i]) == len(targets[i])``. ``compute()`` returns the F1 as a tensor;
    :meth:`scores` returns precision, recall and F1.
    """

    full_state_update = False
    higher_is_better = True
    is_differentiable = False

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.add_state("tp", default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("fp", default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("fn", default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, preds: Sequence[Sequence[str]], targets: Sequence[Sequence[str]]) -> None:
        """Count matched, spurious and missed entities of a batch of sentences."""
        if len(preds) != len(targets):
            raise ValueError(f"{len(preds)} predicted sentences but {len(targets)} gold ones")
        tp = fp = fn = 0
        for p, t in zip(preds, targets):
            if len(p) != len(t):
                raise ValueError(f"a sentence has {len(p)} predicted tags but {len(t)} gold tags")
            pe, te = set(get_entities(p)), set(get_entities(t))
            tp += len(pe & te)
            fp += len(pe - te)
            fn += len(te - pe)
        self.tp += tp
        self.fp += fp
        self.fn += fn

    def scores(self) -> dict[str, torch.Tensor]:
        """``{"precision", "recall", "f1"}`` of everything seen since the last reset (0 when undefined)."""
        tp, fp, fn = self.tp.float(), self.fp.float(), self.fn.float()
        precision = tp / (tp + fp) if (tp + fp) > 0 else torch.zeros((), device=tp.device)
        recall = tp / (tp + fn) if (tp + fn) > 0 else torch.zeros((), device=tp.device)
        f1 = 2 * precision * recall / (precision + recall) if (precision + recall) > 0 else torch.zeros_like(precision)
        return {"precision": precision, "recall": recall, "f1": f1}

    def compute(self) -> torch.Tensor:
        """The entity-level F1."""
        return self.scores()["f1"]


# -- question answering -----------------------------------------------------------------------------

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCT = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lower case, no punctuation, no articles, single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str, golds: Sequence[str]) -> float:
    """1.0 when the normalised prediction equals a normalised gold answer, else 0.0."""
    golds = list(golds) or [""]
    return float(any(normalize_answer(prediction) == normalize_answer(g) for g in golds))


def token_f1(prediction: str, golds: Sequence[str]) -> float:
    """The best bag-of-tokens F1 of the prediction against each gold answer."""
    golds = list(golds) or [""]
    pred = normalize_answer(prediction).split()
    best = 0.0
    for gold in golds:
        ref = normalize_answer(gold).split()
        if not pred or not ref:
            best = max(best, float(pred == ref))
            continue
        common = sum((collections.Counter(pred) & collections.Counter(ref)).values())
        if common == 0:
            continue
        p, r = common / len(pred), common / len(ref)
        best = max(best, 2 * p * r / (p + r))
    return best


class _SquadMetric(Metric):
    full_state_update = False
    higher_is_better = True
    is_differentiable = False

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.add_state("total", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

    @staticmethod
    def score(prediction: str, golds: Sequence[str]) -> float:  # pragma: no cover - overridden
        raise NotImplementedError

    def update(self, preds: Sequence[str], targets: Sequence[Sequence[str]]) -> None:
        """Score predicted answer texts against each example's list of gold answer texts."""
        if len(preds) != len(targets):
            raise ValueError(f"{len(preds)} predictions but {len(targets)} gold answer lists")
        self.total += sum(self.score(p, g) for p, g in zip(preds, targets))
        self.count += len(preds)

    def compute(self) -> torch.Tensor:
        """The mean score, a fraction in [0, 1]."""
        if self.count == 0:
            return torch.zeros((), dtype=torch.float32, device=self.total.device)
        return (self.total / self.count).float()


class SquadExactMatch(_SquadMetric):
    """SQuAD exact match: the fraction of predictions equal to a gold answer after normalisation."""

    score = staticmethod(exact_match)


class SquadF1(_SquadMetric):
    """SQuAD F1: the mean over examples of the best token-overlap F1 against the gold answers."""

    score = staticmethod(token_f1)
