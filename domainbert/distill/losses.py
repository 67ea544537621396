"""Distillation loss terms: small ``nn.Module`` s sharing one interface, :class:`LossTerm`.

Every term is called as ``loss(student_out, teacher_out, batch) -> Tensor`` (a scalar), where the two
outputs are Hugging Face ``ModelOutput`` s (or anything with ``logits``, ``hidden_states`` and
``attentions`` attributes) and ``batch`` holds at least ``attention_mask`` and, for the hard-label loss,
``labels``. A term says which model outputs it needs through ``needs_hidden_states`` and
``needs_attentions``, so the distillation module asks the models for them only when some term uses them.

The distillation loss is the weighted sum of the terms a config lists under ``model.losses``, each by
``class_path`` and ``init_args`` (its ``weight`` among them), which jsonargparse instantiates; without a list,
``0.5·KL(student/T ‖ teacher/T)·T² + 0.5·hard-label loss`` at ``T = 2`` (:mod:`domainbert.distill.objective`)::

    model:
      init_args:
        losses:
          - class_path: KLDivergenceLoss
            init_args: {weight: 0.5, temperature: 2.0}
          - class_path: HardLabelLoss
            init_args: {weight: 0.5}
          - class_path: HiddenStateLoss
            init_args: {weight: 0.1, kind: cosine}

What a term learns of the two models (their depths and widths, the layers a copied student came from, whether
the teacher is multi-label) it is given by :meth:`LossTerm.bind` once the student is built, so a config names
only the term's own options. A new term is one :class:`LossTerm` subclass (and its test); ``domainbert fit
--model distill --model.losses.help <ClassName>`` lists its arguments.

Layer maps use one convention everywhere: ``{student_layer: teacher_layer}`` with 1-based encoder layer
numbers and 0 for the embedding output, i.e. indexes into ``hidden_states`` (TinyBERT's ``m -> g(m)``).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

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


def _early_layer_map(
    layer_map: dict[int, int] | None, student_layers: int | None, teacher_layers: int | None
) -> dict[int, int] | None:
    """The layer map known before the term is bound; None when it waits for :meth:`LossTerm.bind`.

    ``layer_map`` (checked where both depths are given), else the uniform map of both depths.
    """
    if layer_map is None and (student_layers is None or teacher_layers is None):
        return None
    return resolve_layer_map(layer_map, student_layers, teacher_layers, "layer_map")


def _bound_map(layer_map: dict[int, int] | None, who: str) -> dict[int, int]:
    """``layer_map``, or an error saying the term was never bound to the models."""
    if layer_map is None:
        raise DomainBertError(
            f"{who} has no layer map yet: give it a layer_map, or student_layers and teacher_layers, or let the "
            "distillation module bind it to the models"
        )
    return layer_map


def _attention_pairs(layer_map: dict[int, int]) -> dict[int, int]:
    """The attention loss's pairs: the map without the embeddings (0), every layer 1 or above."""
    pairs = {k: v for k, v in layer_map.items() if k > 0}
    if not pairs or any(v < 1 for v in pairs.values()):
        raise DomainBertError(f"attention layer_map {layer_map}: map student layers >= 1 to teacher layers >= 1")
    return pairs


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


def _init_args(term: nn.Module) -> dict[str, Any]:
    """The arguments ``term`` was built with: those of the outermost ``__init__`` now running on it, by name.

    Called from :class:`LossTerm`'s ``__init__``, which each subclass's ``__init__`` calls: the outermost frame is
    the most derived class's, holding every argument it was given (``**kwargs`` flattened), as Lightning's
    ``save_hyperparameters`` reads them.
    """
    frame, outer = inspect.currentframe(), None
    try:
        frame = frame.f_back if frame is not None else None
        while frame is not None and frame.f_code.co_name == "__init__" and frame.f_locals.get("self") is term:
            outer, frame = frame, frame.f_back
        if outer is None:
            return {}
        info = inspect.getargvalues(outer)
        given = {name: info.locals[name] for name in info.args[1:] if name in info.locals}
        if info.keywords:
            given.update(info.locals.get(info.keywords) or {})
        return given
    finally:
        del frame, outer


def check_weight(weight: Any, who: str) -> float:
    """``weight`` as a float; a :class:`DomainBertError` naming ``who`` unless it is a number >= 0."""
    if not isinstance(weight, int | float) or isinstance(weight, bool) or not weight >= 0:
        raise DomainBertError(f"{who}: weight={weight!r}: expected a number >= 0")
    return float(weight)


def check_name(name: Any, who: str) -> str | None:
    """``name``; a :class:`DomainBertError` naming ``who`` unless it is None or a name without dots."""
    if name is not None and (not isinstance(name, str) or not name or "." in name):
        raise DomainBertError(f"{who}: name={name!r}: expected a name without dots, e.g. 'hidden2'")
    return name


@dataclass(frozen=True)
class ModelPair:
    """What a loss term learns of the student and the teacher once the student is built (:meth:`LossTerm.bind`)."""

    student_layers: int
    """The student's encoder depth."""
    teacher_layers: int
    """The teacher's encoder depth."""
    student_width: int
    """The student's hidden size."""
    teacher_width: int
    """The teacher's hidden size."""
    multi_label: bool = False
    """The teacher is a multi-label classifier (per-label sigmoids)."""
    default_map: dict[int, int] | None = None
    """The layer map of a student copied from teacher layers; None: TinyBERT's uniform map."""

    def layer_map(self, given: dict[int, int] | None) -> dict[int, int]:
        """``given`` checked against both depths, or the default map (a copied student's, else the uniform one)."""
        if given is not None:
            return check_layer_map(given, self.student_layers, self.teacher_layers)
        return dict(self.default_map or uniform_layer_map(self.student_layers, self.teacher_layers))


class LossTerm(nn.Module):
    """Base of the distillation loss terms: ``forward(student_out, teacher_out, batch) -> scalar Tensor``.

    A subclass implements :meth:`forward`, sets the ``needs_*`` flags it needs, and passes ``**kwargs`` on to
    ``super().__init__`` so that configs can give every term a ``weight`` and a ``name``; one that reads the
    models' shapes overrides :meth:`bind`. Listed in ``model.losses`` by ``class_path`` (and ``init_args``), it is
    instantiated by jsonargparse, which checks its arguments against its ``__init__``.

    Example, a term that pulls the student's logits towards the teacher's (mean absolute difference):

    >>> import torch
    >>> from types import SimpleNamespace
    >>> class LogitL1(LossTerm):
    ...     '''Mean absolute difference of the logits.'''
    ...
    ...     def forward(self, student_out, teacher_out, batch):
    ...         return (student_out.logits - teacher_out.logits).abs().mean()
    >>> term = LogitL1(weight=0.5)
    >>> student = SimpleNamespace(logits=torch.tensor([[1.0, 2.0], [0.0, 0.0]]))
    >>> teacher = SimpleNamespace(logits=torch.tensor([[1.0, 0.0], [1.0, 1.0]]))
    >>> term(student, teacher, {"attention_mask": torch.ones(2, 4)})
    tensor(1.)
    >>> term.weight, term.name
    (0.5, None)
    >>> term.config()  # doctest: +ELLIPSIS
    {'class_path': '...LogitL1', 'init_args': {'weight': 0.5, 'name': None}}
    """

    #: the term reads ``hidden_states`` of both models
    needs_hidden_states = False
    #: the term reads ``attentions`` of both models (eager attention)
    needs_attentions = False
    #: the term reads the teacher's output at all (the hard-label loss does not)
    needs_teacher = True
    #: the name in the logs when the term is given none (``train/loss_<name>``); None: the class name in lower case
    default_name: ClassVar[str | None] = None

    def __init__(self, weight: float = 1.0, name: str | None = None) -> None:
        """Set the term's weight and name.

        Args:
            weight: the term's factor in the distillation loss (>= 0).
            name: the term's name in the logs (``train/loss_<name>``); default: the class's ``default_name``, else
                its name in lower case.
        """
        super().__init__()
        self.weight = check_weight(weight, type(self).__name__)
        self.name = check_name(name, type(self).__name__)
        self._init_args = _init_args(self)

    @property
    def term_name(self) -> str:
        """The name in the logs: ``name``, else the class's ``default_name``, else the class name in lower case."""
        return self.name or self.default_name or type(self).__name__.lower()

    def bind(self, models: ModelPair) -> None:
        """Learn what the term needs of the two models (layer maps, widths); called once the student is built.

        The base class needs nothing; a subclass that reads the models' shapes overrides this.
        """

    def config(self) -> dict[str, Any]:
        """``{class_path, init_args}`` of this term, as configs and checkpoints' hyper-parameters hold it."""
        cls = type(self)
        return {"class_path": f"{cls.__module__}.{cls.__qualname__}", "init_args": dict(self._init_args)}

    def forward(self, student_out: Any, teacher_out: Any, batch: dict) -> torch.Tensor:  # pragma: no cover
        """The loss of a batch."""
        raise NotImplementedError


#: The name the terms' base had before :class:`LossTerm`; code that subclasses it keeps working.
DistillLoss = LossTerm


class KLDivergenceLoss(LossTerm):
    """Soft-target loss of Hinton et al. (2015): ``KL(softmax(t/T) ‖ softmax(s/T)) · T²``.

    Averaged over examples (``batchmean``); for per-token logits over the positions that count (see
    :func:`token_mask`: for masked-LM, the masked positions only). Multi-label models compare per-label
    Bernoulli distributions ``sigmoid(logit/T)`` instead, summed over labels.

    Example: a student that agrees with the teacher costs nothing, an undecided one does.

    >>> import torch
    >>> from types import SimpleNamespace
    >>> kl = KLDivergenceLoss(temperature=1.0, weight=0.5)
    >>> teacher = SimpleNamespace(logits=torch.tensor([[2.0, 0.0]]))
    >>> kl(teacher, teacher, {})
    tensor(0.)
    >>> kl(SimpleNamespace(logits=torch.zeros(1, 2)), teacher, {})
    tensor(0.3278)
    """

    default_name = "kl"

    def __init__(self, temperature: float = 2.0, multi_label: bool | None = None, **kwargs: Any) -> None:
        """Configure the soft-target loss.

        Args:
            temperature: softmax temperature ``T`` (> 0); the loss is scaled by ``T²`` so that its gradients keep
                their size as ``T`` changes.
            multi_label: compare sigmoid (Bernoulli) outputs per label instead of one softmax; None: as the
                teacher is (multi-label or not), once bound.
            **kwargs: ``weight`` and ``name``, as :class:`LossTerm` takes them.
        """
        super().__init__(**kwargs)
        if temperature <= 0:
            raise DomainBertError(f"temperature={temperature}: expected a positive number")
        self.temperature = float(temperature)
        self.multi_label = multi_label

    def bind(self, models: ModelPair) -> None:
        """Compare per-label sigmoids for a multi-label teacher, unless ``multi_label`` was given."""
        if self.multi_label is None:
            self.multi_label = models.multi_label

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


class HardLabelLoss(LossTerm):
    """The ordinary supervised loss on the gold labels: cross-entropy, or binary cross-entropy for multi-label.

    Cross-entropy ignores labels of -100 (padding, non-first sub-words, unmasked tokens).
    """

    needs_teacher = False
    default_name = "hard"

    def __init__(self, kind: Literal["auto", "ce", "bce"] = "auto", **kwargs: Any) -> None:
        """Choose the loss.

        Args:
            kind: ``ce`` (cross-entropy), ``bce`` (binary cross-entropy on multi-hot labels) or ``auto``
                (``bce`` when the labels are floats shaped like the logits, else ``ce``).
            **kwargs: ``weight`` and ``name``, as :class:`LossTerm` takes them.
        """
        super().__init__(**kwargs)
        self.kind = kind

    def forward(self, student_out: Any, teacher_out: Any, batch: dict) -> torch.Tensor:
        logits = student_out.logits.float()
        labels = batch.get("labels")
        if labels is None:
            raise DomainBertError("the hard-label loss needs labels in the batch; drop HardLabelLoss from model.losses")
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


class HiddenStateLoss(LossTerm):
    """Match student hidden states to the teacher's, layer by layer (TinyBERT, DistilBERT's cosine loss).

    Each pair ``(m, g(m))`` of the layer map compares student ``hidden_states[m]``, projected to the
    teacher's width by a learned linear map when the widths differ (one map shared by all layers, as in
    TinyBERT), with teacher ``hidden_states[g(m)]`` at the non-padding tokens: ``mse`` is the mean squared
    difference per element, ``cosine`` is ``1 - cos`` per token. The result is the mean over pairs, so the
    weight does not depend on the depth. Given neither a ``layer_map`` nor both depths, the map and the projection
    are set when the term is bound to the models (:meth:`bind`).
    """

    needs_hidden_states = True
    default_name = "hidden"

    def __init__(
        self,
        kind: Literal["mse", "cosine"] = "mse",
        layer_map: dict[int, int] | None = None,
        student_layers: int | None = None,
        teacher_layers: int | None = None,
        student_width: int | None = None,
        teacher_width: int | None = None,
        **kwargs: Any,
    ) -> None:
        """Configure the hidden-state loss.

        Args:
            kind: ``mse`` or ``cosine``.
            layer_map: ``{student_layer: teacher_layer}``, 0 being the embedding output; default: the layers a
                copied student came from, else the uniform map of :func:`uniform_layer_map`.
            student_layers: the student's depth (to build or check the layer map).
            teacher_layers: the teacher's depth.
            student_width: the student's hidden size.
            teacher_width: the teacher's hidden size; a learned projection is added when it differs.
            **kwargs: ``weight`` and ``name``, as :class:`LossTerm` takes them.
        """
        super().__init__(**kwargs)
        if kind not in ("mse", "cosine"):
            raise DomainBertError(f"hidden-state loss kind={kind!r}: expected 'mse' or 'cosine'")
        self.kind = kind
        self.given_map = layer_map
        self.layer_map = _early_layer_map(layer_map, student_layers, teacher_layers)
        self.projection = None
        self._project(student_width, teacher_width)

    def _project(self, student_width: int | None, teacher_width: int | None) -> None:
        """Add the learned projection from the student's width to the teacher's, when they differ."""
        differ = student_width is not None and teacher_width is not None and student_width != teacher_width
        if differ and self.projection is None:
            self.projection = nn.Linear(student_width, teacher_width, bias=False)

    def bind(self, models: ModelPair) -> None:
        """Check the layer map against both depths (or take the default map); project across widths."""
        self.layer_map = models.layer_map(self.given_map)
        self._project(models.student_width, models.teacher_width)

    def teacher_layers_used(self) -> list[int]:
        """The teacher ``hidden_states`` indexes this loss reads."""
        return sorted(set(_bound_map(self.layer_map, "HiddenStateLoss").values()))

    def forward(self, student_out: Any, teacher_out: Any, batch: dict) -> torch.Tensor:
        hs, ht = student_out.hidden_states, teacher_out.hidden_states
        if hs is None or ht is None:
            raise DomainBertError("the hidden-state loss needs hidden_states from both models")
        mask = batch.get("attention_mask")
        losses = []
        for s_idx, t_idx in _bound_map(self.layer_map, "HiddenStateLoss").items():
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


class AttentionLoss(LossTerm):
    """Match student attention maps to the teacher's (TinyBERT): mean squared difference of the probabilities.

    For each pair ``(m, g(m))`` with ``m >= 1`` of the layer map, the student's layer-``m`` attention
    probabilities are compared with the teacher's layer ``g(m)`` over query/key pairs that are both real
    tokens. With different head counts the maps are first averaged over heads. Needs eager attention (the
    distillation module switches both models to it when this term is on).
    """

    needs_attentions = True
    default_name = "attention"

    def __init__(
        self,
        layer_map: dict[int, int] | None = None,
        student_layers: int | None = None,
        teacher_layers: int | None = None,
        **kwargs: Any,
    ) -> None:
        """Configure the attention loss.

        Args:
            layer_map: ``{student_layer: teacher_layer}`` (1-based; an entry for 0, the embeddings, is skipped);
                default: the layers a copied student came from, else the uniform map.
            student_layers: the student's depth.
            teacher_layers: the teacher's depth.
            **kwargs: ``weight`` and ``name``, as :class:`LossTerm` takes them.
        """
        super().__init__(**kwargs)
        self.given_map = layer_map
        self.layer_map = _early_layer_map(layer_map, student_layers, teacher_layers)
        if self.layer_map is not None:
            self.layer_map = _attention_pairs(self.layer_map)

    def bind(self, models: ModelPair) -> None:
        """Check the layer map against both depths, or take the default map."""
        self.layer_map = _attention_pairs(models.layer_map(self.given_map))

    def forward(self, student_out: Any, teacher_out: Any, batch: dict) -> torch.Tensor:
        sa, ta = student_out.attentions, teacher_out.attentions
        if not sa or not ta or sa[0] is None or ta[0] is None:
            raise DomainBertError("the attention loss needs attention maps from both models (eager attention)")
        mask = batch.get("attention_mask")
        losses = []
        for s_idx, t_idx in _bound_map(self.layer_map, "AttentionLoss").items():
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
