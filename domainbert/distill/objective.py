"""The distillation objective: the weighted loss terms, their layer map, and what they need from the models.

``α·KL(student/T ‖ teacher/T)·T² + β·hard-label loss + γ·hidden-state loss + δ·attention loss`` plus any
``extra_losses``, each with its own ``weight``; a built-in term whose weight is 0 is left out. The terms are in
:mod:`domainbert.distill.losses`; :mod:`domainbert.distill.loss_specs` reads ``extra_losses`` entries.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from domainbert.distill.loss_specs import build_extra_losses
from domainbert.distill.losses import (
    AttentionLoss,
    HardLabelLoss,
    HiddenStateLoss,
    KLDivergenceLoss,
    LossTerm,
    check_layer_map,
    uniform_layer_map,
)
from domainbert.distill.student import hidden_width, num_layers
from domainbert.errors import DomainBertError


@dataclass
class Objective:
    """The loss terms by name, their weights, and the ``{student_layer: teacher_layer}`` map they use."""

    terms: dict[str, nn.Module]
    weights: dict[str, float]
    layer_map: dict[int, int]

    def needs(self, flag: str, default: bool = False) -> bool:
        """True when some term sets ``flag`` (``needs_hidden_states``, ``needs_attentions``, ``needs_teacher``)."""
        return any(getattr(t, flag, default) for t in self.terms.values())


def check_weights(**weights: float) -> None:
    """Raise for a negative loss weight."""
    for name, w in weights.items():
        if w < 0:
            raise DomainBertError(f"{name}={w}: loss weights must not be negative")


def build_objective(
    student_config,
    teacher_config,
    *,
    alpha: float,
    beta: float,
    gamma: float,
    delta: float,
    temperature: float,
    multi_label: bool = False,
    hidden_loss: str = "mse",
    layer_map: dict[int, int] | None = None,
    default_map: dict[int, int] | None = None,
    extra_losses: list[LossTerm | dict] | None = None,
) -> Objective:
    """The terms of the weights above 0 (see the arguments of ``DistillationModule``).

    Args:
        student_config: the student's config (its depth and width).
        teacher_config: the teacher's config.
        alpha: weight of the soft-target loss.
        beta: weight of the hard-label loss.
        gamma: weight of the hidden-state loss.
        delta: weight of the attention-map loss.
        temperature: softmax temperature of the soft-target loss.
        multi_label: compare per-label sigmoids in the soft-target loss.
        hidden_loss: ``mse`` or ``cosine``.
        layer_map: the user's layer map; checked against both depths.
        default_map: the map used without one (a copied student's layers); else TinyBERT's uniform map.
        extra_losses: more terms: :class:`~domainbert.distill.losses.LossTerm` s, or dicts in the older
            ``{class_path, init_args, weight}`` form (:func:`~domainbert.distill.loss_specs.build_loss`); a name
            already taken gets ``_`` appended.
    """
    check_weights(alpha=alpha, beta=beta, gamma=gamma, delta=delta)
    s_layers, t_layers = num_layers(student_config), num_layers(teacher_config)
    if layer_map is not None:
        lmap = check_layer_map(layer_map, s_layers, t_layers)
    else:
        lmap = default_map or uniform_layer_map(s_layers, t_layers)
    terms: dict[str, nn.Module] = {}
    if alpha > 0:
        terms["kl"] = KLDivergenceLoss(temperature, multi_label=multi_label, weight=alpha)
    if beta > 0:
        terms["hard"] = HardLabelLoss(weight=beta)
    if gamma > 0:
        widths = hidden_width(student_config), hidden_width(teacher_config)
        terms["hidden"] = HiddenStateLoss(hidden_loss, lmap, s_layers, t_layers, *widths, weight=gamma)
    if delta > 0:
        terms["attention"] = AttentionLoss(lmap, s_layers, t_layers, weight=delta)
    weights = {name: term.weight for name, term in terms.items()}
    for name, loss, w in build_extra_losses(extra_losses):
        while name in terms:
            name += "_"
        terms[name], weights[name] = loss, w
    if not any(w > 0 for w in weights.values()):
        raise DomainBertError("every loss weight is 0: set alpha, beta, gamma, delta or an extra_losses weight above 0")
    return Objective(terms, weights, lmap)
