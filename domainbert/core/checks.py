"""Checks that a Lightning checkpoint given with ``--ckpt_path`` belongs to the configured run.

Lightning's CLI takes the model's hyper-parameters from the checkpoint, overriding the config: a RoBERTa run's
checkpoint resumed with a BERT config silently trains RoBERTa. And a classifier's checkpoint loaded into a model
with another label set either fails deep inside ``load_state_dict`` (another count) or, worse, loads with
the labels silently renamed (same count). These functions turn both into errors naming the difference.

Two entry points, for the two moments the CLI can check:

- :func:`check_checkpoint_config` before the checkpoint's hyper-parameters are merged into the config
  (``LightningCLI._parse_ckpt_path``): model class and model family.
- :func:`check_checkpoint_model` once model and data exist: label set, and the names and shapes of the weights.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from domainbert.core.families import FAMILIES, family
from domainbert.core.renames import current_path
from domainbert.errors import DomainBertError


def load_checkpoint(path: str | os.PathLike) -> dict:
    """A Lightning checkpoint's dict, loaded safely (``weights_only=True``, memory-mapped)."""
    path = Path(path)
    if not path.is_file():
        raise DomainBertError(f"--ckpt_path {path}: no such file")
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as err:  # noqa: BLE001 - torch raises many types for a file that is not a checkpoint
        from domainbert.core.runs import load_failure

        raise DomainBertError(f"--ckpt_path {path}: not a readable Lightning checkpoint ({load_failure(err)})") from err


def checkpoint_family(state_dict: Mapping[str, Any]) -> str | None:
    """The model family of a checkpoint's weights (``bert``, ``roberta``...), from their names; None if unknown.

    A family here is a base model's attribute name (:attr:`domainbert.core.families.Family.prefix`), the first
    component after ``model.`` in its parameter names (``model.bert.encoder...``).
    """
    families = {f.prefix for f in FAMILIES.values()}
    for key in state_dict:
        for part in key.split(".")[:4]:  # model.bert..., model.base_model.model.bert... (LoRA)
            if part in families:
                return part
    return None


def source_family(init_from: str | None) -> str | None:
    """The model family of a local ``init_from`` folder (from its ``config.json``); None if not local."""
    if not init_from:
        return None
    name = str(init_from)
    if name.startswith("pkg:"):
        try:
            from domainbert.core.hf import resolve_package

            name = resolve_package(name)
        except DomainBertError:
            return None
    config = Path(os.path.expanduser(name)) / "config.json"
    if not config.is_file():
        return None
    data = json.loads(config.read_text(encoding="utf-8"))
    model_type = data.get("domainbert_model_type") or data.get("model_type")  # a mean-pooling export's family
    return None if model_type is None else family(model_type, fallback=True).prefix


def _get(cfg: Any, key: str, default: Any = None) -> Any:
    if cfg is None:
        return default
    if isinstance(cfg, Mapping):
        return cfg.get(key, default)
    getter = getattr(cfg, "get", None)
    return getter(key, default) if callable(getter) else getattr(cfg, key, default)


def check_checkpoint_config(ckpt_path: str | os.PathLike, model_cfg: Any) -> None:
    """Raise if the checkpoint was written by another model class or family than the config asks for.

    Args:
        ckpt_path: the ``--ckpt_path`` file.
        model_cfg: the config's ``model`` entry (``class_path`` and ``init_args``), before Lightning merges
            the checkpoint's hyper-parameters into it.
    """
    from domainbert.core.checkpoint_io import check_saved_trust

    ckpt = load_checkpoint(ckpt_path)
    hp = ckpt.get("hyper_parameters") or {}
    given = _get(_get(model_cfg, "init_args"), "trust_remote_code") is True  # the user's own word
    check_saved_trust(hp, f"--ckpt_path {ckpt_path}", given=given)
    want_cls = _get(model_cfg, "class_path")
    have_cls = current_path(hp.get("_class_path"))  # a path 0.1.0 wrote, as today's
    if want_cls and have_cls and want_cls != have_cls:
        raise DomainBertError(
            f"--ckpt_path {ckpt_path} was written by {have_cls}, but the config's model is {want_cls}; "
            "resume with the config of the run that wrote it"
        )
    init_from = _get(_get(model_cfg, "init_args"), "init_from")
    want = source_family(init_from)
    have = checkpoint_family(ckpt.get("state_dict") or {})
    if want and have and want != have:
        raise DomainBertError(
            f"--ckpt_path {ckpt_path} holds a {have} model, but model.init_from {init_from} is a {want} checkpoint; "
            "resume with the config of the run that wrote it, or start a new run from that run's hf/ export "
            "(--model.init_from <run>/hf) without --ckpt_path"
        )


def check_checkpoint_model(ckpt_path: str | os.PathLike, pl_module: Any) -> None:
    """Raise if the checkpoint's label set or weights do not fit the instantiated model.

    Args:
        ckpt_path: the ``--ckpt_path`` file.
        pl_module: the instantiated LightningModule (its ``hparams`` carry the label set linked from the data).
    """
    ckpt = load_checkpoint(ckpt_path)
    hp = ckpt.get("hyper_parameters") or {}
    mine = getattr(pl_module, "hparams", {}) or {}
    have_labels, want_labels = hp.get("label_names"), _labels_of(pl_module)
    if have_labels is not None and want_labels is not None and list(map(str, have_labels)) != want_labels:
        raise DomainBertError(
            f"--ckpt_path {ckpt_path} was trained on the labels {list(have_labels)}, but this run's labels are "
            f"{want_labels}; fine-tune from that run's hf/ export (--model.init_from <run>/hf) without --ckpt_path, "
            "or give the same label set (data.labels)"
        )
    if have_labels is None and hp.get("num_labels") is not None and mine.get("num_labels") is not None:
        if int(hp["num_labels"]) != int(mine["num_labels"]):
            raise DomainBertError(
                f"--ckpt_path {ckpt_path} has {hp['num_labels']} labels, but this run has {mine['num_labels']}"
            )
    state = ckpt.get("state_dict") or {}
    own = pl_module.state_dict()
    shapes = [
        f"{k} {tuple(v.shape)} in the checkpoint, {tuple(own[k].shape)} in the model"
        for k, v in state.items()
        if k in own and hasattr(v, "shape") and tuple(v.shape) != tuple(own[k].shape)
    ]
    if shapes:
        raise DomainBertError(f"--ckpt_path {ckpt_path} does not fit the model: " + "; ".join(shapes[:3]))
    missing = sorted(k for k in own if k not in state and not k.endswith("position_ids"))
    unexpected = sorted(k for k in state if k not in own and not k.endswith("position_ids"))
    if missing or unexpected:
        raise DomainBertError(
            f"--ckpt_path {ckpt_path} does not fit the model: {len(missing)} weights missing "
            f"({', '.join(missing[:3])}), {len(unexpected)} unexpected ({', '.join(unexpected[:3])})"
        )


def _labels_of(pl_module: Any) -> list[str] | None:
    # the hyper-parameter first: the labels as linked from the data, which the checkpoint's run recorded the same
    # way (the module's own order may be its init_from export's, see ``modules.classification.labels_from``)
    names = (getattr(pl_module, "hparams", {}) or {}).get("label_names")
    if names is None:
        names = getattr(pl_module, "label_names", None)
    return [str(x) for x in names] if names is not None else None
