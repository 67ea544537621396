"""The distillation loss terms, under the name configs use: ``domainbert.losses.<Name>``.

They live in :mod:`domainbert.distill.losses`; this module re-exports them so that ``extra_losses`` entries and
code written against ``domainbert.losses`` keep working.
"""

from domainbert.distill.losses import (
    AttentionLoss,
    DistillLoss,
    HardLabelLoss,
    HiddenStateLoss,
    KLDivergenceLoss,
    build_loss,
    check_layer_map,
    token_mask,
    uniform_layer_map,
)

__all__ = [
    "AttentionLoss",
    "DistillLoss",
    "HardLabelLoss",
    "HiddenStateLoss",
    "KLDivergenceLoss",
    "build_loss",
    "check_layer_map",
    "token_mask",
    "uniform_layer_map",
]
