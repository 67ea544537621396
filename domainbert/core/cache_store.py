"""Tensors kept between stages under domainbert's cache folder, written atomically and checked on every read.

An entry is two files in ``<cache root>/<kind>/``: ``<key>.safetensors`` (the tensors) and ``<key>.json`` (a sidecar
naming the key, the tensor file's SHA-256 and what the entry holds). The tensor file is renamed into place first and
the sidecar last, each through a temporary file, so a reader never sees half a file; a sidecar that is missing, not
JSON, of another key, or whose digest does not match the tensor file makes the entry absent: it is computed again
and rewritten, never trusted. A cache folder that cannot be written is no error (the stage says so and goes on).

The cache root is :func:`domainbert.core.files.cache_root` (the ``--help`` cache's too): ``$DOMAINBERT_CACHE``, else
``$XDG_CACHE_HOME/domainbert``, else ``~/.cache/domainbert``. ``DOMAINBERT_EMBEDDING_CACHE=off`` (or ``0``,
``false``, ``no``) turns this cache off: nothing is read or written, everything is computed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path

import torch

from domainbert.errors import DomainBertError

#: the environment variable that turns the cache off (``off``, ``0``, ``false``, ``no``)
ENV = "DOMAINBERT_EMBEDDING_CACHE"


def enabled() -> bool:
    """Whether the cache is on (it is unless ``$DOMAINBERT_EMBEDDING_CACHE`` says ``off``)."""
    return os.environ.get(ENV, "").strip().lower() not in ("off", "0", "false", "no")


def root() -> Path:
    """The cache root, shared with the ``--help`` cache (:func:`domainbert.core.files.cache_root`)."""
    from domainbert.core.files import cache_root

    return cache_root()


def paths(kind: str, key: str) -> tuple[Path, Path]:
    """The tensor file and the sidecar of the entry ``key`` of ``kind`` (``embeddings``, ``probes``)."""
    base = root() / kind
    return base / f"{key}.safetensors", base / f"{key}.json"


def shown(kind: str, key: str) -> str:
    """The entry's place for a log line (:func:`~domainbert.core.shown.short_path`), the key cut to 12 characters."""
    from domainbert.core.shown import short_path

    return short_path(root() / kind / key[:12]) + "…"


def read(kind: str, key: str) -> tuple[dict[str, torch.Tensor], dict] | None:
    """The tensors and the sidecar of an entry; None when it is absent, partial or corrupt (or the cache is off)."""
    from safetensors.torch import load

    if not enabled():
        return None
    tensors_path, sidecar_path = paths(kind, key)
    try:
        meta = json.loads(sidecar_path.read_text(encoding="utf-8"))
        data = tensors_path.read_bytes()
        if not isinstance(meta, dict) or meta.get("key") != key or meta.get("sha256") != _digest(data):
            return None
        return load(data), meta
    except (OSError, ValueError, RuntimeError, TypeError):  # absent, unreadable, not JSON, not safetensors
        return None


def write(kind: str, key: str, tensors: dict[str, torch.Tensor], meta: dict) -> bool:
    """Store an entry (tensor file first, sidecar last); whether it was stored (a read-only cache is no error)."""
    from safetensors.torch import save

    from domainbert.core.files import atomic_file, atomic_write_text

    if not enabled():
        return False
    tensors_path, sidecar_path = paths(kind, key)
    data = save({k: v.detach().cpu().contiguous() for k, v in tensors.items()})
    try:
        with contextlib.suppress(FileNotFoundError):
            sidecar_path.unlink()  # an old sidecar must not vouch for the new tensor file while it is renamed
        with atomic_file(tensors_path, "the cache entry") as tmp:
            tmp.write_bytes(data)
        atomic_write_text(sidecar_path, json.dumps({**meta, "key": key, "sha256": _digest(data)}, indent=1) + "\n")
    except (OSError, DomainBertError):
        return False
    return True


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
