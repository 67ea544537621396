"""Teacher-output cache: keep the frozen teacher's outputs over the training data on disk.

Later epochs, and sweep trials over the same teacher and data, read the teacher's logits (and, for the
hidden-state loss, the hidden states of the layers it uses) instead of running the teacher again.

The cache fills as training runs (:class:`CacheFill`): the outputs the teacher computes for a batch the cache
lacks are kept and written at the end of the epoch, so a short run (``max_steps``, ``limit_train_batches``) runs
the teacher only on the batches it trains on, a later run adds the rows it lacks, and an interrupted run leaves
the cache as it was. :meth:`TeacherCache.build` fills one in a single pass over given batches.

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

import contextlib
import glob
import hashlib
import json
import logging
import os
import shutil
import tempfile
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import torch
from datasets.arrow_writer import ArrowWriter

from domainbert.core.files import MARKER, atomic_dir
from domainbert.data import contract
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
    return fingerprint(teacher, files, contract.data_max_length(datamodule), extra)


def data_files(datamodule: Any) -> list[str] | None:
    """The training file spec(s) of a datamodule, if it says where its data comes from."""
    spec = contract.data_paths(datamodule).get("train")
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


def cached_rows(root: str | os.PathLike, key: str) -> int | None:
    """The number of examples in the cache ``root/key`` (from its ``meta.json``); None when there is none."""
    meta = Path(root) / key / META
    try:
        return int(json.loads(meta.read_text(encoding="utf-8"))["rows"]) if (meta.parent / FILE).exists() else None
    except (OSError, ValueError, KeyError, TypeError):
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
        self.idx = idx
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
        fill = CacheFill(root, key, layers, description=description)
        try:
            for batch in batches:
                with torch.no_grad():
                    logits, hidden = run_teacher(batch)
                fill.add(batch, logits, hidden)
            if fill.rows == 0:
                raise DomainBertError("the teacher cache got no training examples: the training dataloader is empty")
            return fill.commit()
        finally:
            fill.discard()  # after a commit: nothing left to remove

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


class CacheFill:
    """Teacher outputs kept batch by batch as training runs the teacher, written as a cache by :meth:`commit`.

    Only the rows the run actually sends through the teacher are kept (a ``max_steps 3`` smoke run keeps three
    batches), so filling costs no teacher pass of its own. Rows go to an arrow file in a temporary folder beside
    the cache (``.<key>.tmp-<pid>-*``, the :func:`~domainbert.core.files.atomic_dir` naming, so a killed run's
    leftovers are removed by the next write). :meth:`commit` swaps in the new cache atomically, with the rows of
    the cache it extends (``base``) that the new ones do not replace; :meth:`discard` (also run when the object
    is collected or the interpreter exits) removes the temporary folder, so an interrupted fill leaves no cache.
    """

    def __init__(
        self,
        root: str | os.PathLike,
        key: str,
        layers: list[int] | None = None,
        base: TeacherCache | None = None,
        description: dict | None = None,
    ) -> None:
        """Start a fill of cache ``root/key`` keeping ``hidden_states[j]`` for ``j`` in ``layers``, over ``base``."""
        self.target = Path(os.path.abspath(Path(root) / key))
        self.key, self.base, self.description = key, base, description or {}
        self.layers = sorted(set(layers if layers is not None else (base.layers if base else [])))
        self.target.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix=f".{key}.tmp-{os.getpid()}-", dir=self.target.parent))
        (self.tmp / MARKER).write_text("a teacher cache being filled by domainbert; removed if left behind\n")
        self._cleanup = weakref.finalize(self, shutil.rmtree, str(self.tmp), True)
        self.writer: ArrowWriter | None = ArrowWriter(path=str(self.tmp / FILE))
        self.per_token: bool | None = base.per_token if base is not None else None
        self.rows = 0
        self._idx: set[int] = set()
        self._keys: set[int] = set()

    def _known(self, idx: int, key: int) -> bool:
        """True when the row is kept already: by this fill, or by ``base`` (there, by index when it has one)."""
        if (idx >= 0 and idx in self._idx) or (idx < 0 and key in self._keys):
            return True
        if self.base is None:
            return False
        # a base row of the same index with another key is stale (augmented text): not worth replacing
        return idx in self.base.row_of_idx if idx >= 0 else key in self.base.row_of_key

    def add(self, batch: dict, logits: torch.Tensor, hidden: tuple | None) -> int:
        """Keep the teacher's outputs of ``batch``'s examples not kept yet; the number of rows added."""
        if self.writer is None:
            raise DomainBertError("teacher cache: this fill was committed or discarded; start a new one")
        mask = batch["attention_mask"].detach().cpu().bool()
        keys = content_keys(batch["input_ids"], mask)
        idxs = batch_indices(batch) or [-1] * len(keys)
        logits = logits.detach().float().cpu()
        self.per_token = logits.dim() == 3 if self.per_token is None else self.per_token
        out: dict[str, list] = {"idx": [], "key": [], "length": [], "logits": []}
        out.update({f"hidden_{j}": [] for j in self.layers})
        for r, (k, i) in enumerate(zip(keys, idxs)):
            if self._known(i, k):
                continue
            (self._idx if i >= 0 else self._keys).add(i if i >= 0 else k)
            out["idx"].append(int(i))
            out["key"].append(k)
            out["length"].append(int(mask[r].sum()))
            out["logits"].append((logits[r][mask[r]] if self.per_token else logits[r]).reshape(-1).numpy())
            for j in self.layers:
                h = hidden[j][r].detach().float().cpu()[mask[r]].reshape(-1).numpy()
                out[f"hidden_{j}"].append(h.astype(np.float16))  # targets: half precision is plenty
        if out["key"]:
            self.writer.write_batch(out)
            self.rows += len(out["key"])
        return len(out["key"])

    def _base_rows(self) -> list[int]:
        """The rows of ``base`` to carry into the new cache: those the new rows do not replace."""
        pairs = zip(self.base.idx.tolist(), self.base.keys.tolist())
        return [r for r, (i, k) in enumerate(pairs) if not self._known_new(i, k)]

    def _known_new(self, idx: int, key: int) -> bool:
        return idx in self._idx if idx >= 0 else key in self._keys

    def commit(self) -> TeacherCache:
        """Write the kept rows (and ``base``'s) as the cache ``root/key``, atomically; the cache, opened."""
        if self.writer is None:
            raise DomainBertError("teacher cache: this fill was committed or discarded already")
        if self.rows == 0:
            self.discard()
            if self.base is None:
                raise DomainBertError("the teacher cache got no training examples: the teacher ran on no batch")
            return self.base
        keep = self._base_rows() if self.base is not None else []
        if keep:
            self.writer.write_table(self.base.ds.data.table.take(keep))
        carried = len(keep)
        self.writer.finalize()
        self.writer.close()
        self.writer = None
        meta = {
            "version": VERSION,
            "fingerprint": self.key,
            "rows": self.rows + carried,
            "per_token": bool(self.per_token),
            "layers": self.layers,
            "description": self.description,
        }
        with atomic_dir(self.target, "the teacher cache") as tmp:
            os.replace(self.tmp / FILE, tmp / FILE)
            (tmp / META).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        self.discard()
        log.info("teacher cache: wrote %d examples (%d new) to %s", meta["rows"], self.rows, self.target)
        cache = TeacherCache.open(self.target.parent, self.key)
        if cache is None:
            raise DomainBertError(f"teacher cache {self.target}: written, but it cannot be read back (disk full?)")
        return cache

    def discard(self) -> None:
        """Drop the rows kept so far and the temporary folder; the cache on disk stays as it was."""
        if self.writer is not None:
            with contextlib.suppress(Exception):
                self.writer.close()
            self.writer = None
        self._cleanup()
