"""Short names on the command line: ``--model NAME`` and ``--data NAME`` become class paths.

``--model`` takes a short name registered under the ``domainbert.models`` entry-point group (:data:`MODELS`: the
shipped modules', and any plugin's) or its bare class name; ``--data`` takes a datamodule registered under
``domainbert.datamodules`` (:mod:`domainbert.data.registry`). Both are :class:`~domainbert.core.plugins.Registry`
objects, read without importing anything they name.
"""

from __future__ import annotations

from collections.abc import Sequence

from domainbert.core.plugins import Registry
from domainbert.data.registry import class_path

#: short names of LightningModules, for ``--model NAME``: name -> class path (nothing imported).
MODELS: Registry[type] = Registry("domainbert.models", "model")


def model_class_path(name: str) -> str | None:
    """The import path of the module called ``name``: a short name or a bare class name of :data:`MODELS`."""
    if name in MODELS:
        return MODELS[name]
    return next((cp for cp in MODELS.values() if cp.rsplit(".", 1)[1] == name), None)


def expand_short_names(args: Sequence[str]) -> list[str]:
    """Replace short names by class paths.

    ``--data NAME`` / ``--data=NAME`` / ``--data.class_path NAME``: a registered datamodule plugin.
    ``--model NAME`` (and the same forms): a short name of :data:`MODELS` (``classification``, ``tagging``, ``qa``,
    ``mlm``, ``contrastive``, ``tsdae``, ``distill``, or a plugin's), or the bare class name
    (``SequenceClassificationModule``).
    """
    out = list(args)
    lookups = (("--data", class_path), ("--data.class_path", class_path))
    lookups += (("--model", model_class_path), ("--model.class_path", model_class_path))
    for i, a in enumerate(out):
        for flag, lookup in lookups:
            if a == flag and i + 1 < len(out) and (cp := lookup(out[i + 1])):
                out[i + 1] = cp
            elif a.startswith(flag + "=") and (cp := lookup(a.split("=", 1)[1])):
                out[i] = f"{flag}={cp}"
    return out
