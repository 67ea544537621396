"""Honest comparisons: mean ± std over seeds and a paired bootstrap interval on the same test rows.

The bootstrap resamples *rows* of the test set (the source of sampling noise that a second domain would also
have) and, for each resample, compares the seed-averaged metric of two starting models on exactly those rows.
Seeds enter as the average over runs, so the interval covers row sampling with seed noise averaged out.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np


def macro_f1(y_true: np.ndarray, y_pred: np.ndarray, num_labels: int) -> float:
    """Macro-averaged F1 over the labels present in ``y_true`` or ``y_pred`` (the usual convention)."""
    f1s = []
    for k in range(num_labels):
        tp = np.sum((y_pred == k) & (y_true == k))
        fp = np.sum((y_pred == k) & (y_true != k))
        fn = np.sum((y_pred != k) & (y_true == k))
        if tp + fp + fn == 0:
            continue
        f1s.append(2 * tp / (2 * tp + fp + fn))
    return float(np.mean(f1s)) if f1s else 0.0


def accuracy(y_true: np.ndarray, y_pred: np.ndarray, num_labels: int) -> float:
    """Fraction of rows predicted right (``num_labels`` unused; same signature as :func:`macro_f1`)."""
    return float(np.mean(y_true == y_pred))


METRICS: dict[str, Callable[[np.ndarray, np.ndarray, int], float]] = {"f1_macro": macro_f1, "acc": accuracy}


@dataclass
class Interval:
    """A paired difference (``b`` minus ``a``) with its bootstrap confidence interval."""

    diff: float
    low: float
    high: float
    level: float

    def verdict(self) -> str:
        """``helped`` / ``made no significant difference`` / ``hurt``, from where the interval lies."""
        if self.low > 0:
            return "helped"
        if self.high < 0:
            return "hurt"
        return "made no significant difference"


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value)."""
    vals = [float(v) for v in values]
    if not vals:
        return float("nan"), float("nan")
    return statistics.fmean(vals), (statistics.stdev(vals) if len(vals) > 1 else 0.0)


def _seed_mean(metric, y_true: np.ndarray, preds: np.ndarray, idx: np.ndarray, k: int) -> float:
    return float(np.mean([metric(y_true[idx], p[idx], k) for p in preds]))


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
        metric: ``f1_macro`` or ``acc``.
        resamples: bootstrap resamples.
        level: the interval's coverage (0.95: the 2.5th and 97.5th percentiles).
        seed: the resampling seed (the interval is reproducible).

    Returns:
        The observed difference of the seed-averaged metric and its percentile interval.
    """
    fn = METRICS[metric]
    y = np.asarray(y_true)
    a, b = np.asarray(preds_a), np.asarray(preds_b)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != len(y) or b.shape[1] != len(y):
        raise ValueError(f"predictions must be (seeds, {len(y)}) arrays; got {a.shape} and {b.shape}")
    every = np.arange(len(y))
    diff = _seed_mean(fn, y, b, every, num_labels) - _seed_mean(fn, y, a, every, num_labels)
    rng = np.random.default_rng(seed)
    diffs = np.empty(resamples)
    for i in range(resamples):
        idx = rng.integers(0, len(y), len(y))
        diffs[i] = _seed_mean(fn, y, b, idx, num_labels) - _seed_mean(fn, y, a, idx, num_labels)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(diffs, [tail, 100 - tail])
    return Interval(diff=diff, low=float(low), high=float(high), level=level)
