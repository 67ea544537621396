"""A frozen dataclass read back from the JSON object it was written as: each field checked against its type.

A record (:class:`~domainbert.deploy.recommend.Recommendation`, :class:`~domainbert.pipeline.records.Ship`) is typed
in the process and a JSON object only in its file: ``dataclasses.asdict`` writes it, :func:`from_json` reads it.
The fields a record has not (a newer file's) are left out; a field of the wrong type is refused in one line that
names the file and the field.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from domainbert.errors import DomainBertError

T = TypeVar("T")


def from_json(cls: type[T], data: Any, where: str) -> T:
    """The ``cls`` record that ``data`` (its ``dataclasses.asdict`` form, read from JSON) holds.

    Args:
        cls: a dataclass whose fields are ``str``, ``int``, ``float``, ``bool``, ``Any``, a ``Literal``, another
            such dataclass, ``tuple[X, ...]`` of one, or any of these or None.
        data: the JSON object.
        where: the file and key it was read from, for the error (``out/report.json: recommendation``).

    Raises:
        DomainBertError: ``data`` is no object, lacks a field without a default, or holds a value of another type.
    """
    if not isinstance(data, Mapping):
        raise DomainBertError(f"{where}: {data!r}; expected an object of {cls.__name__}'s fields")
    hints = typing.get_type_hints(cls)
    fields = dataclasses.fields(cls)
    missing = [f.name for f in fields if f.name not in data and _required(f)]
    if missing:
        raise DomainBertError(f"{where}: no field {missing[0]!r}; expected {cls.__name__}'s fields")
    return cls(**{f.name: _value(hints[f.name], data[f.name], f"{where}.{f.name}") for f in fields if f.name in data})


def _required(f: dataclasses.Field) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def _value(hint: Any, value: Any, where: str) -> Any:
    """``value`` as the type ``hint`` names (see :func:`from_json`)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (hint,) = [a for a in args if a is not type(None)]
        return _value(hint, value, where)
    if origin is typing.Literal:
        if value in args:
            return value
        raise DomainBertError(f"{where}={value!r}; expected one of {list(args)}")
    if origin is tuple and isinstance(value, (list, tuple)):
        return tuple(_value(args[0], item, f"{where}[{i}]") for i, item in enumerate(value))
    if dataclasses.is_dataclass(hint):
        return from_json(hint, value, where)
    if hint is Any:
        return value
    if hint is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(hint, type) and isinstance(value, hint) and (hint is bool or not isinstance(value, bool)):
        return value
    raise DomainBertError(f"{where}={value!r}; expected {_named(hint)}")


def _named(hint: Any) -> str:
    """A type as the error says it: ``a list``, ``a float``..."""
    if typing.get_origin(hint) is tuple:
        return "a list"
    return f"a {hint.__name__}" if isinstance(hint, type) else str(hint)
