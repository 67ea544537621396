"""Settings given as a dataclass, a plain dict of its fields (as YAML and saved hparams hold them) or null."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, TypeVar

from domainbert.errors import DomainBertError

T = TypeVar("T")


class SettingError(DomainBertError):
    """A field of a settings dataclass holds a value it cannot take.

    Raised by the dataclass itself (``__post_init__``), which knows only its own field name; whoever knows the
    option the dataclass was given as adds its name in front (:meth:`within`): ``every_n_steps`` inside the watch of
    the pipeline's ``dapt`` is ``dapt.watch.every_n_steps``.
    """

    def __init__(self, option: str, value: Any, expected: str) -> None:
        """Args: option: the field (dotted when nested). value: what it was given. expected: what it takes."""
        self.option, self.value, self.expected = option, value, expected
        super().__init__(f"{option}={value!r}: {expected}")

    def within(self, prefix: str) -> SettingError:
        """The same error, its option named inside ``prefix`` (``watch`` -> ``dapt.watch``)."""
        return SettingError(f"{prefix}.{self.option}", self.value, self.expected)


def whole_number(value: Any, option: str, minimum: int, none: str = "") -> None:
    """Refuse anything but an int of at least ``minimum`` (or None, when ``none`` says what None means).

    Raises:
        SettingError: naming ``option``.
    """
    if value is None and none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        null = f", or null ({none})" if none else ""
        raise SettingError(option, value, f"expected a whole number >= {minimum}{null}")


def finite(value: Any, option: str) -> None:
    """Refuse a value that is not a finite number (NaN, an infinity, a string).

    Raises:
        SettingError: naming ``option``.
    """
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise SettingError(option, value, "expected a finite number")


def one_of(value: Any, option: str, choices: tuple) -> None:
    """Refuse a value outside ``choices``.

    Raises:
        SettingError: naming ``option`` and the choices.
    """
    if value not in choices:
        raise SettingError(option, value, f"expected one of {', '.join(map(str, choices))}")


def as_settings(cls: type[T], value: Any, what: str) -> T | None:
    """``value`` as an instance of the dataclass ``cls``, or None.

    Args:
        cls: the settings dataclass.
        value: an instance of ``cls``, a dict of some of its fields, or None.
        what: the option's name for error messages (e.g. ``"lora"``).

    Raises:
        DomainBertError: for unknown fields or a value of another type; a :class:`SettingError` naming
            ``<what>.<field>`` for a value the dataclass refuses.
    """
    if value is None or isinstance(value, cls):
        return value
    if isinstance(value, dict):
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(value) - fields)
        if unknown:
            raise DomainBertError(f"{what}: unknown setting(s) {unknown}; expected some of {sorted(fields)}")
        try:
            return cls(**value)
        except SettingError as err:
            raise err.within(what) from None
    raise DomainBertError(f"{what}: expected a mapping of settings or null, got {type(value).__name__}")
