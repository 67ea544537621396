"""Mean-pooled sentence embeddings of any encoder: the one home of the pooling used across domainbert.

Sentence-embedding checkpoints (all-MiniLM-L6-v2 and other sentence-transformers models) were trained so that
the mean of their token states, padding excluded, is the text's representation. The frozen-embedding probe,
corpus curation and the mean-pooling classification head all use :func:`mean_pool`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch

#: texts per forward pass where a stage embeds texts (the probe, its head start, curation, ProbeWatch); it sets the
#: padding of each batch, so it is part of the embedding cache's key (:mod:`domainbert.core.embed_cache`)
BATCH_SIZE = 64


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Average the token states ``hidden`` (batch, length, width) over the positions where the mask is 1."""
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)


def cls_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The state of each row's first token (``[CLS]``/``<s>``) of ``hidden`` (batch, length, width)."""
    return hidden[:, 0]


#: the poolings :func:`embed_texts` offers: name -> ``f(hidden, attention_mask)``
POOLINGS = {"mean": mean_pool, "cls": cls_pool}


def native_pooling(path: str | Path) -> str | None:
    """The pooling a sentence-transformers checkpoint was trained with (``mean``/``cls``/``max``), else None.

    Reads ``modules.json`` and the pooling module's ``config.json`` of a local folder; a folder that is not a
    sentence-transformers model (or a hub name) gives None.
    """
    folder = Path(path)
    modules = folder / "modules.json"
    if not modules.is_file():
        return None
    try:
        for mod in json.loads(modules.read_text(encoding="utf-8")):
            if str(mod.get("type", "")).endswith("Pooling"):
                cfg = json.loads((folder / mod.get("path", "") / "config.json").read_text(encoding="utf-8"))
                for mode in ("mean", "cls", "max"):
                    if cfg.get(f"pooling_mode_{mode}_tokens" if mode != "cls" else "pooling_mode_cls_token"):
                        return mode
    except (OSError, ValueError, AttributeError):
        return None
    return None


@torch.no_grad()
def embed_texts(
    encoder: torch.nn.Module,
    tokenizer,
    texts: Sequence[str | tuple[str, str]],
    batch_size: int = BATCH_SIZE,
    max_length: int = 128,
    bf16: bool | None = None,
    pooling: str = "mean",
) -> torch.Tensor:
    """Mean-pooled embeddings (float32, rows in the order of ``texts``) of a frozen encoder.

    Texts are batched in order of length, so padding costs little, and on the CPU the batches reuse freed memory
    (:func:`~domainbert.core.cpu_memory.reusing_freed_memory`). ``texts`` may hold ``(text, pair)`` tuples.

    Args:
        encoder: a model whose output has ``last_hidden_state`` (``AutoModel``).
        tokenizer: its tokenizer.
        texts: the texts.
        batch_size: texts per forward pass.
        max_length: truncation length in tokens.
        bf16: run under bf16 autocast; None: where bf16 is native on this machine.
        pooling: ``mean`` (the default, see the module's docstring) or ``cls`` (the first token's state).

    Raises:
        DomainBertError: an unknown ``pooling``.
    """
    from domainbert.core.hardware import auto_precision
    from domainbert.errors import DomainBertError

    if pooling not in POOLINGS:
        raise DomainBertError(f"pooling={pooling!r}: expected one of {sorted(POOLINGS)}")
    device = next(encoder.parameters()).device
    if bf16 is None:
        bf16 = auto_precision(device.type) == "bf16-mixed"
    from domainbert.core.cpu_memory import reusing_freed_memory

    encoder.eval()
    out = torch.empty(len(texts), encoder.config.hidden_size)
    with reusing_freed_memory(device.type):
        for ids, inputs in sorted_batches(tokenizer, texts, batch_size, max_length, device):
            out[ids] = encode(encoder, inputs, bf16, pooling)
    return out


@contextlib.contextmanager
def modes_kept(module: torch.nn.Module) -> Iterator[None]:
    """Give back every submodule's train/eval mode on leaving (:func:`embed_texts` puts the encoder in eval mode)."""
    modes = {m: m.training for m in module.modules()}
    try:
        yield
    finally:
        for m, mode in modes.items():
            m.training = mode


def sorted_batches(tokenizer, texts: Sequence[str | tuple[str, str]], batch_size: int, max_length: int, device):
    """``(row ids, model inputs on device)`` over ``texts`` in batches of similar length, so padding costs little.

    Texts are batched in order of their token count (ties in file order) and padded per batch. Only the counts
    of all texts are held (a corpus can be large); each batch is tokenized again when its turn comes. ``texts``
    may hold ``(text, pair)`` tuples; a caller writes each batch's outputs to ``out[ids]`` to keep the order of
    ``texts``.
    """
    counts = token_counts(tokenizer, texts, max_length)
    order = sorted(range(len(texts)), key=counts.__getitem__)
    for start in range(0, len(order), batch_size):
        ids = order[start : start + batch_size]
        enc = _tokenize(tokenizer, [texts[i] for i in ids], max_length, padding=True, return_tensors="pt")
        yield ids, {k: v.to(device) for k, v in enc.items() if k in tokenizer.model_input_names}


def token_counts(tokenizer, texts: Sequence[str | tuple[str, str]], max_length: int, chunk: int = 4096) -> list[int]:
    """The number of tokens of each text (or pair) after truncation to ``max_length``, ``chunk`` texts at a time."""
    counts: list[int] = []
    for start in range(0, len(texts), chunk):
        counts += [len(ids) for ids in _tokenize(tokenizer, texts[start : start + chunk], max_length)["input_ids"]]
    return counts


def _tokenize(tokenizer, texts: Sequence[str | tuple[str, str]], max_length: int, **kw):
    pairs = bool(texts) and not isinstance(texts[0], str)
    return tokenizer(
        [t[0] for t in texts] if pairs else list(texts),
        [t[1] for t in texts] if pairs else None,
        truncation=True,
        max_length=max_length,
        **kw,
    )


@torch.no_grad()
def encode(encoder: torch.nn.Module, inputs: dict, bf16: bool, pooling: str = "mean") -> torch.Tensor:
    """Pooled (``mean`` by default) float32 embeddings, on the CPU, of one tokenized batch with ``attention_mask``."""
    device = next(encoder.parameters()).device
    inputs = {k: v.to(device) for k, v in inputs.items()}
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
        hidden = encoder(**inputs).last_hidden_state
    return POOLINGS[pooling](hidden.float(), inputs["attention_mask"]).cpu()
