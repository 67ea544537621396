"""Datamodule plugins: short names registered through the ``domainbert.datamodules`` entry-point group.

A package registers ``name = "pkg.module:ClassName"`` under ``[project.entry-points."domainbert.datamodules"]``;
then ``--data name`` on the command line selects that class (:mod:`domainbert.cli.short_names`; in a YAML config,
give its full ``class_path``).
``domainbert datamodules`` lists them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

GROUP = "domainbert.datamodules"
log = logging.getLogger(__name__)

_loaded: dict[str, type] | None = None
_failed: dict[str, str] = {}


def load_plugins(refresh: bool = False) -> dict[str, type]:
    """Import every registered datamodule; a plugin that fails to import is warned about and skipped."""
    global _loaded
    if _loaded is not None and not refresh:
        return _loaded
    from domainbert.core.plugins import load_entry_points

    found, failed = load_entry_points(GROUP, "datamodule")
    _failed.clear()
    _failed.update(failed)
    _loaded = found
    return found


def class_path(name: str) -> str | None:
    """The import path of the datamodule registered as ``name``, if any."""
    cls = load_plugins().get(name)
    return f"{cls.__module__}.{cls.__qualname__}" if cls is not None else None


def main(argv: Sequence[str] = ()) -> None:
    """``domainbert datamodules``: list the registered datamodules and any that failed to load."""
    if argv and argv[0] in ("-h", "--help"):
        print("usage: domainbert datamodules\n\nList the datamodules registered under the entry-point group " + GROUP)
        return
    plugins = load_plugins(refresh=True)
    width = max([len(n) for n in [*plugins, *_failed]] + [4])
    print(f"{'name':<{width}}  class_path")
    for name, cls in sorted(plugins.items()):
        print(f"{name:<{width}}  {cls.__module__}.{cls.__qualname__}")
    for name, err in sorted(_failed.items()):
        print(f"{name:<{width}}  FAILED TO IMPORT: {err}")
