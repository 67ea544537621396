"""Settings given as a dataclass, a plain dict of its fields (as YAML and saved hparams hold them) or null."""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from domainbert.errors import DomainBertError

T = TypeVar("T")


def as_settings(cls: type[T], value: Any, what: str) -> T | None:
    """``value`` as an instance of the dataclass ``cls``, or None.

    Args:
        cls: the settings dataclass.
        value: an instance of ``cls``, a dict of some of its fields, or None.
        what: the option's name for error messages (e.g. ``"lora"``).

    Raises:
        DomainBertError: for unknown fields or a value of another type.
    """
    if value is None or isinstance(value, cls):
        return value
    if isinstance(value, dict):
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(value) - fields)
        if unknown:
            raise DomainBertError(f"{what}: unknown setting(s) {unknown}; expected some of {sorted(fields)}")
        return cls(**value)
    raise DomainBertError(f"{what}: expected a mapping of settings or null, got {type(value).__name__}")
