"""The pipeline's strategies: the built-in ones (one module each) and those other packages register.

A package adds a strategy by registering a :class:`~domainbert.pipeline.strategies.base.Strategy` subclass (or instance)
under the ``domainbert.strategies`` entry-point group::

    [project.entry-points."domainbert.strategies"]
    my_strategy = "my_package.strategy:MyStrategy"

Its ``name`` becomes a top-level key of pipeline configs (its settings dataclass's fields below it), and
``domainbert pipeline --help`` lists it. Start strategies run in the order listed here (built-in ones first),
then every candidate is fine-tuned, then the after strategies run.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import typing
import warnings
from typing import Any

from domainbert.core.settings import SettingError
from domainbert.errors import DomainBertError
from domainbert.pipeline.strategies.base import Context, Strategy

GROUP = "domainbert.strategies"
#: Names a strategy may not take beside the pipeline's own options (see :func:`reserved`).
_RESERVED_EXTRA = frozenset({"config", "print_config", "help", "baseline"})
_options: frozenset[str] = frozenset()


def reserve_options(function) -> None:
    """Reserve every named parameter of ``function`` (the pipeline's entry point) that is not a built-in strategy.

    :mod:`domainbert.pipeline` calls it with :func:`domainbert.pipeline.command.pipeline` when it is imported,
    which is always before this package runs, so a new option of the pipeline is reserved without a hand-kept list.
    """
    global _options, _loaded
    params = inspect.signature(function).parameters.values()
    _options = frozenset(p.name for p in params if p.kind is not inspect.Parameter.VAR_KEYWORD)
    _loaded = None


def reserved() -> frozenset[str]:
    """Names a strategy may not take.

    They are the pipeline's own options (:func:`reserve_options`), the parser's own (``config``,
    ``print_config``, ``help``) and ``baseline``.
    """
    return frozenset(_options - set(builtins())) | _RESERVED_EXTRA


_loaded: dict[str, Strategy] | None = None


def builtins() -> dict[str, Strategy]:
    """The built-in strategies, by name, in the order they run (start strategies first, then by ``order``).

    They are the modules of this package that define ``STRATEGY``: adding a strategy is adding its file.
    """
    found = []
    for info in pkgutil.iter_modules(__path__):
        strategy = getattr(importlib.import_module(f"{__name__}.{info.name}"), "STRATEGY", None)
        if strategy is not None:
            found.append(strategy)
    found.sort(key=lambda s: (s.kind != "start", s.order, s.name))
    return {s.name: s for s in found}


def load(refresh: bool = False) -> dict[str, Strategy]:
    """Every strategy, by name: the built-in ones, then the plugins (start strategies before after strategies).

    A plugin that fails to import or is not a :class:`Strategy` is warned about and skipped; so are plugins whose
    names are taken (by a built-in strategy, an earlier plugin, or an option of the pipeline's own, such as
    ``print_config``), all named in one warning line.
    """
    global _loaded
    if _loaded is not None and not refresh:
        return _loaded
    from domainbert.core.plugins import load_entry_points

    found = builtins()
    origins: dict[str, str] = {}
    objects, _ = load_entry_points(GROUP, "strategy", origins)
    taken = []
    for entry, obj in objects.items():
        try:
            strategy = obj() if isinstance(obj, type) and issubclass(obj, Strategy) else obj
        except Exception as err:  # noqa: BLE001 - a plugin's own constructor: skipped, not a crash
            strategy = err
        problem = _problem(strategy)
        if problem:
            warnings.warn(
                f"domainbert: the strategy plugin {entry!r} ({origins[entry]}) is skipped: {problem}", stacklevel=2
            )
        elif strategy.name in found or strategy.name in reserved():
            owner = _owner(strategy.name, found)
            taken.append(f"{entry!r} ({origins[entry]}) named {strategy.name!r}: {owner}")
        else:
            found[strategy.name] = strategy
    if taken:
        warnings.warn(f"domainbert: strategy plugins skipped, their names taken: {'; '.join(taken)}", stacklevel=2)
    _loaded = dict(sorted(found.items(), key=lambda item: item[1].kind != "start"))  # stable: start ones first
    return _loaded


def _owner(name: str, found: dict[str, Strategy]) -> str:
    """Who holds ``name`` already: the pipeline's own option, a built-in strategy, or an earlier plugin."""
    if name in reserved():
        return "a pipeline option"
    module = type(found[name]).__module__
    return "a built-in strategy" if module.startswith(__name__ + ".") else f"the plugin {module}"


def _problem(strategy) -> str | None:
    """Why a plugin's object cannot be a strategy (a taken name aside); None when it can."""
    if isinstance(strategy, Exception):
        return f"making it failed: {type(strategy).__name__}: {strategy}"
    if not isinstance(strategy, Strategy):
        return f"{strategy!r} is not a domainbert.pipeline.strategies.base.Strategy (subclass it)"
    if not strategy.name.isidentifier():
        return f"its name {strategy.name!r} is not an identifier (it is a config key)"
    if strategy.kind not in ("start", "after"):
        return f"its kind {strategy.kind!r} is neither 'start' nor 'after'"
    return None


def listing(strategies: dict[str, Strategy]) -> str:
    """One line per strategy for ``--help``: its name, kind, where it comes from and its docstring's first line."""
    lines = []
    for name, strategy in strategies.items():
        origin = "" if type(strategy).__module__.startswith(__name__ + ".") else f" [{type(strategy).__module__}]"
        lines.append(f"{name} ({strategy.kind}{origin}): {strategy.summary()}")
    return "\n".join(lines)


def settings_of(strategies: dict[str, Strategy], given: dict[str, Any]) -> dict[str, Any]:
    """Every strategy's settings: ``given[name]`` (a settings object, a dict of its fields, or None: the defaults).

    A settings object of another dataclass whose fields the strategy's settings all have (a ``StageSpec`` given for
    a strategy whose settings extend it) is converted, its other fields at their defaults.

    Raises:
        DomainBertError: a key that names no installed strategy, settings of the wrong kind, or a value the
            settings refuse (named as the option, ``dapt.watch.patience``).
    """
    unknown = sorted(set(given) - set(strategies))
    if unknown:
        raise DomainBertError(
            f"pipeline: no strategy named {unknown[0]!r}; the installed ones are {sorted(strategies)} "
            "(`domainbert pipeline --help` lists them)"
        )
    return {name: _coerce(name, s, given.get(name)) for name, s in strategies.items()}


def _coerce(name: str, strategy: Strategy, value: Any) -> Any:
    """``value`` as ``strategy.settings`` (see :func:`settings_of`); dicts of nested settings become their class."""
    cls = strategy.settings
    if value is None:
        return strategy.default()
    if isinstance(value, cls):
        return value
    fields = None
    if isinstance(value, dict):
        fields = dict(value)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    try:
        if fields is not None:
            hints = typing.get_type_hints(cls)
            for key, item in fields.items():
                if isinstance(item, dict) and dataclasses.is_dataclass(hints.get(key)):
                    fields[key] = hints[key](**item)
            return cls(**fields)
    except TypeError:
        pass
    except SettingError as err:  # the settings refuse a value: named as the pipeline option it was given as
        raise DomainBertError(f"pipeline: {err.within(name)}") from None
    raise DomainBertError(f"pipeline: {name}: expected {cls.__name__} settings or a dict of its fields, got {value!r}")


def run(ctx: Context, kind: str) -> None:
    """Run every enabled strategy of ``kind`` (``start`` or ``after``), in the registry's order."""
    for name, strategy in ctx.strategies.items():
        if strategy.kind == kind and ctx.enabled(name):
            ctx.add(name, strategy.run(ctx, ctx.settings[name]))
