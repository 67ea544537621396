"""Self-training's choice of pseudo-labelled rows: per class, the teacher's most confident predictions."""

from __future__ import annotations

import torch

from domainbert.adapt.pseudo import most_confident


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
