"""Plugins: the objects other packages register under a ``domainbert.*`` entry-point group.

A package registers ``name = "pkg.module:Object"`` under ``[project.entry-points."<group>"]``; :func:`load_entry_points`
imports every one of them. A plugin that fails to import (whatever it raises, ``sys.exit`` included) is warned about,
naming its distribution, and skipped, never a crash: a broken plugin must not stop the command that lists the working
ones. A name registered twice keeps its first registration (domainbert's own before any other package's); every
such clash is named in one warning line, and the plugins that lost are not imported. Groups: ``domainbert.
datamodules`` (:mod:`domainbert.data.registry`) and ``domainbert.strategies`` (:mod:`domainbert.pipeline.strategies`).
"""

from __future__ import annotations

import importlib.metadata
import warnings
from typing import Any

#: The distribution whose entry points are domainbert's own (the built-in datamodules' short names).
OWN = "domainbert"


def distribution(ep: importlib.metadata.EntryPoint) -> str:
    """The name of the distribution that registered ``ep`` (``unknown distribution`` when it is not known)."""
    dist = getattr(ep, "dist", None)
    return getattr(dist, "name", None) or "unknown distribution"


def origin(ep: importlib.metadata.EntryPoint) -> str:
    """``<distribution>: <module:object>``, for warnings."""
    return f"{distribution(ep)}: {ep.value}"


def warn(message: str) -> None:
    """One warning line (``UserWarning``) from domainbert about a plugin."""
    warnings.warn(f"domainbert: {message}", stacklevel=3)


def load_entry_points(
    group: str, what: str, origins: dict[str, str] | None = None
) -> tuple[dict[str, Any], dict[str, str]]:
    """Import every object registered under ``group``: ``({name: object}, {name: why it failed to import})``.

    Args:
        group: the entry-point group, e.g. ``domainbert.strategies``.
        what: what a plugin of this group is, for the warning (``datamodule``, ``strategy``).
        origins: filled with ``{name: "<distribution>: <module:object>"}`` of every entry point kept, when given.
    """
    found: dict[str, Any] = {}
    failed: dict[str, str] = {}
    for ep in unique(group, what):
        if origins is not None:
            origins[ep.name] = origin(ep)
        try:
            found[ep.name] = ep.load()
        except KeyboardInterrupt:
            raise
        except BaseException as err:  # noqa: BLE001 - a broken plugin (sys.exit too) must not stop the CLI
            why = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
            failed[ep.name] = why
            warn(f"the {what} plugin {ep.name!r} ({origin(ep)}) failed to import and is skipped: {why}")
    return found, failed


def unique(group: str, what: str) -> list[importlib.metadata.EntryPoint]:
    """The entry points of ``group``, one per name: domainbert's own first, then the others in the order found.

    A name registered again is skipped without importing it; all such names are named in one warning.
    """
    eps = list(importlib.metadata.entry_points(group=group))
    eps.sort(key=lambda ep: distribution(ep) != OWN)  # stable: the others keep their order
    kept: dict[str, importlib.metadata.EntryPoint] = {}
    clashes = []
    for ep in eps:
        first = kept.setdefault(ep.name, ep)
        if first is not ep:
            clashes.append(f"{ep.name!r} ({origin(ep)}; kept: {origin(first)})")
    if clashes:
        warn(f"{what} plugins skipped, their names already taken: {'; '.join(clashes)}")
    return list(kept.values())
