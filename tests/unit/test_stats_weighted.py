"""The bootstrap scores a resample from row counts, the same macro-F1 and accuracy as the logged metrics."""

from __future__ import annotations

import numpy as np
import pytest

from domainbert.core.stats import accuracy, macro_f1, weighted_metric


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_counting_rows_scores_as_repeating_them(seed):
    rng = np.random.default_rng(seed)
    y, p = rng.integers(0, 5, 60), rng.integers(0, 5, 60)
    p[rng.random(60) < 0.5] = y[rng.random(60) < 0.5][:1]  # some right rows
    counts = rng.integers(0, 3, 60)  # a resample: some rows twice, some not at all
    repeated = np.repeat(np.arange(60), counts)
    got = weighted_metric("f1_macro", y, p, counts.astype(float), 5)
    assert got == pytest.approx(macro_f1(y[repeated], p[repeated], 5), abs=1e-6)
    assert weighted_metric("acc", y, p, counts.astype(float), 5) == pytest.approx(accuracy(y[repeated], p[repeated], 5))


def test_a_class_neither_present_nor_predicted_is_left_out_of_the_mean():
    y, p = np.array([0, 0, 1]), np.array([0, 1, 1])
    # class 0: tp 1, fn 1 -> 2/3; class 1: tp 1, fp 1 -> 2/3; class 2 never seen: not averaged (torchmetrics too)
    assert weighted_metric("f1_macro", y, p, np.ones(3), 3) == pytest.approx(2 / 3)
    assert macro_f1(y, p, 3) == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="metric='auc'"):
        weighted_metric("auc", y, p, np.ones(3), 3)
