"""The distillation loss terms, under the name configs use: ``domainbert.losses.<Name>``.

They live in :mod:`domainbert.distill.losses` (the terms) and :mod:`domainbert.distill.objective` (reading
``extra_losses`` entries); this module re-exports them so that ``extra_losses`` entries and code written against
``domainbert.losses`` keep working. A new term subclasses :class:`LossTerm`.
"""

from domainbert.distill.losses import (
    AttentionLoss,
    DistillLoss,
    HardLabelLoss,
    HiddenStateLoss,
    KLDivergenceLoss,
    LossTerm,
    check_layer_map,
    token_mask,
    uniform_layer_map,
)
from domainbert.distill.objective import build_loss, normalise_loss_spec

__all__ = [
    "AttentionLoss",
    "DistillLoss",
    "HardLabelLoss",
    "HiddenStateLoss",
    "KLDivergenceLoss",
    "LossTerm",
    "build_loss",
    "check_layer_map",
    "normalise_loss_spec",
    "token_mask",
    "uniform_layer_map",
]
