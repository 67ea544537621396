"""The export formats: name → writer, loader and runner (:class:`~.interface.ExportFormat`), in :data:`FORMATS`.

Every format, built-in or another package's, is registered under the entry-point group ``domainbert.export_formats``
(``name = "pkg.module:FormatClass"``, the name being the format's own); domainbert registers its own in its
``pyproject.toml``, one module each here (``fp32``, ``bf16``, ``int8``, ``onnx``, ``onnx_int8``). A plugin may not
take a built-in's name (:class:`~domainbert.core.plugins.Registry`'s clash rule).
``domainbert export`` writes the formats its flags enable (``--int8``, ``--bf16``, ``--onnx``) and those named by
``--formats``; :func:`domainbert.deploy.load.load_variant` loads a folder by the ``variant`` its
``domainbert_variant.json`` records.
"""

from __future__ import annotations

from typing import Any

from domainbert.core.plugins import Refused, Registry
from domainbert.deploy.formats.interface import ExportFormat, WriteContext, Written
from domainbert.errors import DomainBertError

__all__ = [
    "FORMATS",
    "GROUP",
    "ExportFormat",
    "WriteContext",
    "Written",
    "built_in",
    "enabled",
    "get",
    "option_defaults",
    "option_values",
    "table",
]

#: The entry-point group of export formats.
GROUP = "domainbert.export_formats"


def _format(name: str, obj: Any) -> ExportFormat:
    """The format registered as ``name``: ``obj`` itself, or made from its class.

    Raises:
        Refused: ``obj`` is not an :class:`ExportFormat`, or its name is not the one it is registered under.
    """
    fmt = obj() if isinstance(obj, type) and issubclass(obj, ExportFormat) else obj
    if not isinstance(fmt, ExportFormat):
        raise Refused(f"{fmt!r} is not a domainbert.deploy.formats.ExportFormat (subclass it)")
    if fmt.name != name:
        raise Refused(f"its name {fmt.name!r} is not the name it is registered under ({name!r})")
    return fmt


#: Every registered format: name -> import path (nothing imported); :func:`table` makes them.
FORMATS: Registry[ExportFormat] = Registry(GROUP, "export format", make=_format, order=lambda f: (f.order, f.name))


def table(refresh: bool = False) -> dict[str, ExportFormat]:
    """Every format: the built-ins, then the installed plugins' (one that fails to import is warned about).

    Read once per process (``table(refresh=True)`` reads the entry points again).

    Examples:
        >>> from domainbert.deploy.formats import table
        >>> list(table())[:5]
        ['fp32', 'bf16', 'int8', 'onnx', 'onnx_int8']
        >>> table()["int8"].option, table()["int8"].teacher
        ('int8', True)
    """
    return FORMATS.load(refresh)


def built_in() -> dict[str, ExportFormat]:
    """The formats domainbert itself registers, by name, in their order."""
    own = set(FORMATS.builtins())
    return {name: fmt for name, fmt in table().items() if name in own}


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
