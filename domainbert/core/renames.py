"""The class paths of the released version (0.1.0) that have moved since, read as today's: one table.

Configs and checkpoints written by 0.1.0 name classes by the paths they had then: ``domainbert.callbacks.*``,
``domainbert.prediction.*``, ``domainbert.losses.*`` and ``domainbert.modules.distill.DistillationModule``. Those
modules are gone; :data:`RENAMED` maps each such class path to today's, and it is applied where class paths come
in, before jsonargparse or Lightning resolves them:

- the text of a config (a ``--config`` file or YAML string, a pipeline stage's config) and the command line:
  :class:`RenamingParser`, the parser of ``domainbert fit/validate/test/predict`` (and of the pipeline's
  ``resolve_config``);
- a checkpoint's saved hyper-parameters: merged by ``--ckpt_path`` (:meth:`RenamingParser.parse_object`), compared
  with the config's model (:func:`domainbert.core.checks.check_checkpoint_config`), and read by
  ``load_from_checkpoint`` (:meth:`domainbert.modules.base.HFModule.load_from_checkpoint`, through
  :func:`renamed_hparams`).

Each old path read gives a one-line ``FutureWarning`` naming the new one (once per source). Checkpoints of 0.1.0
hold plain data (they load with ``weights_only=True``: class paths as strings, callback states as numbers and
tensors), so no pickled reference to the old modules needs translating.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from jsonargparse import Namespace
from lightning.pytorch.cli import LightningArgumentParser

#: ``{class path in 0.1.0: class path today}`` for every released class whose path has changed.
RENAMED: dict[str, str] = {
    "domainbert.callbacks.EarlyStopping": "domainbert.core.callbacks.EarlyStopping",
    "domainbert.callbacks.HFExport": "domainbert.core.callbacks.HFExport",
    "domainbert.callbacks.TrainingGuard": "domainbert.core.callbacks.TrainingGuard",
    "domainbert.prediction.FileOrder": "domainbert.core.prediction.FileOrder",
    "domainbert.prediction.PredictionWriter": "domainbert.core.prediction.PredictionWriter",
    "domainbert.losses.AttentionLoss": "domainbert.distill.losses.AttentionLoss",
    "domainbert.losses.DistillLoss": "domainbert.distill.losses.LossTerm",
    "domainbert.losses.HardLabelLoss": "domainbert.distill.losses.HardLabelLoss",
    "domainbert.losses.HiddenStateLoss": "domainbert.distill.losses.HiddenStateLoss",
    "domainbert.losses.KLDivergenceLoss": "domainbert.distill.losses.KLDivergenceLoss",
    "domainbert.modules.distill.DistillationModule": "domainbert.distill.module.DistillationModule",
}

#: An old path as a whole word of a text: not part of a longer dotted name.
_OLD_PATH = re.compile(r"(?<![\w.])(" + "|".join(map(re.escape, RENAMED)) + r")(?!\w)")


def current_path(path: str | None) -> str | None:
    """Today's class path of ``path``: the new one for a path in :data:`RENAMED`, else ``path`` itself."""
    return RENAMED.get(path, path) if isinstance(path, str) else path


def _warn(old: str, where: str) -> None:
    # stacklevel 1: the warning is attributed to this line, so the "default" filter shows each message once
    warnings.warn(f"{where}: {old} is deprecated, read as {RENAMED[old]}", FutureWarning, stacklevel=1)


def renamed_text(text: str, where: str) -> str:
    """``text`` (a config's YAML, a command-line option) with each old class path replaced by today's.

    Args:
        text: the text; an old path counts only as a whole dotted name (``domainbert.losses.HiddenStateLossX`` and
            ``my.domainbert.losses.HiddenStateLoss`` are left alone).
        where: the text's source, named in the warning (a config file, ``the command line``).
    """

    def new(match: re.Match) -> str:
        _warn(match[1], where)
        return RENAMED[match[1]]

    return _OLD_PATH.sub(new, text)


def renamed_values(value: Any, where: str) -> Any:
    """``value`` with each string that is an old class path replaced, in nested mappings and lists.

    Returns:
        ``value`` itself (the same object) when it holds no old path, else a copy with the paths replaced: mappings
        as dicts, lists and tuples as lists and tuples.
    """
    if isinstance(value, str):
        if value in RENAMED:
            _warn(value, where)
            return RENAMED[value]
        return value
    if isinstance(value, Mapping):
        items = {key: renamed_values(item, where) for key, item in value.items()}
        return value if all(items[key] is item for key, item in value.items()) else items
    if isinstance(value, list | tuple):
        items = [renamed_values(item, where) for item in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else type(value)(items)
    return value


def renamed_hparams(hparams: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The entries of a checkpoint's ``hparams`` that name an old class path, with today's in their place.

    ``load_from_checkpoint`` passes them on as keyword arguments, which Lightning lays over the saved ones (a saved
    ``_class_path`` too, which Lightning checks against the module's class).
    """
    out = {}
    for key, value in hparams.items():
        new = renamed_values(value, where)
        if new is not value:
            out[key] = new
    return out


class RenamingParser(LightningArgumentParser):
    """LightningCLI's parser, reading the old class paths of :data:`RENAMED` as today's wherever they come in.

    ``parse_args`` translates the command line, ``parse_string`` a config's text (a ``--config`` file, read by
    ``parse_path``, or YAML given inline) and ``parse_object`` a mapping (LightningCLI merges a checkpoint's
    hyper-parameters with it).
    """

    def parse_args(self, args: Sequence[str] | None = None, *rest: Any, **kwargs: Any) -> Namespace:
        """``LightningArgumentParser.parse_args`` of ``args`` with old class paths replaced."""
        if args is not None:
            args = [renamed_text(arg, "the command line") if isinstance(arg, str) else arg for arg in args]
        return super().parse_args(args, *rest, **kwargs)

    def parse_string(self, content: str, path: Any = "", *rest: Any, **kwargs: Any) -> Namespace:
        """``LightningArgumentParser.parse_string`` of ``content`` with old class paths replaced."""
        return super().parse_string(renamed_text(content, str(path) or "--config"), path, *rest, **kwargs)

    def parse_object(self, obj: Any, *rest: Any, **kwargs: Any) -> Namespace:
        """``LightningArgumentParser.parse_object`` of ``obj`` with old class paths replaced (a mapping's)."""
        if not isinstance(obj, Namespace):
            obj = renamed_values(obj, "a saved config or checkpoint")
        return super().parse_object(obj, *rest, **kwargs)
