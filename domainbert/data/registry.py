"""Datamodule short names: the ``domainbert.datamodules`` entry-point group (:data:`DATAMODULES`).

A package registers ``name = "pkg.module:ClassName"`` under ``[project.entry-points."domainbert.datamodules"]``, as
domainbert registers its own (``classification``, ``tagging``, ``qa``, ``corpus``); then ``--data name`` on the
command line selects that class (:mod:`domainbert.cli.short_names`; in a YAML config, give its full ``class_path``).
``domainbert datamodules`` lists them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from domainbert.core.plugins import Registry

GROUP = "domainbert.datamodules"
log = logging.getLogger(__name__)

#: Every registered datamodule: name -> class path (nothing imported); ``DATAMODULES.load()`` imports them.
DATAMODULES: Registry[type] = Registry(GROUP, "datamodule")


def load_plugins(refresh: bool = False) -> dict[str, type]:
    """Import every registered datamodule; one that fails to import is warned about and skipped."""
    return DATAMODULES.load(refresh)


def class_path(name: str) -> str | None:
    """The import path registered as ``name``, if any (nothing is imported)."""
    return DATAMODULES.get(name)


def main(argv: Sequence[str] = ()) -> None:
    """``domainbert datamodules``: list the registered datamodules and any that failed to load."""
    if argv and argv[0] in ("-h", "--help"):
        print("usage: domainbert datamodules\n\nList the datamodules registered under the entry-point group " + GROUP)
        return
    plugins = DATAMODULES.load(refresh=True)
    failed = DATAMODULES.failed
    width = max([len(n) for n in [*plugins, *failed]] + [4])
    print(f"{'name':<{width}}  class_path")
    for name, cls in sorted(plugins.items()):
        print(f"{name:<{width}}  {cls.__module__}.{cls.__qualname__}")
    for name, err in sorted(failed.items()):
        print(f"{name:<{width}}  FAILED TO IMPORT: {err}")
