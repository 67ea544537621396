"""An example distillation loss term from another package: mean squared error between the logits.

Kim et al. (2021, "Comparing Kullback-Leibler Divergence and Mean Squared Error Loss in Knowledge Distillation")
found that matching the logits directly trains students as well as the soft-target KL or better. Installed, the
term is one entry of ``model.losses`` (``logit_mse.yaml`` beside this package)::

    losses:
      - class_path: logit_mse_loss.LogitMSELoss
        init_args: {weight: 0.5, name: logit_mse}
"""

from __future__ import annotations

from typing import Any

import torch

from domainbert.distill.losses import LossTerm, token_mask
from domainbert.errors import DomainBertError


class LogitMSELoss(LossTerm):
    """Mean squared difference of student and teacher logits, per example (or counted token), summed over classes.

    Example:
    >>> from types import SimpleNamespace
    >>> term = LogitMSELoss(weight=0.5)
    >>> student = SimpleNamespace(logits=torch.tensor([[1.0, 2.0], [0.0, 0.0]]))
    >>> teacher = SimpleNamespace(logits=torch.tensor([[1.0, 0.0], [1.0, 1.0]]))
    >>> term(student, teacher, {})
    tensor(3.)
    """

    def __init__(self, scale: float = 1.0, **kwargs: Any) -> None:
        """Configure the term.

        Args:
            scale: divide both models' logits by this before comparing them (their temperature).
            **kwargs: ``weight`` and ``name``, as :class:`~domainbert.distill.losses.LossTerm` takes them.
        """
        super().__init__(**kwargs)
        if scale <= 0:
            raise DomainBertError(f"LogitMSELoss: scale={scale}: expected a positive number")
        self.scale = float(scale)

    def forward(self, student_out: Any, teacher_out: Any, batch: dict) -> torch.Tensor:
        """The loss of a batch: ``mean over rows of sum over classes of (s - t)² / scale²``."""
        s, t = student_out.logits.float() / self.scale, teacher_out.logits.float() / self.scale
        mask = token_mask(s, batch)  # per-token logits: the positions that count
        if mask is not None:
            s, t = s[mask], t[mask]
        if s.shape[0] == 0:
            return student_out.logits.sum() * 0.0
        return (s - t).pow(2).sum(-1).mean()
