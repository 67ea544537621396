"""The distillation objective: the weighted loss terms of ``model.losses``, and what they need from the models.

``model.losses`` lists :class:`~domainbert.distill.losses.LossTerm` s, each with its own ``weight`` (a term whose
weight is 0 is left out); without a list, :func:`default_losses`: ``0.5·KL(student/T ‖ teacher/T)·T² + 0.5·hard-label
loss`` at ``T = 2``. The terms are in :mod:`domainbert.distill.losses`; each is bound to the two models once the
student is built (:meth:`~domainbert.distill.losses.LossTerm.bind`).

A config names each entry as ``{class_path, init_args}`` (``weight`` and ``name`` among the init args), which
jsonargparse instantiates before :class:`~domainbert.distill.module.DistillationModule` sees it. The one other form
is what a checkpoint's hyper-parameters hold: the same ``{class_path, init_args}``, as a dict. :func:`build_loss`
rebuilds such a dict only when ``class_path`` names a ``LossTerm`` subclass: the class is resolved and checked before
anything is built, so a checkpoint cannot make domainbert build any other class (a model module whose arguments name
a folder of foreign code, say), and an entry whose arguments turn ``trust_remote_code`` on is refused.

Version 0.1.0 gave the terms as options of the module (``alpha``, ``beta``, ``gamma``, ``delta``, ``temperature``,
``hidden_loss``, ``layer_map``, ``extra_losses``); :mod:`domainbert.distill.released` reads those, in a config or
in a checkpoint's hyper-parameters, as the ``losses`` they mean.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torch import nn

from domainbert.distill import losses as built_in
from domainbert.distill.losses import LossTerm, ModelPair
from domainbert.distill.student import hidden_width, num_layers
from domainbert.errors import DomainBertError

#: Where the entries are, named in errors.
WHERE = "model.losses"


@dataclass
class Objective:
    """The loss terms by name and their weights."""

    terms: dict[str, nn.Module]
    weights: dict[str, float]

    def needs(self, flag: str, default: bool = False) -> bool:
        """True when some term sets ``flag`` (``needs_hidden_states``, ``needs_attentions``, ``needs_teacher``)."""
        return any(getattr(t, flag, default) for t in self.terms.values())


def default_losses() -> list[dict[str, Any]]:
    """The terms used without ``model.losses``: soft targets at ``T = 2`` and hard labels, weighted 0.5 each."""
    return [
        {"class_path": f"{built_in.__name__}.KLDivergenceLoss", "init_args": {"weight": 0.5, "temperature": 2.0}},
        {"class_path": f"{built_in.__name__}.HardLabelLoss", "init_args": {"weight": 0.5}},
    ]


def build_objective(
    terms: list[tuple[str, LossTerm, float]],
    student_config,
    teacher_config,
    *,
    multi_label: bool = False,
    default_map: dict[int, int] | None = None,
) -> Objective:
    """The terms of a weight above 0, bound to the two models; a name already taken gets ``_`` appended.

    Args:
        terms: ``(name, term, weight)`` of each entry (:func:`build_losses`).
        student_config: the student's config (its depth and width).
        teacher_config: the teacher's config.
        multi_label: the teacher is multi-label (the soft-target loss compares per-label sigmoids).
        default_map: the layer map of a student copied from teacher layers; else TinyBERT's uniform map.

    Raises:
        DomainBertError: no term has a weight above 0, or a term's layer map does not fit the models.
    """
    models = ModelPair(
        num_layers(student_config),
        num_layers(teacher_config),
        hidden_width(student_config),
        hidden_width(teacher_config),
        multi_label,
        default_map,
    )
    kept: dict[str, nn.Module] = {}
    weights: dict[str, float] = {}
    for name, term, weight in terms:
        if weight <= 0:
            continue
        term.bind(models)
        while name in kept:
            name += "_"
        kept[name], weights[name] = term, weight
    if not kept:
        raise DomainBertError(f"{WHERE}: no term has a weight above 0; give one a weight, e.g. KLDivergenceLoss")
    return Objective(kept, weights)


#: The keys of an entry given as a dict.
SPEC_KEYS = ("class_path", "init_args")
#: What an entry should look like, for error messages.
EXPECTED = "expected {class_path: <a LossTerm subclass>, init_args: {..., weight: <number>}}"


def normalise_loss_spec(entry: Any, where: str = WHERE) -> dict[str, Any]:
    """One ``losses`` entry given as a dict, checked, as ``{class_path, init_args}`` with a full class path.

    A class name without a module (``HiddenStateLoss``, as jsonargparse also reads it) becomes the full path of the
    loaded :class:`LossTerm` subclass of that name; nothing is imported for it.

    Args:
        entry: the entry, as a checkpoint's hyper-parameters hold it.
        where: the entry's place, named in errors (``model.losses[1]``).

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


def loss_class(path: str, where: str = WHERE) -> type[LossTerm]:
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
            f"{where}: {path} is not a class derived from domainbert.distill.losses.LossTerm; model.losses (and a "
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


def build_loss(entry: Any, where: str = WHERE) -> tuple[str, LossTerm, float]:
    """Build one ``losses`` entry given as ``{class_path, init_args}`` (a checkpoint's saved form).

    The class is resolved and checked to be a :class:`LossTerm` subclass (:func:`loss_class`) before it is built.

    Args:
        entry: ``{class_path, init_args}``, ``weight`` and ``name`` among the init args.
        where: the entry's place, named in errors.

    Returns:
        ``(name, term, weight)``; the name defaults to the class's ``default_name`` (``kl``, ``hard``...), else its
        name in lower case.

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


def build_losses(entries: list | None) -> list[tuple[str, LossTerm, float]]:
    """``(name, term, weight)`` of each ``losses`` entry: a :class:`LossTerm`, or a dict :func:`build_loss` reads.

    None gives the terms of :func:`default_losses`.

    Raises:
        DomainBertError: naming the entry, for an ``nn.Module`` that is no :class:`LossTerm` (subclass
            :class:`LossTerm`), or an entry :func:`build_loss` refuses.
    """
    if entries is not None and not isinstance(entries, list | tuple):
        raise DomainBertError(f"{WHERE}: got {entries!r}; expected a list of loss terms")
    out = []
    for i, entry in enumerate(default_losses() if entries is None else entries):
        where = f"{WHERE}[{i}]"
        if isinstance(entry, LossTerm):
            out.append((entry.term_name, entry, entry.weight))
        elif isinstance(entry, nn.Module):
            raise DomainBertError(
                f"{where}: {type(entry).__name__} is an nn.Module but no domainbert.distill.losses.LossTerm; subclass "
                "LossTerm (weight and name are its init args)"
            )
        else:
            out.append(build_loss(entry, where))
    return out


def loss_configs(entries: list | None) -> list[dict[str, Any]]:
    """The ``losses`` entries as ``{class_path, init_args}`` dicts, for the checkpoint's hyper-parameters.

    A :class:`LossTerm` gives the arguments it was built with (:meth:`LossTerm.config`); a dict is checked by
    :func:`normalise_loss_spec`. None gives :func:`default_losses`.
    """
    if entries is None:
        return default_losses()
    return [
        e.config() if isinstance(e, LossTerm) else normalise_loss_spec(e, f"{WHERE}[{i}]")
        for i, e in enumerate(entries)
    ]
