"""Logistic regression on frozen mean-pooled embeddings: the cheapest baseline, and a head initialisation.

A user with a sentence-embedding checkpoint and a labelled task can stop here: embed every text once, fit a
multinomial logistic regression, done in minutes. The pipeline reports it as a row of its own, so the report
shows what fine-tuning buys over it; and the mean-pooling classification head can start from its weights, so
fine-tuning starts at this baseline instead of below it.

The L2 strength is chosen on the validation split from a log-spaced grid; the test split is never read here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

#: inverse L2 strengths tried (scikit-learn's ``C`` convention: the penalty is ``|W|^2 / (2 C n)``).
C_GRID = (0.01, 0.1, 1.0, 10.0, 100.0)


@dataclass
class Probe:
    """A fitted linear classifier on embeddings: ``logits = x @ weight.T + bias``."""

    weight: torch.Tensor
    """(num_labels, width) weights."""
    bias: torch.Tensor
    """(num_labels,) biases."""
    c: float
    """The chosen inverse L2 strength."""
    val_scores: dict[float, float] = field(default_factory=dict)
    """Validation macro-F1 of every ``C`` tried."""

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """The class scores of embeddings ``x``."""
        return x @ self.weight.T + self.bias


def fit_logreg(x: torch.Tensor, y: torch.Tensor, num_labels: int, c: float, max_iter: int = 300) -> Probe:
    """Multinomial logistic regression by full-batch L-BFGS (exact, deterministic, a second on 10k rows)."""
    x, y = x.float(), y.long()
    w = torch.zeros(num_labels, x.shape[1], requires_grad=True)
    b = torch.zeros(num_labels, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], max_iter=max_iter, tolerance_grad=1e-6, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = F.cross_entropy(x @ w.T + b, y) + (w**2).sum() / (2 * c * len(y))
        loss.backward()
        return loss

    opt.step(closure)
    return Probe(weight=w.detach(), bias=b.detach(), c=c)


def macro_f1(logits: torch.Tensor, y: torch.Tensor, num_labels: int) -> float:
    """Macro-F1 of ``argmax(logits)`` against ``y``."""
    from domainbert.core.stats import macro_f1 as f1

    return f1(y.numpy(), logits.argmax(-1).numpy(), num_labels)


def select_probe(
    x_train: torch.Tensor,
    y_train: torch.Tensor,
    x_val: torch.Tensor | None,
    y_val: torch.Tensor | None,
    num_labels: int,
    grid: Sequence[float] = C_GRID,
) -> Probe:
    """Fit one probe per ``C`` in ``grid`` and keep the best on validation (``C=1`` when there is none)."""
    if x_val is None or y_val is None or len(y_val) == 0:
        return fit_logreg(x_train, y_train, num_labels, 1.0)
    best, scores = None, {}
    for c in grid:
        probe = fit_logreg(x_train, y_train, num_labels, c)
        scores[c] = macro_f1(probe.logits(x_val), y_val, num_labels)
        if best is None or scores[c] > scores[best.c]:
            best = probe
    best.val_scores = scores
    return best
