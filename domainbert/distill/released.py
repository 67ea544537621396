"""Version 0.1.0's loss options, read as the ``model.losses`` they mean: one translation, at the edge.

0.1.0 gave the distillation loss as options of the module: ``alpha``, ``beta``, ``gamma`` and ``delta`` (the
weights of the soft-target, hard-label, hidden-state and attention terms), ``temperature``, ``hidden_loss``,
``layer_map`` and ``extra_losses``. Today the terms are entries of ``model.losses`` like any other
(:mod:`domainbert.distill.objective`). :func:`from_released` turns the old options into those entries; it is applied
where they come in:

- a config's text (a ``--config`` file or YAML string, a pipeline stage's config): :func:`released_text`, called by
  the command line's parser (:class:`domainbert.cli.lightning_cli.ReleasedFormsParser`), which also reads a
  checkpoint's hyper-parameters that ``--ckpt_path`` merges (:func:`released_config`);
- a checkpoint's hyper-parameters read by ``load_from_checkpoint``
  (:meth:`domainbert.distill.module.DistillationModule.load_from_checkpoint`).

Each translation gives a one-line ``FutureWarning`` saying what the options were read as. Only plain data is
produced here (``{class_path, init_args}`` dicts): the entries are then checked and built as any ``losses`` entry
is, so a checkpoint's ``extra_losses`` still build nothing but :class:`~domainbert.distill.losses.LossTerm`
subclasses.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping
from typing import Any

import yaml

from domainbert.core.renames import current_path
from domainbert.errors import DomainBertError

#: The module of the built-in loss terms (not imported here: this module stays light for the command line).
BUILT_IN = "domainbert.distill.losses"


#: The options of version 0.1.0 that ``model.losses`` replaces, with their defaults then.
RELEASED = {
    "temperature": 2.0,
    "alpha": 0.5,
    "beta": 0.5,
    "gamma": 0.0,
    "delta": 0.0,
    "hidden_loss": "mse",
    "layer_map": None,
    "extra_losses": None,
}
#: The class path of the distillation module, as configs and checkpoints name it (0.1.0 or now).
MODULE_NAME = "DistillationModule"


def from_released(init_args: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The module's arguments with the 0.1.0 loss options (:data:`RELEASED`) read as the ``losses`` they mean.

    ``alpha``, ``beta``, ``gamma`` and ``delta`` become the weights of ``KLDivergenceLoss`` (at ``temperature``),
    ``HardLabelLoss``, ``HiddenStateLoss`` (``hidden_loss``, ``layer_map``) and ``AttentionLoss`` (``layer_map``),
    a weight of 0 leaving its term out; each ``extra_losses`` entry follows, its ``weight`` and ``name`` moved into
    its ``init_args`` (its name, as then, the class name in lower case). Options left out take their 0.1.0 defaults.
    Nothing is imported or built here: the entries are checked as any ``losses`` entry is (:func:`build_loss`).
    Arguments naming none of these options come back as they are; otherwise a ``FutureWarning`` says what was read.

    Args:
        init_args: a config's ``model.init_args``, or a checkpoint's hyper-parameters.
        where: the config or checkpoint, named in the warning and in errors.

    Raises:
        DomainBertError: ``losses`` is given beside the 0.1.0 options.

    >>> terms = from_released({"teacher": "t", "gamma": 0.1}, "old.yaml")["losses"]
    >>> terms[2]
    {'class_path': 'domainbert.distill.losses.HiddenStateLoss', 'init_args': {'weight': 0.1, 'kind': 'mse'}}
    """
    given = [key for key in RELEASED if key in init_args]
    if not given:
        return dict(init_args)
    if init_args.get("losses") is not None:
        raise DomainBertError(
            f"{where}: sets model.losses and {', '.join(given)}, the 0.1.0 form of it; keep model.losses only"
        )
    losses = _released_terms({**RELEASED, **{key: init_args[key] for key in given}})
    out: dict[str, Any] = {}
    for key, value in init_args.items():  # losses where the first old option stood
        if key not in RELEASED and key != "losses":
            out[key] = value
        elif "losses" not in out:
            out["losses"] = losses
    shown = ", ".join(_shown(entry) for entry in losses)
    message = f"{where}: the 0.1.0 loss options ({', '.join(given)}) are read as model.losses: [{shown}]; write those"
    warnings.warn(message, FutureWarning, stacklevel=1)  # attributed to this line: shown once per message
    return out


def _shown(entry: Any) -> str:
    """``KLDivergenceLoss(weight=0.5, temperature=2.0)``: an entry as the warning shows it."""
    if not isinstance(entry, Mapping):
        return repr(entry)
    init_args = entry.get("init_args") or {}
    arguments = ", ".join(f"{k}={v!r}" for k, v in init_args.items()) if isinstance(init_args, Mapping) else ""
    return f"{str(entry.get('class_path')).rsplit('.', 1)[-1]}({arguments})"


def _released_terms(values: Mapping[str, Any]) -> list[Any]:
    """The ``losses`` entries that the 0.1.0 options ``values`` (all of :data:`RELEASED`) mean."""
    maps = {} if values["layer_map"] is None else {"layer_map": values["layer_map"]}
    weighted = [
        ("alpha", "KLDivergenceLoss", {"temperature": values["temperature"]}),
        ("beta", "HardLabelLoss", {}),
        ("gamma", "HiddenStateLoss", {"kind": values["hidden_loss"], **maps}),
        ("delta", "AttentionLoss", maps),
    ]
    entries: list[Any] = [
        {"class_path": f"{BUILT_IN}.{cls}", "init_args": {"weight": values[key], **args}}
        for key, cls, args in weighted
        if values[key] != 0
    ]
    extra = values["extra_losses"] or []
    if not isinstance(extra, list | tuple):
        raise DomainBertError(f"model.extra_losses: got {extra!r}; expected a list of loss terms")
    return entries + [_released_entry(entry) for entry in extra]


def _released_entry(entry: Any) -> Any:
    """An ``extra_losses`` entry of 0.1.0 (``{class_path, init_args, weight, name}``) as a ``losses`` entry."""
    if not isinstance(entry, Mapping) or not isinstance(entry.get("class_path"), str):
        return entry  # build_loss names what is wrong with it
    out = dict(entry)
    init_args = dict(out.pop("init_args", None) or {})
    for key in ("weight", "name"):
        if key in out:
            init_args.setdefault(key, out.pop(key))
    init_args.setdefault("name", entry["class_path"].rsplit(".", 1)[-1].lower())
    return {**out, "class_path": current_path(entry["class_path"]), "init_args": init_args}


def released_config(config: Any, where: str) -> Any:
    """A config, as loaded, with each distillation model's 0.1.0 loss options as ``losses`` (:func:`from_released`).

    Reads the ``model`` entry at the top, or under a subcommand (a checkpoint's hyper-parameters, as Lightning's
    command line merges them): its ``init_args`` or ``dict_kwargs``, or the entry itself when it names neither. A
    model of another class, or one whose class is not named and whose arguments name only ``temperature`` (which
    other modules have), is left as it is.
    """
    if not isinstance(config, Mapping):
        return config
    out = dict(config)
    for key, value in config.items():
        if key == "model":
            out[key] = _released_model(value, where)
        elif key in ("fit", "validate", "test", "predict"):
            out[key] = released_config(value, where)
    return out


def _released_model(model: Any, where: str) -> Any:
    if not isinstance(model, Mapping):
        return model
    path = model.get("class_path")
    if isinstance(path, str) and path.rsplit(".", 1)[-1] != MODULE_NAME:
        return model
    out = dict(model)
    held = [key for key in ("init_args", "dict_kwargs") if isinstance(model.get(key), Mapping)]
    for key in held or [None]:
        args = model[key] if key else {k: v for k, v in model.items() if k != "class_path"}
        if path is None and not set(args) & (set(RELEASED) - {"temperature"}):
            continue
        translated = from_released(args, where)
        if key:
            out[key] = translated
        else:
            out = {**({"class_path": path} if path else {}), **translated}
    return out


#: Some 0.1.0 option given as a key, anywhere in a text: only then is the text read as YAML.
_KEY = re.compile(r"(?<![\w.])(?:" + "|".join(RELEASED) + r")\s*:")


def released_text(content: str, where: str) -> str:
    """A config's YAML text, its distillation model's 0.1.0 loss options read as ``losses`` (:func:`released_config`).

    Text that names none of the options (most configs) comes back as it is, unread; so does text that is no valid
    YAML (the parser then names the error).

    Args:
        content: the config's text.
        where: the config, named in the warning (its file name, ``--config``).
    """
    if not _KEY.search(content):
        return content
    try:
        loaded = yaml.safe_load(content)
    except yaml.YAMLError:
        return content
    translated = released_config(loaded, where)
    return content if translated == loaded else yaml.safe_dump(translated, sort_keys=False)
