"""How a model was scored, recorded in its export, so that it answers the same way wherever it is served.

A training stage scores its model (the test pass whose predictions the pipeline's report reads) on texts cut at
``data.max_length`` tokens, in the trainer's precision. :class:`~domainbert.core.callbacks.HFExport` records both in
``<run>/hf``:

- ``tokenizer_config.json``: ``model_max_length`` is that length, so ``pipeline(..., truncation=True)``, the ONNX
  variants' users and any tokenizer call with ``truncation=True`` cut there (not at the base checkpoint's 512);
- ``config.json``: :data:`SCORING_KEY`, ``{"max_length": 128, "precision": "bf16-mixed"}``.

:func:`~domainbert.deploy.classifier.classify` reads both by default (:func:`scored_length`, :func:`runs_bf16`);
``domainbert export`` carries them into every variant folder, with its own ``--max_length`` (an int8 or ONNX variant
runs float32 activations: its record names no precision); ``domainbert predict`` reads the length from the folder
given as ``--model.init_from`` (:func:`domainbert.cli.predict_args.predict_args`). The pooling the model was
scored with is in ``config.json``
already (:mod:`domainbert.core.pooled`).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from domainbert.errors import DomainBertError

#: the ``config.json`` key of the record: ``{"max_length": int, "precision": str}``
SCORING_KEY = "domainbert_scoring"
#: the tokenizer's file, whose ``model_max_length`` is the training length
TOKENIZER_CONFIG = "tokenizer_config.json"
#: the length read when nothing records one (the data modules' default ``max_length``)
DEFAULT_LENGTH = 128


def _patch_json(path: Path, update: dict[str, Any]) -> None:
    """Set ``update``'s keys in the JSON object at ``path`` (left alone when missing), written atomically."""
    from domainbert.core.files import atomic_write_text

    if not path.is_file():
        return
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise DomainBertError(f"{path}: not readable JSON ({err})") from err
    if isinstance(data, dict):
        atomic_write_text(path, json.dumps({**data, **update}, indent=2, sort_keys=True) + "\n")


def record_scoring(folder: str | Path, max_length: int | None, precision: str | None) -> None:
    """Record in the Hugging Face folder ``folder`` the length and precision its model was scored at.

    ``config.json`` gets :data:`SCORING_KEY`; ``tokenizer_config.json`` (when the folder has one) gets
    ``model_max_length``. Each file is rewritten atomically; a None value is not recorded.
    """
    record = {k: v for k, v in (("max_length", max_length), ("precision", precision)) if v is not None}
    if not record:
        return
    folder = Path(folder)
    _patch_json(folder / "config.json", {SCORING_KEY: record})
    if max_length is not None:
        _patch_json(folder / TOKENIZER_CONFIG, {"model_max_length": int(max_length)})


def scoring_of(config) -> dict[str, Any]:
    """The config's record (``{}`` without one), its fields checked.

    Raises:
        DomainBertError: a record that is not ``{"max_length": positive int, "precision": str}`` (either may be
            missing).
    """
    record = getattr(config, SCORING_KEY, None)
    if record is None:
        return {}
    where = f"{getattr(config, 'name_or_path', '') or 'the model'}/config.json: field {SCORING_KEY!r}"
    if not isinstance(record, dict):
        raise DomainBertError(f"{where}: expected an object, got {record!r}")
    length, precision = record.get("max_length"), record.get("precision")
    if length is not None and (isinstance(length, bool) or not isinstance(length, int) or length < 1):
        raise DomainBertError(f"{where}: 'max_length' must be a positive integer, got {length!r}")
    if precision is not None and not isinstance(precision, str):
        raise DomainBertError(f"{where}: 'precision' must be a string, got {precision!r}")
    return {k: v for k, v in (("max_length", length), ("precision", precision)) if v is not None}


def set_scoring(config, **fields: Any) -> None:
    """Give ``config``'s record ``fields`` (a None value removes that field; an empty record is removed)."""
    record = {k: v for k, v in {**scoring_of(config), **fields}.items() if v is not None}
    if record:
        setattr(config, SCORING_KEY, record)
    elif SCORING_KEY in config.__dict__:
        delattr(config, SCORING_KEY)


def with_scoring(config, **fields: Any):
    """A copy of ``config`` whose record has ``fields`` (see :func:`set_scoring`)."""
    out = copy.deepcopy(config)
    set_scoring(out, **fields)
    return out


def scored_length(config, tokenizer, max_length: int | None = None) -> int:
    """The length to cut inputs at: ``max_length`` when given, else the recorded training length.

    Without a record: the tokenizer's ``model_max_length`` (an export written before the record: its base
    checkpoint's). Never beyond the model's position embeddings.
    """
    from domainbert.core.families import max_positions

    limit = max_positions(config)
    if max_length is None:
        max_length = scoring_of(config).get("max_length") or tokenizer.model_max_length
    return min(max_length, limit) if limit is not None else max_length


def export_length(config, max_length: int | None = None) -> int:
    """``domainbert export``'s input length: ``max_length``, else the recorded one, else :data:`DEFAULT_LENGTH`."""
    return max_length or scoring_of(config).get("max_length") or DEFAULT_LENGTH


def runs_bf16(config) -> bool:
    """Whether a model recorded as scored in bf16 (``bf16-mixed``...) runs in bf16 here: where it is native.

    On a CPU without native bf16 (AVX2 only) bf16 autocast is emulated and several times slower than float32:
    there the model runs in float32.
    """
    import torch

    from domainbert.core.hardware import cpu_has_fast_bf16

    precision = str(scoring_of(config).get("precision") or "")
    if not precision.startswith("bf16"):
        return False
    return cpu_has_fast_bf16() or (torch.cuda.is_available() and torch.cuda.is_bf16_supported())


# -- domainbert predict -----------------------------------------------------------------------------------------
