"""The distillation objective: the weighted loss terms, their layer map, and what they need from the models.

``α·KL(student/T ‖ teacher/T)·T² + β·hard-label loss + γ·hidden-state loss + δ·attention loss`` plus any
``extra_losses``, each with its own ``weight``; a built-in term whose weight is 0 is left out. The terms are in
:mod:`domainbert.distill.losses`.

``extra_losses`` entries are :class:`~domainbert.distill.losses.LossTerm` s. A config names each as
``{class_path, init_args}`` (``weight`` and ``name`` among the init args), which jsonargparse instantiates before
:class:`~domainbert.distill.module.DistillationModule` sees it. The one other form is what a checkpoint's
hyper-parameters hold: the same ``{class_path, init_args}``, as a dict. :func:`build_loss` rebuilds such a dict only
when ``class_path`` names a ``LossTerm`` subclass: the class is resolved and checked before anything is built, so a
checkpoint cannot make domainbert build any other class (a model module whose arguments name a folder of foreign
code, say), and an entry whose arguments turn ``trust_remote_code`` on is refused.
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
        extra_losses: more terms: :class:`~domainbert.distill.losses.LossTerm` s, or the ``{class_path,
            init_args}`` dicts a checkpoint saved (:func:`build_loss`); a name already taken gets ``_`` appended.
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


#: The keys of an entry given as a dict.
SPEC_KEYS = ("class_path", "init_args")
#: What an entry should look like, for error messages.
EXPECTED = "expected {class_path: <a LossTerm subclass>, init_args: {..., weight: <number>}}"


def normalise_loss_spec(entry: Any, where: str = "model.extra_losses") -> dict[str, Any]:
    """One ``extra_losses`` entry given as a dict, checked, as ``{class_path, init_args}`` with a full class path.

    A class name without a module (``HiddenStateLoss``, as jsonargparse also reads it) becomes the full path of the
    loaded :class:`LossTerm` subclass of that name; nothing is imported for it.

    Args:
        entry: the entry, as a checkpoint's hyper-parameters hold it.
        where: the entry's place, named in errors (``model.extra_losses[1]``).

    Raises:
        DomainBertError: naming ``where`` and what was expected, for an entry that is no mapping, has no
            ``class_path``, has keys other than those of :data:`SPEC_KEYS` (``weight`` beside ``init_args``, say),
            or names by a bare name no loaded loss term.

    Example:
    >>> normalise_loss_spec({"class_path": "HiddenStateLoss", "init_args": {"kind": "cosine", "weight": 0.3}})
    {'class_path': 'domainbert.distill.losses.HiddenStateLoss', 'init_args': {'kind': 'cosine', 'weight': 0.3}}
    """
    if not isinstance(entry, Mapping):
        raise DomainBertError(f"{where}: got {entry!r}; {EXPECTED}")
    path = entry.get("class_path")
    if not isinstance(path, str) or not path:
        raise DomainBertError(f"{where}: {dict(entry)} has no class_path; {EXPECTED}")
    unknown = sorted(set(entry) - set(SPEC_KEYS))
    if unknown:
        raise DomainBertError(f"{where} ({path}): unknown keys {unknown}; {EXPECTED}")
    init_args = entry.get("init_args") or {}
    if not isinstance(init_args, Mapping):
        raise DomainBertError(f"{where} ({path}): init_args is {init_args!r}; expected a mapping of argument names")
    full = path if "." in path else _qualified(_term_named(path, where))
    return {"class_path": full, "init_args": dict(init_args)}


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _loaded_terms() -> list[type]:
    """Every :class:`LossTerm` subclass loaded so far (what jsonargparse resolves a bare class name among)."""
    found, todo = [], list(LossTerm.__subclasses__())
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return found


def _term_named(name: str, where: str) -> type:
    """The loaded :class:`LossTerm` subclass called ``name``."""
    matches = {_qualified(c): c for c in _loaded_terms() if c.__name__ == name}
    if len(matches) != 1:
        why = "is no built-in loss term" if not matches else f"names several loss terms ({', '.join(sorted(matches))})"
        raise DomainBertError(
            f"{where}: class_path {name!r} {why} ({', '.join(built_in_terms())}); give a full class path such as "
            "mypackage.losses.MyLoss"
        )
    return next(iter(matches.values()))


def built_in_terms() -> list[str]:
    """The names of the loss terms in :mod:`domainbert.distill.losses`."""
    return sorted(
        name
        for name, obj in vars(built_in).items()
        if isinstance(obj, type) and issubclass(obj, LossTerm) and obj is not LossTerm
    )


def loss_class(path: str, where: str = "model.extra_losses") -> type[LossTerm]:
    """The :class:`LossTerm` subclass that the full class path ``path`` names; nothing else is ever returned.

    The module is imported (an installed package's, as jsonargparse would import it); the class is checked before
    anything is built from it.

    Raises:
        DomainBertError: naming ``where``, for a path that cannot be imported or names no ``LossTerm`` subclass.
    """
    module_name, _, cls_name = path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), cls_name)
    except (ImportError, AttributeError, ValueError) as err:
        raise DomainBertError(
            f"{where}: cannot import {path!r} ({err}); expected the class path of an installed LossTerm subclass"
        ) from err
    if not (isinstance(cls, type) and issubclass(cls, LossTerm)):
        raise DomainBertError(
            f"{where}: {path} is not a class derived from domainbert.losses.LossTerm; extra_losses (and a "
            "checkpoint's saved ones) are built only from LossTerm subclasses"
        )
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


def build_loss(entry: Any, where: str = "model.extra_losses") -> tuple[str, LossTerm, float]:
    """Build one ``extra_losses`` entry given as ``{class_path, init_args}`` (a checkpoint's saved form).

    The class is resolved and checked to be a :class:`LossTerm` subclass (:func:`loss_class`) before it is built.

    Args:
        entry: ``{class_path, init_args}``, ``weight`` and ``name`` among the init args.
        where: the entry's place, named in errors.

    Returns:
        ``(name, term, weight)``; the name defaults to the class name in lower case.

    Raises:
        DomainBertError: naming ``where``, for an entry :func:`normalise_loss_spec` refuses, a class that cannot be
            imported or is no ``LossTerm`` subclass, ``trust_remote_code`` set in its arguments (never taken from a
            checkpoint), or arguments its ``__init__`` does not take.
    """
    spec = normalise_loss_spec(entry, where)
    path, init_args = spec["class_path"], spec["init_args"]
    cls = loss_class(path, where)
    if init_args.get("trust_remote_code"):
        raise DomainBertError(
            f"{where} ({path}): init_args set trust_remote_code, which domainbert never takes from a checkpoint or "
            "a saved entry; build the term yourself if you trust its code"
        )
    try:
        term = cls(**init_args)
    except DomainBertError as err:
        raise DomainBertError(f"{where} ({path}): {err}") from err
    except TypeError as err:
        raise DomainBertError(
            f"{where}: {path}({', '.join(f'{k}={v!r}' for k, v in init_args.items())}) failed: {err}; "
            f"its arguments are {', '.join(_accepted(cls)) or 'none'}"
        ) from err
    return term.term_name, term, term.weight


def build_extra_losses(entries: list | None) -> list[tuple[str, LossTerm, float]]:
    """``(name, term, weight)`` of each ``extra_losses`` entry: a :class:`LossTerm`, or a dict :func:`build_loss` reads.

    Raises:
        DomainBertError: naming the entry, for an ``nn.Module`` that is no :class:`LossTerm` (subclass
            :class:`LossTerm`), or an entry :func:`build_loss` refuses.
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
                "(weight and name are its init args)"
            )
        else:
            out.append(build_loss(entry, where))
    return out


def loss_configs(entries: list | None) -> list[dict[str, Any]] | None:
    """The ``extra_losses`` entries as ``{class_path, init_args}`` dicts, for the checkpoint's hyper-parameters.

    A :class:`LossTerm` gives the arguments it was built with (:meth:`LossTerm.config`); a dict is checked by
    :func:`normalise_loss_spec`. None stays None.
    """
    if entries is None:
        return None
    return [
        e.config() if isinstance(e, LossTerm) else normalise_loss_spec(e, f"model.extra_losses[{i}]")
        for i, e in enumerate(entries)
    ]
