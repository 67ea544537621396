"""Tokenized splits shared by every stage and seed that reads the same file with the same tokenizer and settings.

Every split goes through :func:`tokenize`, a ``Dataset.map`` whose ``new_fingerprint`` (the name ``datasets`` gives
the cache file, ``cache-<fingerprint>.arrow`` beside the read file's arrow cache) is built here from what decides
the output, never from ``datasets``' pickle hash of the encoder and its tokenizer:

- the input's own ``datasets`` fingerprint (the file as read: its content, through the digest of its bytes that
  :func:`domainbert.data.readers.read` names the read split by, its path, the reading options and any transform
  before tokenizing), so an edited file is tokenized again, even with its modification time restored;
- the tokenizer's content (:func:`tokenizer_fingerprint`): its class, its whole ``tokenizer.json`` (vocabulary,
  normalizer, pre-tokenizer, post-processor; the truncation and padding a previous call left on it are ignored),
  its special and added tokens, its truncation and padding sides and the inputs it returns, never its folder's name
  (a stage that loads a copy of the same tokenizer, e.g. a fine-tuning seed after DAPT, reads the same files);
- the encoder's settings (its fields but the tokenizer: columns, ``max_length``, stride, label ids...) and the source
  of the module that defines it, so a changed encoder never reads old files;
- the ``map`` options that change the rows (``remove_columns``, ``with_indices``), :data:`SCHEMA` and the versions of
  transformers and tokenizers.

Every reuse prints one line, in the style of :mod:`domainbert.core.embed_cache`, e.g. ``[cache] tokenized
train.jsonl (1,149 rows, max_length 128) reused from ~/.cache/huggingface/datasets/…/cache-1f2e3d4c5b6a….arrow``. A
hit is read from the files themselves: the result's cache files all existed before the call. Each file written is
recorded beside it (``domainbert-tokenized-<fingerprint>.json``: its size and digest); a kept file that does not
match its record (cut short, replaced) or that ``datasets`` cannot read is removed and the split tokenized again,
with one line naming it. A split tokenized now
says nothing more than the ``Tokenizing`` progress bar of ``datasets`` (shown on a terminal), so a first run's output
stays a handful of lines; nor does a split that ``datasets`` keeps in memory (caching disabled, an in-memory input).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import inspect
import json
import os
from pathlib import Path
from typing import Any

import datasets

from domainbert.core.compat import dataset_fingerprint

#: bumped when the way splits are tokenized changes outside the encoders' modules, so older files are never read
SCHEMA = 1
#: ``Dataset.map`` options that change the rows it writes (the others: progress bar, processes, batch size)
ROW_OPTIONS = ("remove_columns", "with_indices", "batched", "input_columns")


def tokenizer_fingerprint(tokenizer) -> str:
    """A hash of everything that decides a tokenizer's output: class, vocabulary, rules, special tokens, settings.

    Equal for two tokenizers loaded from the same files (in one process or two), whatever folder they came from
    and whatever a previous call left as the backend's truncation and padding (each call sets its own).
    """
    h = hashlib.sha256(type(tokenizer).__name__.encode())
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:  # fast tokenizers: the whole tokenizer.json, less the per-call truncation and padding
        h.update(_backend_state(backend.to_str()))
    else:
        h.update(json.dumps(sorted(tokenizer.get_vocab().items())).encode())
    extra = {
        "special": getattr(tokenizer, "special_tokens_map", {}),
        "added": sorted(str(t) for t in getattr(tokenizer, "get_added_vocab", dict)()),
        "sides": [getattr(tokenizer, "truncation_side", None), getattr(tokenizer, "padding_side", None)],
        "inputs": list(getattr(tokenizer, "model_input_names", [])),
    }
    h.update(json.dumps(extra, sort_keys=True, default=str).encode())
    return h.hexdigest()


#: The last backend state :func:`_backend_state` normalised: ``(its tokenizer.json text, the normalised bytes)``.
_LAST_STATE: tuple[str, bytes] = ("", b"")


def _backend_state(raw: str) -> bytes:
    """A fast tokenizer's ``tokenizer.json`` text less truncation and padding, as sorted JSON bytes.

    The last one is remembered (a split's train and validation parts ask for the same tokenizer's): parsing and
    sorting a large vocabulary costs tens of milliseconds, comparing the text a fraction of one.
    """
    global _LAST_STATE
    if _LAST_STATE[0] != raw:
        state = json.loads(raw)
        state.pop("truncation", None)
        state.pop("padding", None)
        _LAST_STATE = (raw, json.dumps(state, sort_keys=True).encode())
    return _LAST_STATE[1]


def encoder_settings(encoder) -> dict[str, Any]:
    """The settings of an encoder object (its dataclass fields, else its attributes), less its tokenizer."""
    if dataclasses.is_dataclass(encoder):
        fields = {f.name: getattr(encoder, f.name) for f in dataclasses.fields(encoder)}
    else:
        fields = dict(vars(encoder))
    fields.pop("tokenizer", None)
    return fields


def code_digest(encoder) -> str:
    """The digest of the source file defining the encoder's class (empty when it has none)."""
    try:
        return hashlib.sha256(Path(inspect.getsourcefile(type(encoder)) or "").read_bytes()).hexdigest()
    except (OSError, TypeError):  # a class defined interactively: its name and settings key it alone
        return ""


def fingerprint(ds: datasets.Dataset, encoder, **map_options) -> str:
    """The fingerprint of ``ds`` mapped by ``encoder`` (an object with a ``tokenizer``) with ``map_options``.

    Args:
        ds: the split as read.
        encoder: the batched encoder; its ``tokenizer`` attribute is the tokenizer it calls.
        **map_options: the ``Dataset.map`` options; those of :data:`ROW_OPTIONS` count.
    """
    import tokenizers
    import transformers

    cls = type(encoder)
    fields = {
        "schema": SCHEMA,
        "input": dataset_fingerprint(ds),
        "tokenizer": tokenizer_fingerprint(encoder.tokenizer),
        "encoder": f"{cls.__module__}.{cls.__qualname__}",
        "code": code_digest(encoder),
        "settings": encoder_settings(encoder),
        "map": {k: map_options[k] for k in ROW_OPTIONS if k in map_options},
        "versions": [transformers.__version__, tokenizers.__version__],
    }
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=repr).encode()).hexdigest()[:32]


def tokenize(ds: datasets.Dataset, encoder, source: str, **map_options) -> datasets.Dataset:
    """``ds.map(encoder, **map_options)`` under a stable fingerprint; a reuse says so in one ``[cache]`` line.

    A kept file is reused only when it is the file written here (its size and digest, recorded beside it when it was
    written); one cut short, replaced or unreadable is tokenized again, with one line naming it.

    Args:
        ds: the split as read.
        encoder: the batched encoder (with a ``tokenizer`` and, for the log line, a ``max_length`` attribute).
        source: the split's path, named in the log line by its last part.
        **map_options: passed to ``Dataset.map`` (``batched``, ``num_proc``, ``remove_columns``, ``desc``...).
    """
    from domainbert.core.embed_cache import say

    key = fingerprint(ds, encoder, **map_options)
    folder = cache_folder(ds)
    if folder is not None:
        _drop_damaged(folder, key, source, verify=True)
    before = set(os.listdir(folder)) if folder is not None else set()
    try:
        out = ds.map(encoder, new_fingerprint=key, **map_options)
    except Exception:  # noqa: BLE001 - pyarrow/datasets on a kept file that no record vouches for
        if folder is None or not _drop_damaged(folder, key, source, verify=False):
            raise
        before = set()
        out = ds.map(encoder, new_fingerprint=key, **map_options)
    files = [Path(f["filename"]) for f in out.cache_files]
    if folder is not None and files and all(f.parent == folder and f.name in before for f in files):
        length = getattr(encoder, "max_length", None)
        size = f"max_length {length}" if length else "untruncated"
        say(f"[cache] tokenized {Path(source).name} ({len(ds):,} rows, {size}) reused from {shown(files)}")
    if folder is not None and files and all(f.parent == folder and key in f.name for f in files):
        _record(folder, key, files)
    return out


def _kept(folder: Path, key: str) -> list[Path]:
    """The files ``datasets`` keeps for the map under ``key`` (one, or a shard per process)."""
    return sorted(folder.glob(f"cache-{key}*.arrow"))


def _record_path(folder: Path, key: str) -> Path:
    return folder / f"domainbert-tokenized-{key}.json"


def _record(folder: Path, key: str, files: list[Path]) -> None:
    """Record the size and digest of the files just written (or first vouched for) under ``key``."""
    from domainbert.core.digest import file_digest
    from domainbert.core.files import atomic_write_text

    path = _record_path(folder, key)
    with contextlib.suppress(OSError):
        entry = {f.name: [f.stat().st_size, file_digest(f)] for f in files}
        if not path.is_file() or json.loads(path.read_text(encoding="utf-8")) != entry:
            atomic_write_text(path, json.dumps(entry, sort_keys=True) + "\n")


def _drop_damaged(folder: Path, key: str, source: str, verify: bool) -> bool:
    """Remove the kept files of ``key`` when damaged; whether any were removed (each removal says one line).

    With ``verify``, damaged means not what the record says (cut short, replaced, a shard missing); files without a
    record (an older domainbert's) are left to ``datasets``. Without, every kept file of ``key`` goes (``datasets``
    could not read it).
    """
    from domainbert.core.digest import file_digest
    from domainbert.core.embed_cache import say

    kept, record = _kept(folder, key), _record_path(folder, key)
    if not kept:  # nothing kept (or removed by ``cleanup_cache_files``): a record alone vouches for nothing
        with contextlib.suppress(OSError):
            record.unlink()
        return False
    if verify:
        try:
            entry = json.loads(record.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return False
        except (OSError, ValueError):
            entry = None
        try:
            ok = isinstance(entry, dict) and sorted(entry) == [f.name for f in kept]
            ok = ok and all(entry[f.name] == [f.stat().st_size, file_digest(f)] for f in kept)
        except OSError:
            ok = False
        if ok:
            return False
    for f in kept:
        with contextlib.suppress(OSError):
            f.unlink()
    with contextlib.suppress(OSError):
        record.unlink()
    name = Path(source).name
    say(f"[cache] tokenized {name}: the kept file {shown(kept)} was cut short or replaced; tokenizing again")
    return True


def cache_folder(ds: datasets.Dataset) -> Path | None:
    """The folder ``datasets`` writes ``ds``'s map results into; None when it would not store them."""
    if not datasets.is_caching_enabled() or not ds.cache_files:
        return None
    return Path(ds.cache_files[0]["filename"]).parent


def shown(files: list[Path]) -> str:
    """The cache file (or the shards' pattern) for a log line, shortened (:func:`~domainbert.core.shown.short_path`)."""
    from domainbert.core.shown import short_path

    path = files[0] if len(files) == 1 else files[0].parent / (files[0].name.split("_")[0] + "_*.arrow")
    return short_path(path)
