"""The pipeline's strategies: the ``domainbert.strategies`` entry-point group (:data:`STRATEGIES`).

Every strategy, built-in or another package's, is a :class:`~domainbert.pipeline.strategies.base.Strategy` subclass
(or instance) registered under its name, as domainbert registers its own in its ``pyproject.toml``
(``dapt = "domainbert.pipeline.strategies.dapt:STRATEGY"``)::

    [project.entry-points."domainbert.strategies"]
    my_strategy = "my_package.strategy:MyStrategy"

Its ``name`` (the name it is registered under) becomes a top-level key of pipeline configs (its settings
dataclass's fields below it), and ``domainbert pipeline --help`` lists it. Start strategies run first, the built-in
ones before the plugins', each by ``order``; then every candidate is fine-tuned; then the after strategies run, in
the same way. The names of the pipeline's own options are reserved (:func:`reserved`).
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from typing import Any

from domainbert.core.plugins import Refused, Registry
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
    global _options
    params = inspect.signature(function).parameters.values()
    _options = frozenset(p.name for p in params if p.kind is not inspect.Parameter.VAR_KEYWORD)
    STRATEGIES.refresh()


def reserved() -> frozenset[str]:
    """Names a strategy may not take.

    They are the pipeline's own options (:func:`reserve_options`), the parser's own (``config``,
    ``print_config``, ``help``) and ``baseline``.
    """
    return frozenset(_options - set(STRATEGIES.builtins())) | _RESERVED_EXTRA


def _reserved_names() -> dict[str, str]:
    """The names no plugin may take, for the registry: ``{name: "a pipeline option"}``."""
    return dict.fromkeys(_options | _RESERVED_EXTRA, "a pipeline option")


def _strategy(name: str, obj: Any) -> Strategy:
    """The strategy registered as ``name``: ``obj`` itself, or made from its class.

    Raises:
        Refused: ``obj`` is not a strategy, or its name, kind or registered name is wrong.
    """
    strategy = obj() if isinstance(obj, type) and issubclass(obj, Strategy) else obj
    problem = _problem(strategy, name)
    if problem:
        raise Refused(problem)
    return strategy


def _problem(strategy: Any, name: str) -> str | None:
    """Why a registered object cannot be the strategy ``name``; None when it can."""
    if not isinstance(strategy, Strategy):
        return f"{strategy!r} is not a domainbert.pipeline.strategies.base.Strategy (subclass it)"
    if strategy.name != name:
        return f"its name {strategy.name!r} is not the name it is registered under ({name!r})"
    if not strategy.name.isidentifier():
        return f"its name {strategy.name!r} is not an identifier (it is a config key)"
    if strategy.kind not in ("start", "after"):
        return f"its kind {strategy.kind!r} is neither 'start' nor 'after'"
    return None


#: Every registered strategy: name -> import path (nothing imported); :func:`load` makes them.
STRATEGIES: Registry[Strategy] = Registry(
    GROUP, "strategy", make=_strategy, reserved=_reserved_names, order=lambda s: (s.kind != "start", s.order, s.name)
)


def load(refresh: bool = False) -> dict[str, Strategy]:
    """Every strategy, by name, in the order they run: start strategies first, each kind's built-in ones first.

    A plugin that fails to import or is not a :class:`Strategy` is warned about and skipped; so are plugins whose
    names are taken (by a built-in strategy, an earlier plugin, or an option of the pipeline's own, such as
    ``print_config``), all named in one warning line.
    """
    loaded = STRATEGIES.load(refresh)
    return dict(sorted(loaded.items(), key=lambda item: item[1].kind != "start"))  # stable: start ones first


def listing(strategies: dict[str, Strategy]) -> str:
    """One line per strategy for ``--help``: its name, kind, where it comes from and its docstring's first line."""
    lines = []
    for name, strategy in strategies.items():
        origin = "" if name in STRATEGIES.builtins() else f" [{type(strategy).__module__}]"
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
