"""Distillation loss terms: small ``nn.Module`` s sharing one interface.

Every term is called as ``loss(student_out, teacher_out, batch) -> Tensor`` (a scalar), where the two
outputs are Hugging Face ``ModelOutput`` s (or anything with ``logits``, ``hidden_states`` and
``attentions`` attributes) and ``batch`` holds at least ``attention_mask`` and, for the hard-label loss,
``labels``. A term says which model outputs it needs through ``needs_hidden_states`` and
``needs_attentions``, so the distillation module asks the models for them only when some term uses them.

:mod:`domainbert.distill.objective` combines the terms as

    α·KL(student/T ‖ teacher/T)·T² + β·hard-label loss + γ·hidden-state loss + δ·attention loss

plus any extra terms a config adds (``extra_losses: [{class_path, init_args, weight}]``); a new term is
any ``nn.Module`` with this ``forward`` signature.

Layer maps use one convention everywhere: ``{student_layer: teacher_layer}`` with 1-based encoder layer
numbers and 0 for the embedding output, i.e. indexes into ``hidden_states`` (TinyBERT's ``m -> g(m)``).
"""

from __future__ import annotations

import importlib
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from domainbert.data.masking import IGNORE_INDEX
from domainbert.errors import DomainBertError


def uniform_layer_map(student_layers: int, teacher_layers: int) -> dict[int, int]:
    """TinyBERT's uniform map: embeddings to embeddings, student layer ``m`` to teacher layer ``m·T/S``.

    Args:
        student_layers: the student's encoder depth ``S``.
        teacher_layers: the teacher's encoder depth ``T`` (at least ``S``).
    """
    if student_layers < 1 or teacher_layers < student_layers:
        raise DomainBertError(
            f"cannot map a {student_layers}-layer student onto a {teacher_layers}-layer teacher: "
            "the student needs at least one layer and at most as many as the teacher"
        )
    return {0: 0, **{m: round(m * teacher_layers / student_layers) for m in range(1, student_layers + 1)}}


def check_layer_map(layer_map: dict[int, int], student_layers: int, teacher_layers: int) -> dict[int, int]:
    """Validate ``{student_layer: teacher_layer}`` (0 = embeddings) against both depths; return it with int keys."""
    out = {int(k): int(v) for k, v in dict(layer_map).items()}
    for s, t in out.items():
        if not 0 <= s <= student_layers or not 0 <= t <= teacher_layers:
            raise DomainBertError(
                f"layer_map entry {s}: {t} is out of range: student layers are 0..{student_layers} and teacher "
                f"layers 0..{teacher_layers} (0 is the embedding output)"
            )
    if not out:
        raise DomainBertError("layer_map is empty: map at least one student layer to a teacher layer")
    return out


def resolve_layer_map(
    layer_map: dict[int, int] | None, student_layers: int | None, teacher_layers: int | None, who: str
) -> dict[int, int]:
    """``layer_map`` checked against both depths where they are known, or the uniform map; int keys and values."""
    if layer_map is None:
        if student_layers is None or teacher_layers is None:
            raise DomainBertError(f"{who} needs a layer_map, or student_layers and teacher_layers")
        return uniform_layer_map(student_layers, teacher_layers)
    if student_layers is not None and teacher_layers is not None:
        return check_layer_map(layer_map, student_layers, teacher_layers)
    return {int(k): int(v) for k, v in layer_map.items()}


def token_mask(logits: torch.Tensor, batch: dict) -> torch.Tensor | None:
    """Positions that count for per-token logits ``(B, S, C)``; None for per-sequence logits ``(B, C)``.

    Where ``batch["labels"]`` has one label per token, the positions whose label is not -100 count (masked
    tokens for masked-LM, first sub-words for tagging); otherwise the attention mask decides.
    """
    if logits.dim() < 3:
        return None
    labels = batch.get("labels")
    if labels is not None and labels.shape == logits.shape[:2] and not labels.is_floating_point():
        return labels != IGNORE_INDEX
    mask = batch.get("attention_mask")
    if mask is not None:
        return mask.bool()
    return torch.ones(logits.shape[:2], dtype=torch.bool, device=logits.device)


def _masked_mean(values: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Mean of ``values`` ``(B, S)`` over the True positions of ``mask`` (0 when there are none)."""
    if mask is None:
        return values.mean()
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp_min(1.0)


class DistillLoss(nn.Module):
    """Base of the loss terms: ``forward(student_out, teacher_out, batch) -> scalar Tensor``."""

    #: the term reads ``hidden_states`` of both models
    needs_hidden_states = False
    #: the term reads ``attentions`` of both models (eager attention)
    needs_attentions = False
    #: the term reads the teacher's output at all (the hard-label loss does not)
    needs_teacher = True

    def forward(self, student_out: Any, teacher_out: Any, batch: dict) -> torch.Tensor:  # pragma: no cover
        """The loss of a batch."""
        raise NotImplementedError


class KLDivergenceLoss(DistillLoss):
    """Soft-target loss of Hinton et al. (2015): ``KL(softmax(t/T) ‖ softmax(s/T)) · T²``.

    Averaged over examples (``batchmean``); for per-token logits over the positions that count (see
    :func:`token_mask`: for masked-LM, the masked positions only). Multi-label models compare per-label
    Bernoulli distributions ``sigmoid(logit/T)`` instead, summed over labels.
    """

    def __init__(self, temperature: float = 2.0, multi_label: bool = False) -> None:
        """Configure the soft-target loss.

        Args:
            temperature: softmax temperature ``T`` (> 0); the loss is scaled by ``T²`` so that its gradients keep
                their size as ``T`` changes.
            multi_label: compare sigmoid (Bernoulli) outputs per label instead of one softmax.
        """
        super().__init__()
        if temperature <= 0:
            raise DomainBertError(f"temperature={temperature}: expected a positive number")
        self.temperature = float(temperature)
        self.multi_label = multi_label

    def forward(self, student_out: Any, teacher_out: Any, batch: dict) -> torch.Tensor:
        s, t = student_out.logits.float(), teacher_out.logits.float()
        if s.shape != t.shape:
            raise DomainBertError(
                f"student logits {tuple(s.shape)} and teacher logits {tuple(t.shape)} differ in shape: the two models "
                "need the same label set (or vocabulary, for masked-LM)"
            )
        mask = token_mask(s, batch)
        if mask is not None:
            s, t = s[mask], t[mask]
        if s.shape[0] == 0:
            return student_out.logits.sum() * 0.0
        temp = self.temperature
        s, t = s / temp, t / temp
        if self.multi_label:
            p = torch.sigmoid(t)
            kl = p * (F.logsigmoid(t) - F.logsigmoid(s)) + (1 - p) * (F.logsigmoid(-t) - F.logsigmoid(-s))
            loss = kl.sum(-1).mean()
        else:
            loss = F.kl_div(F.log_softmax(s, -1), F.log_softmax(t, -1), log_target=True, reduction="batchmean")
        return loss * temp * temp


class HardLabelLoss(DistillLoss):
    """The ordinary supervised loss on the gold labels: cross-entropy, or binary cross-entropy for multi-label.

    Cross-entropy ignores labels of -100 (padding, non-first sub-words, unmasked tokens).
    """

    needs_teacher = False

    def __init__(self, kind: Literal["auto", "ce", "bce"] = "auto") -> None:
        """Choose the loss.

        Args:
            kind: ``ce`` (cross-entropy), ``bce`` (binary cross-entropy on multi-hot labels) or ``auto``
                (``bce`` when the labels are floats shaped like the logits, else ``ce``).
        """
        super().__init__()
        self.kind = kind

    def forward(self, student_out: Any, teacher_out: Any, batch: dict) -> torch.Tensor:
        logits = student_out.logits.float()
        labels = batch.get("labels")
        if labels is None:
            raise DomainBertError("the hard-label loss needs labels in the batch; set its weight (beta) to 0")
        kind = self.kind
        if kind == "auto":
            kind = "bce" if labels.is_floating_point() and labels.shape == logits.shape else "ce"
        if kind == "bce":
            return F.binary_cross_entropy_with_logits(logits, labels.float())
        flat = logits.reshape(-1, logits.shape[-1])
        target = labels.reshape(-1).long()
        if (target != IGNORE_INDEX).sum() == 0:
            return logits.sum() * 0.0
        return F.cross_entropy(flat, target, ignore_index=IGNORE_INDEX)


class HiddenStateLoss(DistillLoss):
    """Match student hidden states to the teacher's, layer by layer (TinyBERT, DistilBERT's cosine loss).

    Each pair ``(m, g(m))`` of the layer map compares student ``hidden_states[m]``, projected to the
    teacher's width by a learned linear map when the widths differ (one map shared by all layers, as in
    TinyBERT), with teacher ``hidden_states[g(m)]`` at the non-padding tokens: ``mse`` is the mean squared
    difference per element, ``cosine`` is ``1 - cos`` per token. The result is the mean over pairs, so the
    weight does not depend on the depth.
    """

    needs_hidden_states = True

    def __init__(
        self,
        kind: Literal["mse", "cosine"] = "mse",
        layer_map: dict[int, int] | None = None,
        student_layers: int | None = None,
        teacher_layers: int | None = None,
        student_width: int | None = None,
        teacher_width: int | None = None,
    ) -> None:
        """Configure the hidden-state loss.

        Args:
            kind: ``mse`` or ``cosine``.
            layer_map: ``{student_layer: teacher_layer}``, 0 being the embedding output; default: the uniform
                map of :func:`uniform_layer_map` (needs ``student_layers`` and ``teacher_layers``).
            student_layers: the student's depth (to build or check the layer map).
            teacher_layers: the teacher's depth.
            student_width: the student's hidden size.
            teacher_width: the teacher's hidden size; a learned projection is added when it differs.
        """
        super().__init__()
        if kind not in ("mse", "cosine"):
            raise DomainBertError(f"hidden-state loss kind={kind!r}: expected 'mse' or 'cosine'")
        self.kind = kind
        self.layer_map = resolve_layer_map(layer_map, student_layers, teacher_layers, "HiddenStateLoss")
        differ = student_width is not None and teacher_width is not None and student_width != teacher_width
        self.projection = nn.Linear(student_width, teacher_width, bias=False) if differ else None

    def teacher_layers_used(self) -> list[int]:
        """The teacher ``hidden_states`` indexes this loss reads."""
        return sorted(set(self.layer_map.values()))

    def forward(self, student_out: Any, teacher_out: Any, batch: dict) -> torch.Tensor:
        hs, ht = student_out.hidden_states, teacher_out.hidden_states
        if hs is None or ht is None:
            raise DomainBertError("the hidden-state loss needs hidden_states from both models")
        mask = batch.get("attention_mask")
        losses = []
        for s_idx, t_idx in self.layer_map.items():
            if s_idx >= len(hs) or t_idx >= len(ht) or ht[t_idx] is None:
                raise DomainBertError(
                    f"layer_map {s_idx}: {t_idx}: the student has {len(hs) - 1} layers and the teacher "
                    f"{len(ht) - 1} (or that teacher layer is not in the teacher cache)"
                )
            a = hs[s_idx].float()
            if self.projection is not None:
                a = self.projection(a)
            b = ht[t_idx].float()
            if self.kind == "mse":
                per_token = (a - b).pow(2).mean(-1)
            else:
                per_token = 1.0 - F.cosine_similarity(a, b, dim=-1)
            losses.append(_masked_mean(per_token, mask.bool() if mask is not None else None))
        return torch.stack(losses).mean()


class AttentionLoss(DistillLoss):
    """Match student attention maps to the teacher's (TinyBERT): mean squared difference of the probabilities.

    For each pair ``(m, g(m))`` with ``m >= 1`` of the layer map, the student's layer-``m`` attention
    probabilities are compared with the teacher's layer ``g(m)`` over query/key pairs that are both real
    tokens. With different head counts the maps are first averaged over heads. Needs eager attention (the
    distillation module switches both models to it when this term is on).
    """

    needs_attentions = True

    def __init__(
        self,
        layer_map: dict[int, int] | None = None,
        student_layers: int | None = None,
        teacher_layers: int | None = None,
    ) -> None:
        """Configure the attention loss.

        Args:
            layer_map: ``{student_layer: teacher_layer}`` (1-based; an entry for 0, the embeddings, is skipped);
                default: the uniform map (needs ``student_layers`` and ``teacher_layers``).
            student_layers: the student's depth.
            teacher_layers: the teacher's depth.
        """
        super().__init__()
        layer_map = resolve_layer_map(layer_map, student_layers, teacher_layers, "AttentionLoss")
        self.layer_map = {k: v for k, v in layer_map.items() if k > 0}
        if not self.layer_map or any(v < 1 for v in self.layer_map.values()):
            raise DomainBertError(f"attention layer_map {layer_map}: map student layers >= 1 to teacher layers >= 1")

    def forward(self, student_out: Any, teacher_out: Any, batch: dict) -> torch.Tensor:
        sa, ta = student_out.attentions, teacher_out.attentions
        if not sa or not ta or sa[0] is None or ta[0] is None:
            raise DomainBertError("the attention loss needs attention maps from both models (eager attention)")
        mask = batch.get("attention_mask")
        losses = []
        for s_idx, t_idx in self.layer_map.items():
            a, b = sa[s_idx - 1].float(), ta[t_idx - 1].float()
            if a.shape[1] != b.shape[1]:
                a, b = a.mean(1, keepdim=True), b.mean(1, keepdim=True)
            diff = (a - b).pow(2)  # (B, H, S, S)
            if mask is None:
                losses.append(diff.mean())
                continue
            m = mask.bool()
            pair = (m[:, None, :, None] & m[:, None, None, :]).to(diff.dtype).expand_as(diff)
            losses.append((diff * pair).sum() / pair.sum().clamp_min(1.0))
        return torch.stack(losses).mean()


def build_loss(spec: dict) -> tuple[str, DistillLoss, float]:
    """Instantiate one extra loss term from ``{class_path, init_args, weight, name}``.

    ``class_path`` may be a bare class name of this module (``HiddenStateLoss``) or a full dotted path to
    any ``nn.Module`` with the ``forward(student_out, teacher_out, batch)`` signature.

    Returns:
        ``(name, module, weight)``; the name defaults to the class name in lower case.
    """
    spec = dict(spec)
    path = spec.pop("class_path", None)
    if not path:
        raise DomainBertError(f"extra_losses entry {spec}: needs a class_path")
    init_args = dict(spec.pop("init_args", None) or {})
    weight = float(spec.pop("weight", 1.0))
    name = spec.pop("name", None)
    if spec:
        raise DomainBertError(f"extra_losses entry {path}: unknown keys {sorted(spec)} (expected init_args, weight)")
    module_name, _, cls_name = path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name or __name__), cls_name)
    except (ImportError, AttributeError) as err:
        raise DomainBertError(f"extra_losses: cannot import {path!r}: {err}") from err
    try:
        loss = cls(**init_args)
    except TypeError as err:
        raise DomainBertError(f"extra_losses: {path}({init_args}) failed: {err}") from err
    if not isinstance(loss, nn.Module):
        raise DomainBertError(f"extra_losses: {path} is not an nn.Module")
    return name or cls_name.lower(), loss, weight
