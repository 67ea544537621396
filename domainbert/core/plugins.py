"""The one registry type: the objects registered under a ``domainbert.*`` entry-point group, built-in or a plugin's.

Every extension point is a :class:`Registry` over one group, and domainbert's own objects are registered in its
``pyproject.toml`` exactly as another package registers its own (``name = "pkg.module:Object"`` under
``[project.entry-points."<group>"]``). The groups:

- ``domainbert.datamodules``: short names for ``--data`` (:data:`domainbert.data.registry.DATAMODULES`).
- ``domainbert.models``: short names for ``--model`` (:data:`domainbert.cli.short_names.MODELS`).
- ``domainbert.strategies``: the pipeline's strategies (:data:`domainbert.pipeline.strategies.STRATEGIES`).
- ``domainbert.export_formats``: the formats of ``domainbert export`` (:data:`domainbert.deploy.formats.FORMATS`).

One clash rule: a name belongs to its first registration, domainbert's own before any other package's; a later
registration of a taken name (or of a name the extension point reserves) is refused, never imported, and every such
clash is named, with its distribution, in one warning line. A plugin that fails to import (whatever it raises,
``sys.exit`` included) or that the extension point refuses is warned about, naming its distribution, and skipped,
never a crash: a broken plugin must not stop the command that lists the working ones.

Reading a registry's names imports nothing (a registry is a mapping from each name to the ``module.attr`` path
registered under it); :meth:`Registry.load` imports them, once per process (``load(refresh=True)`` reads the entry
points again).
"""

from __future__ import annotations

import importlib.metadata
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar

#: The distribution whose entry points are domainbert's own (its built-ins).
OWN = "domainbert"

T = TypeVar("T")


class Refused(Exception):
    """Raised by a registry's ``make`` when a registered object cannot serve: the message says why."""


def distribution(ep: importlib.metadata.EntryPoint) -> str:
    """The name of the distribution that registered ``ep`` (``unknown distribution`` when it is not known)."""
    dist = ep.dist
    return (dist.name if dist is not None else None) or "unknown distribution"


def origin(ep: importlib.metadata.EntryPoint) -> str:
    """``<distribution>: <module:object>``, for warnings."""
    return f"{distribution(ep)}: {ep.value}"


def warn(message: str) -> None:
    """One warning line (``UserWarning``) from domainbert about a plugin."""
    warnings.warn(f"domainbert: {message}", stacklevel=2)


class Registry(Mapping[str, str], Generic[T]):
    """The objects registered under one entry-point group: a mapping from each name to its ``module.attr`` path.

    Args:
        group: the entry-point group, e.g. ``domainbert.strategies``.
        what: what one of its objects is, for warnings (``datamodule``, ``strategy``).
        make: ``make(name, loaded)``: the registered object as the extension point serves it (a class made into
            its instance); it raises :class:`Refused` for an object that cannot serve. Default: the object itself.
        reserved: names no plugin may take besides the built-ins', each with who holds it (``{"help": "a pipeline
            option"}``); asked each time the entry points are read.
        order: the sort key of :meth:`load`'s objects, built-ins and plugins each sorted apart (default: the built-ins
            by name, the plugins as found).

    Examples:
        >>> from domainbert.core.plugins import Registry
        >>> models = Registry("domainbert.models", "model")
        >>> models["qa"]  # the path registered under the name; nothing is imported
        'domainbert.modules.qa.QuestionAnsweringModule'
        >>> "qa" in models.builtins(), models.get("no_such_model")
        (True, None)
    """

    def __init__(
        self,
        group: str,
        what: str,
        make: Callable[[str, Any], T] | None = None,
        reserved: Callable[[], Mapping[str, str]] | None = None,
        order: Callable[[T], Any] | None = None,
    ) -> None:
        self.group, self.what = group, what
        self._make, self._reserved, self._order = make, reserved, order
        self._entries: dict[str, importlib.metadata.EntryPoint] | None = None
        self._loaded: dict[str, T] | None = None
        self._failed: dict[str, str] = {}

    def __getitem__(self, name: str) -> str:
        return self.entries()[name].value.replace(":", ".")

    def __iter__(self) -> Iterator[str]:
        return iter(self.entries())

    def __len__(self) -> int:
        return len(self.entries())

    def __repr__(self) -> str:
        return f"Registry({self.group!r})"

    def entries(self) -> dict[str, importlib.metadata.EntryPoint]:
        """The entry point kept for each name: domainbert's own first, then the others as found (nothing imported)."""
        if self._entries is None:
            self._entries = self._unique()
        return self._entries

    def builtins(self) -> list[str]:
        """The names domainbert itself registers."""
        return [name for name, ep in self.entries().items() if distribution(ep) == OWN]

    @property
    def failed(self) -> dict[str, str]:
        """``{name: why}`` of every object the last :meth:`load` skipped: it failed to import, or was refused."""
        return dict(self._failed)

    def refresh(self) -> None:
        """Forget what was read: the next use reads the entry points again, the next :meth:`load` imports again."""
        self._entries, self._loaded = None, None
        self._failed.clear()

    def load(self, refresh: bool = False) -> dict[str, T]:
        """Every registered object, by name: the built-ins, then the plugins, each in ``order``; imported once.

        An object that fails to import or that ``make`` refuses is warned about, naming its distribution, and
        skipped (:attr:`failed` says why).
        """
        if refresh:
            self.refresh()
        if self._loaded is None:
            self._failed.clear()
            made = {name: self._load_one(name, ep) for name, ep in self.entries().items()}
            made = {name: item for name, item in made.items() if name not in self._failed}
            own = set(self.builtins())
            groups = [[n for n in made if n in own], [n for n in made if n not in own]]
            if self._order is not None:
                groups = [sorted(names, key=lambda n: self._order(made[n])) for names in groups]
            self._loaded = {name: made[name] for names in groups for name in names}
        return self._loaded

    def _load_one(self, name: str, ep: importlib.metadata.EntryPoint) -> T | None:
        """The object registered as ``name``, made; None (recorded in ``_failed``, warned about) when it cannot be."""
        try:
            obj = ep.load()
        except KeyboardInterrupt:
            raise
        except BaseException as err:  # noqa: BLE001 - a broken plugin (sys.exit too) must not stop the CLI
            return self._skip(name, ep, f"failed to import and is skipped: {_why(err)}", _why(err))
        if self._make is None:
            return obj
        try:
            return self._make(name, obj)
        except KeyboardInterrupt:
            raise
        except Refused as err:
            return self._skip(name, ep, f"is skipped: {err}", str(err))
        except BaseException as err:  # noqa: BLE001 - a plugin's own constructor: skipped, not a crash
            return self._skip(name, ep, f"is skipped: making it failed: {_why(err)}", _why(err))

    def _skip(self, name: str, ep: importlib.metadata.EntryPoint, said: str, why: str) -> None:
        self._failed[name] = why
        warn(f"the {self.what} plugin {name!r} ({origin(ep)}) {said}")

    def _unique(self) -> dict[str, importlib.metadata.EntryPoint]:
        """One entry point per name (the clash rule); every refused one named in one warning, none imported."""
        eps = sorted(importlib.metadata.entry_points(group=self.group), key=lambda ep: distribution(ep) != OWN)
        reserved = self._reserved() if self._reserved is not None else {}
        kept: dict[str, importlib.metadata.EntryPoint] = {}
        clashes = []
        for ep in eps:
            if ep.name in kept:
                clashes.append(f"{ep.name!r} ({origin(ep)}; kept: {origin(kept[ep.name])})")
            elif ep.name in reserved and distribution(ep) != OWN:
                clashes.append(f"{ep.name!r} ({origin(ep)}; reserved: {reserved[ep.name]})")
            else:
                kept[ep.name] = ep
        if clashes:
            warn(f"{self.what} plugins skipped, their names already taken: {'; '.join(clashes)}")
        if not any(distribution(ep) == OWN for ep in kept.values()):
            warn(
                f"domainbert's metadata registers no built-in {self.what} under {self.group}: it is out of date; "
                "reinstall domainbert (pip install -e .) or remove a stale domainbert.egg-info from this folder"
            )
        return kept


def _why(err: BaseException) -> str:
    """``<Type>: <message>``, or the type alone when the message is empty (``SystemExit: 3``, ``KeyboardInterrupt``)."""
    return f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
