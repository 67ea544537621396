"""Plugins: the objects other packages register under a ``domainbert.*`` entry-point group.

A package registers ``name = "pkg.module:Object"`` under ``[project.entry-points."<group>"]``; :func:`load_entry_points`
imports every one of them. A plugin that fails to import is warned about and skipped, never a crash: a broken plugin
must not stop the command that lists the working ones. Groups: ``domainbert.datamodules`` (:mod:`domainbert.data.
registry`) and ``domainbert.strategies`` (:mod:`domainbert.pipeline.strategies`).
"""

from __future__ import annotations

import importlib.metadata
import warnings
from typing import Any


def load_entry_points(group: str, what: str) -> tuple[dict[str, Any], dict[str, str]]:
    """Import every object registered under ``group``: ``({name: object}, {name: why it failed to import})``.

    Args:
        group: the entry-point group, e.g. ``domainbert.strategies``.
        what: what a plugin of this group is, for the warning (``datamodule``, ``strategy``).
    """
    found: dict[str, Any] = {}
    failed: dict[str, str] = {}
    for ep in importlib.metadata.entry_points(group=group):
        try:
            found[ep.name] = ep.load()
        except Exception as err:  # noqa: BLE001 - a broken plugin must not stop the CLI
            failed[ep.name] = f"{type(err).__name__}: {err}"
            warnings.warn(
                f"domainbert: the {what} plugin {ep.name!r} ({ep.value}) failed to import and is skipped: "
                f"{type(err).__name__}: {err}",
                stacklevel=3,
            )
    return found, failed
