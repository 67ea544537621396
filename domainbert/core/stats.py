"""Honest comparisons: mean ± std over seeds and a paired bootstrap interval on the same test rows.

The bootstrap resamples *rows* of the test set (the sampling noise a second domain would also have) and, where a
side has several seeds, its *seeds* too (the run-to-run noise of fine-tuning), and compares the seed-averaged
metric of the two starting models on exactly the same rows. With one seed a side's run-to-run noise is not
covered, and the verdict says so.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch


def macro_f1(y_true: np.ndarray, y_pred: np.ndarray, num_labels: int) -> float:
    """Macro-F1 as ``torchmetrics`` computes the logged ``f1_macro`` (so the report compares the same metric)."""
    from torchmetrics.functional.classification import multiclass_f1_score

    y, p = torch.as_tensor(np.asarray(y_true)), torch.as_tensor(np.asarray(y_pred))
    return float(multiclass_f1_score(p, y, num_labels, average="macro"))


def accuracy(y_true: np.ndarray, y_pred: np.ndarray, num_labels: int) -> float:
    """Fraction of rows predicted right (``num_labels`` unused; same signature as :func:`macro_f1`)."""
    return float(np.mean(np.asarray(y_true) == np.asarray(y_pred)))


METRICS: dict[str, Callable[[np.ndarray, np.ndarray, int], float]] = {"f1_macro": macro_f1, "acc": accuracy}


@dataclass
class Interval:
    """A paired difference (``b`` minus ``a``) with its bootstrap confidence interval."""

    diff: float
    low: float
    high: float
    level: float
    seeds_covered: bool = True
    """Both sides had several seeds, so the interval covers run-to-run noise as well as row sampling."""

    def verdict(self, single: str = "one seed: run-to-run noise") -> str:
        """``helped`` / ``made no significant difference`` / ``hurt``, from where the interval lies.

        Args:
            single: what the caveat calls a comparison whose interval holds no seed-to-seed noise.
        """
        caveat = "" if self.seeds_covered else f" ({single} is not in the interval)"
        if self.low > 0:
            return "helped" + caveat
        if self.high < 0:
            return "hurt" + caveat
        return "made no significant difference" + caveat


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value)."""
    vals = [float(v) for v in values]
    if not vals:
        return float("nan"), float("nan")
    return statistics.fmean(vals), (statistics.stdev(vals) if len(vals) > 1 else 0.0)


def weighted_metric(metric: str, y_true: np.ndarray, y_pred: np.ndarray, weights: np.ndarray, k: int) -> float:
    """``metric`` of rows counted ``weights`` times each (a bootstrap resample), as :data:`METRICS` defines it.

    Macro-F1 is torchmetrics' (the logged ``f1_macro``): the mean of ``2 TP / (2 TP + FP + FN)`` over the classes
    that occur among the labels or the predictions; accuracy the weighted share of right rows. Counting rows instead
    of copying them makes a resample's score a few array operations.
    """
    right = y_true == y_pred
    total = float(weights.sum())
    if metric == "acc":
        return float(weights[right].sum()) / total if total else 0.0
    if metric != "f1_macro":
        raise ValueError(f"metric={metric!r}: expected one of {sorted(METRICS)}")
    tp = np.bincount(y_true[right], weights=weights[right], minlength=k)
    fp = np.bincount(y_pred[~right], weights=weights[~right], minlength=k)
    fn = np.bincount(y_true[~right], weights=weights[~right], minlength=k)
    seen = (tp + fp + fn) > 0
    if not seen.any():
        return 0.0
    return float(np.mean(2 * tp[seen] / (2 * tp[seen] + fp[seen] + fn[seen])))


def _seed_mean(metric: str, y_true: np.ndarray, preds: np.ndarray, weights: np.ndarray, k: int) -> float:
    return float(np.mean([weighted_metric(metric, y_true, p, weights, k) for p in preds]))


def _resample_seeds(preds: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return preds[rng.integers(0, len(preds), len(preds))] if len(preds) > 1 else preds


def paired_bootstrap(
    y_true: Sequence[int],
    preds_a: Sequence[Sequence[int]],
    preds_b: Sequence[Sequence[int]],
    num_labels: int,
    metric: str = "f1_macro",
    resamples: int = 1000,
    level: float = 0.95,
    seed: int = 0,
) -> Interval:
    """Bootstrap the difference ``metric(b) - metric(a)`` over test rows, pairing the two on the same rows.

    Args:
        y_true: the gold label ids of the test rows.
        preds_a: predicted label ids of model ``a`` (the baseline), one list per seed, rows in the same order.
        preds_b: the same for model ``b`` (the adapted model); its seeds need not match ``a``'s in number.
        num_labels: the number of labels.
        metric: ``f1_macro`` or ``acc`` (a key of :data:`METRICS`).
        resamples: bootstrap resamples.
        level: the interval's coverage (0.95: the 2.5th and 97.5th percentiles).
        seed: the resampling seed (the interval is reproducible).

    Returns:
        The observed difference of the seed-averaged metric and its percentile interval.
    """
    if metric not in METRICS:
        raise ValueError(f"metric={metric!r}: expected one of {sorted(METRICS)}")
    y = np.asarray(y_true)
    a, b = np.asarray(preds_a), np.asarray(preds_b)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != len(y) or b.shape[1] != len(y):
        raise ValueError(f"predictions must be (seeds, {len(y)}) arrays; got {a.shape} and {b.shape}")
    every = np.ones(len(y))
    diff = _seed_mean(metric, y, b, every, num_labels) - _seed_mean(metric, y, a, every, num_labels)
    rng = np.random.default_rng(seed)
    diffs = np.empty(resamples)
    for i in range(resamples):
        counts = np.bincount(rng.integers(0, len(y), len(y)), minlength=len(y)).astype(float)
        a_i, b_i = _resample_seeds(a, rng), _resample_seeds(b, rng)
        diffs[i] = _seed_mean(metric, y, b_i, counts, num_labels) - _seed_mean(metric, y, a_i, counts, num_labels)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(diffs, [tail, 100 - tail])
    return Interval(diff, float(low), float(high), level, seeds_covered=len(a) > 1 and len(b) > 1)
