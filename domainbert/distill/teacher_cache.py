"""Teacher-output cache: run the frozen teacher once over the training data and keep its outputs on disk.

Later epochs, and sweep trials over the same teacher and data, read the teacher's logits (and, for the
hidden-state loss, the hidden states of the layers it uses) instead of running the teacher again.

Layout: ``<root>/<fingerprint>/`` holds ``outputs.arrow`` (a ``datasets`` arrow file, memory-mapped on
read) and ``meta.json``. The fingerprint hashes the teacher (its path and the size and modification time of
its files), the training data files (the same of each), ``max_length``, the task and the cached layers; a
change to any of them starts a new cache.

Rows are found by the example index ``idx`` when the batch carries one (the datamodule's row number);
every row also stores a content key (a hash of the example's token ids), which is checked on lookup. A row
whose key does not match (augmented text, a changed file the fingerprint missed) or that is missing makes
the module run the teacher for that batch, so a stale cache costs time, never correctness. Without
``idx`` rows are found by their content key alone.

Only per-example outputs at real tokens are stored (padding is dropped), so batches may be padded
differently from the pass that built the cache. Logits are stored in float32, hidden states in float16
(they are regression targets; this halves the cache, which is about ``examples x tokens x width x 2`` bytes
per cached layer).
"""

from __future__ import annotations

import glob
import hashlib
import json
import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import torch
from datasets.arrow_writer import ArrowWriter

from domainbert.core.files import atomic_dir
from domainbert.errors import DomainBertError

log = logging.getLogger(__name__)

FILE = "outputs.arrow"
META = "meta.json"
VERSION = 1


@dataclass
class CachedOutput:
    """Teacher outputs read from the cache, shaped like a model output (``hidden_states[j]`` None if not kept)."""

    logits: torch.Tensor
    hidden_states: tuple | None = None
    attentions: tuple | None = None


def _file_stats(spec: str) -> list[tuple[str, int, int]]:
    """``(path, size, mtime_ns)`` of every file a path, glob or folder names."""
    paths = sorted(glob.glob(os.path.expanduser(spec), recursive=True)) or [spec]
    out = []
    for p in paths:
        p = Path(p)
        files = sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
        for f in files:
            try:
                st = f.stat()
            except OSError:
                continue
            out.append((str(f.resolve()), st.st_size, st.st_mtime_ns))
    return out


def fingerprint(teacher: str, data_files: Iterable[str], max_length: int | None, extra: dict | None = None) -> str:
    """A hex digest identifying (teacher, training data, max_length, extra settings).

    Args:
        teacher: the teacher's folder (or hub name).
        data_files: the training data paths, globs or folders.
        max_length: the tokenization length.
        extra: anything else the outputs depend on (task, cached layers).
    """
    teacher_files = _file_stats(str(Path(teacher) / "*")) if teacher and Path(teacher).is_dir() else []
    payload = {
        "version": VERSION,
        "teacher": str(Path(teacher).resolve()) if Path(teacher).exists() else teacher,
        "teacher_files": [f for f in teacher_files if not f[0].endswith(".md")],
        "data": [_file_stats(str(spec)) for spec in data_files],
        "max_length": max_length,
        "extra": extra or {},
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:20]


def training_fingerprint(teacher: str, datamodule: Any, loader: Iterable[dict], extra: dict) -> str:
    """The fingerprint of a teacher's outputs over a training set (see :func:`fingerprint`).

    The data is identified by the datamodule's training files and ``max_length``; without a file list (plain
    dataloaders, in-memory data) by the content of every example of ``loader``.
    """
    files = data_files(datamodule)
    extra = {**extra, "data": type(datamodule).__name__ if datamodule is not None else None}
    if files is None:
        keys = sorted(k for b in loader for k in content_keys(b["input_ids"], b["attention_mask"]))
        extra["content"] = hashlib.sha256(str(keys).encode()).hexdigest()
        files = []
    return fingerprint(teacher, files, getattr(datamodule, "max_length", None), extra)


def data_files(datamodule: Any) -> list[str] | None:
    """The training file spec(s) of a datamodule, if it says where its data comes from."""
    if datamodule is None:
        return None
    paths = getattr(datamodule, "paths", None)
    spec = paths.get("train") if isinstance(paths, dict) else None
    hparams = getattr(datamodule, "hparams", None)
    spec = spec or getattr(datamodule, "train", None) or (hparams.get("train") if hasattr(hparams, "get") else None)
    if not spec:
        return None
    return [str(s) for s in spec] if isinstance(spec, (list, tuple)) else [str(spec)]


def content_keys(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> list[int]:
    """One signed 64-bit hash per example of its real (unpadded) token ids."""
    out = []
    ids = input_ids.detach().cpu().long()
    mask = attention_mask.detach().cpu().bool()
    for row, m in zip(ids, mask):
        digest = hashlib.blake2b(row[m].numpy().astype("<i8").tobytes(), digest_size=8).digest()
        out.append(int.from_bytes(digest, "little", signed=True))
    return out


def batch_indices(batch: dict) -> list[int] | None:
    """The example indexes of a batch: ``batch["idx"]``, or ``idx`` in each ``batch["meta"]`` row; else None."""
    idx = batch.get("idx")
    if idx is not None:
        return [int(i) for i in (idx.tolist() if torch.is_tensor(idx) else idx)]
    meta = batch.get("meta")
    if meta and all(isinstance(m, dict) and "idx" in m for m in meta):
        return [int(m["idx"]) for m in meta]
    return None


class TeacherCache:
    """Cached teacher outputs of one (teacher, data) fingerprint, looked up per batch."""

    def __init__(self, path: Path, dataset: datasets.Dataset, meta: dict) -> None:
        """Wrap an opened cache; use :meth:`open` or :meth:`build`."""
        self.path = path
        self.meta = meta
        self.layers: list[int] = list(meta.get("layers", []))
        self.per_token: bool = bool(meta["per_token"])
        self.ds = dataset.with_format("numpy")
        keys = np.asarray(dataset["key"], dtype=np.int64)
        idx = np.asarray(dataset["idx"], dtype=np.int64)
        self.keys = keys
        self.row_of_idx = {int(i): r for r, i in enumerate(idx) if i >= 0}
        self.row_of_key = {int(k): r for r, k in enumerate(keys)}
        #: batches found in the cache / batches that had to run the teacher, since opening
        self.hits = 0
        self.misses = 0
        if not self.per_token:  # small: keep every row's logits in memory
            self.logits = torch.from_numpy(np.stack(dataset.with_format("numpy")["logits"])).float()

    def __len__(self) -> int:
        return len(self.ds)

    @classmethod
    def open(cls, root: str | os.PathLike, key: str) -> TeacherCache | None:
        """The cache of fingerprint ``key`` under ``root``, or None when it was never built."""
        path = Path(root) / key
        if not (path / FILE).exists() or not (path / META).exists():
            return None
        meta = json.loads((path / META).read_text(encoding="utf-8"))
        return cls(path, datasets.Dataset.from_file(str(path / FILE)), meta)

    @classmethod
    def build(
        cls,
        root: str | os.PathLike,
        key: str,
        run_teacher: Callable[[dict], tuple[torch.Tensor, tuple | None]],
        batches: Iterable[dict],
        layers: list[int] | None = None,
        description: dict | None = None,
    ) -> TeacherCache:
        """Run the teacher over ``batches`` once and write its outputs under ``root/key``.

        Args:
            root: the cache folder (``model.teacher_cache``).
            key: the fingerprint (see :func:`fingerprint`).
            run_teacher: ``batch -> (logits, hidden_states)``, run under ``no_grad`` by the caller.
            batches: the training batches (with ``input_ids`` and ``attention_mask``; ``idx`` if available).
            layers: the ``hidden_states`` indexes to keep (none by default).
            description: what built it, kept in ``meta.json``.
        """
        layers = sorted(set(layers or []))
        path = Path(root) / key
        per_token = None
        rows = 0
        with atomic_dir(path) as tmp:
            writer = ArrowWriter(path=str(tmp / FILE))
            seen_keys: set[int] = set()
            try:
                for batch in batches:
                    mask = batch["attention_mask"].bool()
                    keys = content_keys(batch["input_ids"], mask)
                    idxs = batch_indices(batch) or [-1] * len(keys)
                    with torch.no_grad():
                        logits, hidden = run_teacher(batch)
                    logits = logits.detach().float().cpu()
                    per_token = logits.dim() == 3 if per_token is None else per_token
                    mcpu = mask.cpu()
                    out: dict[str, list] = {"idx": [], "key": [], "length": [], "logits": []}
                    for j in layers:
                        out[f"hidden_{j}"] = []
                    for r, (k, i) in enumerate(zip(keys, idxs)):
                        if i < 0 and k in seen_keys:
                            continue  # a duplicate text: one row is enough
                        seen_keys.add(k)
                        out["idx"].append(int(i))
                        out["key"].append(k)
                        out["length"].append(int(mcpu[r].sum()))
                        row_logits = logits[r][mcpu[r]] if per_token else logits[r]
                        out["logits"].append(row_logits.reshape(-1).numpy())
                        for j in layers:
                            h = hidden[j][r][mask[r]].detach().float().cpu().reshape(-1).numpy()
                            out[f"hidden_{j}"].append(h.astype(np.float16))  # targets: half precision is plenty
                    if out["key"]:
                        writer.write_batch(out)
                        rows += len(out["key"])
            finally:
                writer.finalize()
                writer.close()
            if rows == 0:
                raise DomainBertError("the teacher cache got no training examples: the training dataloader is empty")
            meta = {
                "version": VERSION,
                "fingerprint": key,
                "rows": rows,
                "per_token": bool(per_token),
                "layers": layers,
                "description": description or {},
            }
            (tmp / META).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        log.info("teacher cache: wrote %d examples to %s", rows, path)
        cache = cls.open(root, key)
        if cache is None:
            raise DomainBertError(f"teacher cache {path}: written, but it cannot be read back (is the disk full?)")
        return cache

    # -- lookup ---------------------------------------------------------------------------------------
    def rows_for(self, batch: dict) -> list[int] | None:
        """Cache rows of a batch's examples, or None when any is missing or stale."""
        keys = content_keys(batch["input_ids"], batch["attention_mask"])
        idxs = batch_indices(batch)
        rows = []
        for n, k in enumerate(keys):
            r = self.row_of_idx.get(idxs[n]) if idxs is not None else self.row_of_key.get(k)
            if r is None or int(self.keys[r]) != k:
                return None
            rows.append(r)
        return rows

    def lookup(self, batch: dict, hidden_width: int | None = None) -> CachedOutput | None:
        """The teacher outputs of ``batch`` padded like it, on its device; None on a miss (run the teacher)."""
        rows = self.rows_for(batch)
        if rows is None:
            self.misses += 1
            return None
        self.hits += 1
        mask = batch["attention_mask"].bool()
        device = batch["input_ids"].device
        if not self.per_token and not self.layers:
            return CachedOutput(logits=self.logits[rows].to(device))
        got = self.ds[rows]
        if self.per_token:
            logits = self._scatter(got["logits"], mask)
        else:
            logits = self.logits[rows].to(device)
        hidden = None
        if self.layers:
            top = max(self.layers)
            hidden = [None] * (top + 1)
            for j in self.layers:
                hidden[j] = self._scatter(got[f"hidden_{j}"], mask)
            hidden = tuple(hidden)
        return CachedOutput(logits=logits, hidden_states=hidden)

    @staticmethod
    def _scatter(flat_rows, mask: torch.Tensor) -> torch.Tensor:
        """Put per-example ``(L_i * D)`` vectors back at the real-token positions of a ``(B, S, D)`` tensor."""
        lengths = mask.sum(1).tolist()
        first = np.asarray(flat_rows[0])
        width = first.size // max(1, lengths[0])
        out = torch.zeros(*mask.shape, width, dtype=torch.float32)
        mcpu = mask.cpu()
        for r, flat in enumerate(flat_rows):
            out[r][mcpu[r]] = torch.tensor(np.asarray(flat, dtype=np.float32).reshape(lengths[r], width))
        return out.to(mask.device)
