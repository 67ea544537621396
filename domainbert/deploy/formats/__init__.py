"""The table of export formats: name → writer, loader and runner (:class:`~.interface.ExportFormat`).

Built-in formats live here, one module each (``fp32``, ``bf16``, ``int8``, ``onnx``, ``onnx_int8``); other packages
add theirs under the entry-point group ``domainbert.export_formats`` (``name = "pkg.module:FormatClass"``), loaded
through :func:`domainbert.core.plugins.load_entry_points`. A plugin's name may not replace a built-in one.
``domainbert export`` writes the formats its flags enable (``--int8``, ``--bf16``, ``--onnx``) and those named by
``--formats``; :func:`domainbert.deploy.load.load_variant` loads a folder by the ``variant`` its
``domainbert_variant.json`` records.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

from domainbert.deploy.formats.bf16 import Bf16
from domainbert.deploy.formats.fp32 import Fp32
from domainbert.deploy.formats.int8 import Int8
from domainbert.deploy.formats.interface import ExportFormat, WriteContext, Written
from domainbert.deploy.formats.onnx import Onnx
from domainbert.deploy.formats.onnx_int8 import OnnxInt8
from domainbert.errors import DomainBertError

__all__ = [
    "BUILT_IN",
    "GROUP",
    "ExportFormat",
    "WriteContext",
    "Written",
    "enabled",
    "get",
    "option_defaults",
    "option_values",
    "table",
]

#: The entry-point group of export formats from other packages.
GROUP = "domainbert.export_formats"
#: The built-in formats, by name.
BUILT_IN: dict[str, ExportFormat] = {f.name: f for f in (Fp32(), Bf16(), Int8(), Onnx(), OnnxInt8())}


@functools.cache
def table() -> dict[str, ExportFormat]:
    """Every format: the built-ins, then the installed plugins' (a plugin that fails to import is warned about).

    Read once per process (the result is cached; ``table.cache_clear()`` reads the entry points again).

    Examples:
        >>> from domainbert.deploy.formats import BUILT_IN, table
        >>> list(table())[: len(BUILT_IN)]
        ['fp32', 'bf16', 'int8', 'onnx', 'onnx_int8']
        >>> table()["int8"].option, table()["int8"].teacher
        ('int8', True)
    """
    from domainbert.core.plugins import load_entry_points

    found, _ = load_entry_points(GROUP, "export format")
    formats = dict(BUILT_IN)
    for name, obj in found.items():
        fmt = obj() if isinstance(obj, type) else obj
        if not isinstance(fmt, ExportFormat) or not fmt.name:
            warnings.warn(
                f"domainbert: the export format plugin {name!r} is not a named ExportFormat; skipped", stacklevel=2
            )
        elif fmt.name in BUILT_IN:
            why = f"would replace the built-in {fmt.name!r}; skipped"
            warnings.warn(f"domainbert: the export format plugin {name!r} {why}", stacklevel=2)
        else:
            formats[fmt.name] = fmt
    return formats


def get(name: str, where: str = "format") -> ExportFormat:
    """The format called ``name``; a DomainBertError naming ``where`` and the known formats otherwise.

    Examples:
        >>> from domainbert.deploy.formats import get
        >>> get("bf16").name
        'bf16'
        >>> get("fp8", where="--formats")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        domainbert.errors.DomainBertError: --formats: 'fp8' is not an export format; known: fp32, bf16, int8, ...
    """
    formats = table()
    if name not in formats:
        raise DomainBertError(f"{where}: {name!r} is not an export format; known: {', '.join(formats)}")
    return formats[name]


def enabled(flags: dict[str, bool], names: list[str] | None = None) -> list[ExportFormat]:
    """The formats to write, in their order: those whose ``option`` is set in ``flags``, and those ``names`` lists.

    Args:
        flags: the export's boolean options (``{"int8": True, "bf16": False, "onnx": False}``).
        names: formats asked for by name (``--formats``), built-in or a plugin's.

    Examples:
        ``--int8`` turns on both int8 formats; ``--formats [bf16]`` adds one by name; ``fp32`` is never listed
        (the model's own folder, ``student/``, is written anyway):

        >>> from domainbert.deploy.formats import enabled
        >>> [f.name for f in enabled({"int8": True, "onnx": False}, names=["bf16", "fp32"])]
        ['bf16', 'int8', 'onnx_int8']
    """
    chosen = {f.name: f for f in table().values() if f.option and flags.get(f.option)}
    for name in names or []:
        chosen[name] = get(name, where="--formats")
    chosen.pop("fp32", None)  # the model's own folder is always written, as student/
    return sorted(chosen.values(), key=lambda f: (f.order, f.name))


def option_defaults() -> dict[str, Any]:
    """Every format's options (:attr:`~.interface.ExportFormat.options`) with their defaults, by name.

    Examples:
        >>> from domainbert.deploy.formats import option_defaults
        >>> option_defaults()
        {'int8_backend': 'auto', 'int8_per_channel': True, 'onnx_opset': None, 'onnx_fuse': True}
    """
    out: dict[str, Any] = {}
    for fmt in table().values():
        for name, value in fmt.options.items():
            out.setdefault(name, value)
    return out


def option_values(given: dict[str, Any] | None) -> dict[str, Any]:
    """The formats' options: ``given`` over their defaults; a name no format declares is refused, naming them.

    Examples:
        >>> from domainbert.deploy.formats import option_values
        >>> option_values({"int8_backend": "torch"})["int8_backend"]
        'torch'
        >>> option_values({"int8_bakend": "torch"})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        domainbert.errors.DomainBertError: --format_options: 'int8_bakend' is not an option of any export format; ...
    """
    defaults = option_defaults()
    for name in given or {}:
        if name not in defaults:
            raise DomainBertError(
                f"--format_options: {name!r} is not an option of any export format; known: {', '.join(defaults)}"
            )
    return {**defaults, **(given or {})}
