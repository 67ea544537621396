"""Task metrics as torchmetrics ``Metric`` objects: classification, entity-level tagging F1, SQuAD EM/F1.

- Classification uses torchmetrics' accuracy and F1.
- :class:`EntityF1` matches BIO entity spans the way ``seqeval`` does by default (conlleval rules, see
  :func:`domainbert.data.tags.get_entities`), counting true positives, false positives and false negatives
  over the whole epoch (micro average over entities).
- :class:`SquadExactMatch` and :class:`SquadF1` are torchmetrics' ``SQuAD`` (the official SQuAD v1.1
  evaluation: answers lower-cased and stripped of punctuation, articles and extra spaces; a prediction scores
  the best value over the gold answers) on answer texts, reported as fractions in [0, 1] rather than
  torchmetrics' percentages.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torchmetrics import Metric, MetricCollection
from torchmetrics.classification import (
    MulticlassAccuracy,
    MulticlassF1Score,
    MultilabelExactMatch,
    MultilabelF1Score,
)
from torchmetrics.text import SQuAD

from domainbert.data.tags import get_entities

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


def squad_inputs(preds: Sequence[str], targets: Sequence[Sequence[str]]) -> tuple[list[dict], list[dict]]:
    """Answer texts and lists of gold answer texts in torchmetrics' SQuAD format (ids are the positions).

    An empty gold list stands for "no answer": only an empty prediction matches it.
    """
    if len(preds) != len(targets):
        raise ValueError(f"{len(preds)} predictions but {len(targets)} gold answer lists")
    predictions = [{"prediction_text": text, "id": str(i)} for i, text in enumerate(preds)]
    golds = [{"answers": {"text": list(g) or [""]}, "id": str(i)} for i, g in enumerate(targets)]
    return predictions, golds


class _SquadScore(SQuAD):
    """torchmetrics' SQuAD over answer texts; :meth:`compute` gives one of its two scores as a fraction."""

    #: the score of torchmetrics' result: ``exact_match`` or ``f1``.
    key: str
    plot_upper_bound = 1.0

    def update(self, preds: Sequence[str], targets: Sequence[Sequence[str]]) -> None:
        """Score predicted answer texts against each example's list of gold answer texts."""
        super().update(*squad_inputs(preds, targets))

    def compute(self) -> torch.Tensor:
        """The mean score over the questions seen since the last reset, a fraction in [0, 1] (0 before any)."""
        if self.total == 0:
            return torch.zeros((), device=self.total.device)
        return super().compute()[self.key] / 100


class SquadExactMatch(_SquadScore):
    """SQuAD exact match: the fraction of predictions equal to a gold answer after normalisation."""

    key = "exact_match"


class SquadF1(_SquadScore):
    """SQuAD F1: the mean over examples of the best token-overlap F1 against the gold answers."""

    key = "f1"
