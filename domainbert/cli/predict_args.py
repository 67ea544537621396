"""The options ``domainbert predict`` adds so that an export reads its inputs as it was scored.

The record itself (the training length and precision an export was scored at) is :mod:`domainbert.core.scoring`'s;
this module reads a ``predict`` command line and its ``--config`` files for what they set already.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from domainbert.core.scoring import SCORING_KEY, scoring_of


def _option(argv: Sequence[str], names: Sequence[str]) -> str | None:
    """The value of the last of ``names`` given in ``argv`` (``--name value`` or ``--name=value``)."""
    value = None
    for i, arg in enumerate(argv):
        for name in names:
            if arg == name and i + 1 < len(argv):
                value = argv[i + 1]
            elif arg.startswith(name + "="):
                value = arg.split("=", 1)[1]
    return value


def _config_files(argv: Sequence[str]) -> list[dict]:
    """The contents of the ``--config`` files of ``argv`` (a built-in config's by its name) read as YAML mappings."""
    import yaml

    from domainbert.cli.lightning_cli import resolve_builtin_configs  # ``--config finetune``: the package's file

    argv = resolve_builtin_configs(list(argv))
    out = []
    for i, arg in enumerate(argv):
        name = argv[i + 1] if arg in ("--config", "-c") and i + 1 < len(argv) else None
        name = arg.split("=", 1)[1] if arg.startswith("--config=") else name
        if name is None:
            continue
        try:
            data = yaml.safe_load(Path(name).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue  # the CLI reports it
        if isinstance(data, dict):
            out.append(data)
    return out


def _in_config(config: dict, section: str, key: str):
    """``section``'s ``key`` in a config file's mapping (directly or under ``init_args``)."""
    part = config.get(section)
    if not isinstance(part, dict):
        return None
    args = part.get("init_args")
    return part.get(key, args.get(key) if isinstance(args, dict) else None)


def predict_args(argv: Sequence[str]) -> list[str]:
    """The options ``domainbert predict`` adds so that an export reads inputs as it was scored.

    ``--data.max_length N`` when the folder given as ``model.init_from`` records a training length ``N`` and neither
    the command line nor a ``--config`` file sets ``data.max_length``; ``--trainer.precision 32-true`` when it
    records a float32 scoring that the automatic precision would not give. Nothing for ``--ckpt_path`` (a checkpoint
    is read as its config says), for ``--help``, or without a ``--data``.
    """
    if any(a in ("-h", "--help") or a.startswith("--ckpt_path") or "max_length" in a for a in argv):
        return []
    configs = _config_files(argv)
    folder = _option(argv, ("--model.init_from", "--model.init_args.init_from"))
    folder = folder or next((v for c in configs if (v := _in_config(c, "model", "init_from"))), None)
    has_data = _option(argv, ("--data",)) is not None or any(c.get("data") for c in configs)
    if not folder or not has_data or any(_in_config(c, "data", "max_length") for c in configs):
        return []
    record = _folder_record(str(folder))
    out = ["--data.max_length", str(record["max_length"])] if "max_length" in record else []
    precision_given = any("precision" in a for a in argv) or any(_in_config(c, "trainer", "precision") for c in configs)
    if record.get("precision") == "32-true" and not precision_given:
        from domainbert.core.hardware import auto_precision

        if auto_precision() != "32-true":
            out += ["--trainer.precision", "32-true"]
    return out


def _folder_record(folder: str) -> dict[str, Any]:
    """The record in ``folder/config.json`` (checked); ``{}`` when that is no readable file (the CLI says why later)."""
    from types import SimpleNamespace

    path = Path(folder).expanduser() / "config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    record = data.get(SCORING_KEY) if isinstance(data, dict) else None
    return scoring_of(SimpleNamespace(name_or_path=folder, **{SCORING_KEY: record}))
