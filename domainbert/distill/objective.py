"""The distillation objective: the weighted loss terms, their layer map, and what they need from the models.

``α·KL(student/T ‖ teacher/T)·T² + β·hard-label loss + γ·hidden-state loss + δ·attention loss`` plus any
``extra_losses``, each with its own ``weight``; a built-in term whose weight is 0 is left out. The terms are in
:mod:`domainbert.distill.losses`.

``extra_losses`` entries: jsonargparse instantiates an entry written ``{class_path, init_args}`` (``weight`` and
``name`` among the init args) before :class:`~domainbert.distill.module.DistillationModule` sees it. Older configs
and the hyper-parameters of older checkpoints wrote ``{class_path, init_args, weight, name}``, with ``weight`` and
``name`` beside ``init_args``, and ``class_path`` could be a bare class name of :mod:`domainbert.distill.losses`
(``HiddenStateLoss``); such an entry reaches the module as a dict, is rewritten to today's form by
:func:`normalise_loss_spec` and built by :func:`build_loss`. A class that is an ``nn.Module`` but no
:class:`~domainbert.distill.losses.LossTerm` (the older contract: any module with ``forward(student_out,
teacher_out, batch)``) still loads from a dict, its weight and name kept beside it.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torch import nn

from domainbert.distill import losses as built_in
from domainbert.distill.losses import (
    AttentionLoss,
    HardLabelLoss,
    HiddenStateLoss,
    KLDivergenceLoss,
    LossTerm,
    check_layer_map,
    check_name,
    check_weight,
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
            ``{class_path, init_args, weight}`` form (:func:`build_loss`); a name
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


#: The keys of an entry in the older form.
SPEC_KEYS = ("class_path", "init_args", "weight", "name")
#: What an entry should look like, for error messages.
EXPECTED = "expected {class_path: <a LossTerm subclass>, init_args: {..., weight: <number>}}"


def normalise_loss_spec(entry: Any, where: str = "model.extra_losses") -> dict[str, Any]:
    """Rewrite one ``extra_losses`` entry, today's form or an older one, as ``{class_path, init_args}``.

    ``weight`` and ``name`` given beside ``init_args`` move into it; a bare class name of
    :mod:`domainbert.distill.losses` becomes its full path; a string is a class path without arguments.

    Args:
        entry: the entry, as a config or a checkpoint's hyper-parameters hold it.
        where: the entry's place, named in errors (``model.extra_losses[1]``).

    Raises:
        DomainBertError: naming ``where`` and what was expected, for an entry that is no mapping, has no
            ``class_path``, has keys other than those of :data:`SPEC_KEYS`, or gives one setting twice.

    Example:
    >>> normalise_loss_spec({"class_path": "HiddenStateLoss", "init_args": {"kind": "cosine"}, "weight": 0.3})
    {'class_path': 'domainbert.distill.losses.HiddenStateLoss', 'init_args': {'kind': 'cosine', 'weight': 0.3}}
    """
    if isinstance(entry, str):
        entry = {"class_path": entry}
    if not isinstance(entry, Mapping):
        raise DomainBertError(f"{where}: got {entry!r}; {EXPECTED}")
    spec = dict(entry)
    path = spec.pop("class_path", None)
    if not isinstance(path, str) or not path:
        raise DomainBertError(f"{where}: {dict(entry)} has no class_path; {EXPECTED}")
    init_args = spec.pop("init_args", None) or {}
    if not isinstance(init_args, Mapping):
        raise DomainBertError(f"{where} ({path}): init_args is {init_args!r}; expected a mapping of argument names")
    init_args = dict(init_args)
    for key in ("weight", "name"):
        if key not in spec:
            continue
        value = spec.pop(key)
        if key in init_args and init_args[key] != value:
            raise DomainBertError(
                f"{where} ({path}): {key} is given twice, {value!r} beside init_args and {init_args[key]!r} in it; "
                "give it once, in init_args"
            )
        init_args[key] = value
    if spec:
        raise DomainBertError(f"{where} ({path}): unknown keys {sorted(spec)}; {EXPECTED}")
    return {"class_path": _full_path(path, where), "init_args": init_args}


def _full_path(path: str, where: str) -> str:
    """``path``, or the full path of a bare class name of :mod:`domainbert.distill.losses`."""
    if "." in path:
        return path
    cls = getattr(built_in, path, None)
    if not (isinstance(cls, type) and issubclass(cls, LossTerm)):
        names = ", ".join(built_in_terms())
        raise DomainBertError(
            f"{where}: class_path {path!r} is no built-in loss term ({names}); give a full class path such as "
            "mypackage.losses.MyLoss"
        )
    return f"{built_in.__name__}.{path}"


def built_in_terms() -> list[str]:
    """The names of the loss terms in :mod:`domainbert.distill.losses`, for bare class names in configs."""
    return sorted(
        name
        for name, obj in vars(built_in).items()
        if isinstance(obj, type) and issubclass(obj, LossTerm) and obj is not LossTerm
    )


def _import(path: str, where: str) -> type:
    """The class ``path`` names."""
    module_name, _, cls_name = path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), cls_name)
    except (ImportError, AttributeError) as err:
        raise DomainBertError(
            f"{where}: cannot import {path!r} ({err}); expected the class path of an installed LossTerm subclass"
        ) from err
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise DomainBertError(f"{where}: {path} is not a class derived from domainbert.losses.LossTerm")
    return cls


def _accepted(cls: type) -> list[str]:
    """The keyword arguments ``cls`` takes, its :class:`LossTerm` base's included, for error messages."""
    names = []
    for klass in cls.__mro__:
        if klass in (nn.Module, object) or "__init__" not in vars(klass):
            continue
        params = inspect.signature(klass.__init__).parameters.values()
        names += [p.name for p in params if p.name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    return list(dict.fromkeys(names))


def build_loss(entry: Any, where: str = "model.extra_losses") -> tuple[str, nn.Module, float]:
    """Instantiate one ``extra_losses`` entry given as a dict or a class path (today's form or an older one).

    Args:
        entry: ``{class_path, init_args}``, the older ``{class_path, init_args, weight, name}`` or a class path.
        where: the entry's place, named in errors.

    Returns:
        ``(name, module, weight)``; the name defaults to the class name in lower case.

    Raises:
        DomainBertError: naming ``where``, for an entry :func:`normalise_loss_spec` refuses, a class that cannot be
            imported or is no ``nn.Module``, or arguments its ``__init__`` does not take.
    """
    spec = normalise_loss_spec(entry, where)
    path, init_args = spec["class_path"], dict(spec["init_args"])
    cls = _import(path, where)
    accepted = _accepted(cls) if issubclass(cls, LossTerm) else []
    # an older term (a plain nn.Module, or a subclass whose __init__ takes neither): weight and name stay beside it
    kept = {k: init_args.pop(k) for k in ("weight", "name") if k in init_args and k not in accepted}
    weight = check_weight(kept.get("weight", 1.0), f"{where} ({path})")
    name = check_name(kept.get("name"), f"{where} ({path})")
    try:
        module = cls(**init_args)
    except DomainBertError as err:
        raise DomainBertError(f"{where} ({path}): {err}") from err
    except TypeError as err:
        raise DomainBertError(
            f"{where}: {path}({', '.join(f'{k}={v!r}' for k, v in init_args.items())}) failed: {err}; "
            f"its arguments are {', '.join(_accepted(cls)) or 'none'}"
        ) from err
    if isinstance(module, LossTerm):
        module.weight = weight if "weight" in kept else module.weight
        module.name = name if "name" in kept else module.name
        return module.term_name, module, module.weight
    return name or cls.__name__.lower(), module, weight


def build_extra_losses(entries: list | None) -> list[tuple[str, nn.Module, float]]:
    """``(name, module, weight)`` of each ``extra_losses`` entry: a :class:`LossTerm`, or what :func:`build_loss` reads.

    Raises:
        DomainBertError: naming the entry, for an ``nn.Module`` that is no :class:`LossTerm` (give it as a dict, or
            subclass :class:`LossTerm`), or an entry :func:`build_loss` refuses.
    """
    if entries is not None and not isinstance(entries, list | tuple):
        raise DomainBertError(f"model.extra_losses: got {entries!r}; expected a list of loss terms")
    out = []
    for i, entry in enumerate(entries or []):
        where = f"model.extra_losses[{i}]"
        if isinstance(entry, LossTerm):
            out.append((entry.term_name, entry, entry.weight))
        elif isinstance(entry, nn.Module):
            raise DomainBertError(
                f"{where}: {type(entry).__name__} is an nn.Module but no domainbert.losses.LossTerm; subclass LossTerm "
                "(weight and name are its init args) or give {class_path, init_args}"
            )
        else:
            out.append(build_loss(entry, where))
    return out


def loss_configs(entries: list | None) -> list[dict[str, Any]] | None:
    """The ``extra_losses`` entries as ``{class_path, init_args}`` dicts, for the checkpoint's hyper-parameters.

    A :class:`LossTerm` gives the arguments it was built with (:meth:`LossTerm.config`); a dict or class path is
    rewritten by :func:`normalise_loss_spec`. None stays None.
    """
    if entries is None:
        return None
    return [
        e.config() if isinstance(e, LossTerm) else normalise_loss_spec(e, f"model.extra_losses[{i}]")
        for i, e in enumerate(entries)
    ]
