"""An MLM head that starts useful, for checkpoints that ship without one.

Sentence-embedding and task-tuned checkpoints keep their input embeddings (so the decoder, tied to them, is
fine) but lose the head's transform and output bias; ``transformers`` initialises those at random, so the first
steps of continued pretraining train the encoder against noise. Here instead:

- the transform's dense layer is the identity (where it is square) with a zero bias, and its LayerNorm the
  identity affine: the head scores each vocabulary entry by the dot product of its embedding with the
  normalised GELU of the hidden state, close to "predict the token whose embedding is nearest" (GELU keeps the
  positive part of each feature and damps the negative part);
- the output bias is the log unigram frequency of each token in the training data, the prior a head learns
  first.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Iterable

import numpy as np
import torch

from domainbert.core.families import attribute, family
from domainbert.core.protocols import StreamsTrainTokens

log = logging.getLogger(__name__)


def head_parts(model) -> tuple:
    """The head's ``(dense transform, its LayerNorm, output bias)`` of ``model``; Nones where not described."""
    head = family(model.config, fallback=True).mlm_head
    if head is None:
        return None, None, None
    return attribute(model, head.dense), attribute(model, head.norm), attribute(model, head.bias)


@torch.no_grad()
def identity_transform(model) -> bool:
    """Set the head's transform to the identity (dense where square, LayerNorm affine). False if unknown."""
    dense, norm, _ = head_parts(model)
    if dense is None or norm is None:
        return False
    if dense.weight.shape[0] == dense.weight.shape[1]:
        dense.weight.copy_(torch.eye(dense.weight.shape[0], dtype=dense.weight.dtype))
        if dense.bias is not None:
            dense.bias.zero_()
    else:  # ALBERT, and ELECTRA generators narrower than the encoder: the projection stays as initialised
        log.info("MLM head: the %s transform is not square; only its LayerNorm and bias start from the data", dense)
    norm.weight.fill_(1.0)
    norm.bias.zero_()
    return True


#: The most token ids :func:`unigram_bias_from_data` counts: evenly spaced slices of the training split's ids where
#: it holds more (about 32 MB of ``int32`` read from the memory-mapped arrow file, counted in a few tens of
#: milliseconds).
MAX_COUNTED_TOKENS = 2**23


def count_ids(chunks: Iterable, vocab_size: int, exclude: list[int] | None = None) -> np.ndarray:
    """How often each id of a vocabulary of ``vocab_size`` occurs in ``chunks`` (arrays or tensors of ids).

    Ids in ``exclude`` are not counted; ids past the vocabulary count as its last id.
    """
    counts = np.zeros(vocab_size, dtype=np.int64)
    for chunk in chunks:
        ids = np.asarray(chunk).reshape(-1)
        if ids.size == 0:
            continue
        if ids.min() < 0:  # never from a tokenizer; counted as id 0, as a clamp would
            ids = ids.clip(0, None)
        found = np.bincount(ids, minlength=vocab_size)
        if exclude:
            found[[i for i in exclude if 0 <= i < len(found)]] = 0
        counts += found[:vocab_size]
        counts[-1] += found[vocab_size:].sum()
    return counts


def set_log_frequencies(bias: torch.Tensor, counts: np.ndarray) -> None:
    """Set ``bias`` to the log of the add-one smoothed relative frequencies of ``counts``."""
    smoothed = torch.from_numpy(counts).double() + 1.0
    bias.copy_((smoothed.log() - math.log(smoothed.sum().item())).to(bias.dtype))


@torch.no_grad()
def unigram_bias(model, batches, max_batches: int = 200, exclude: list[int] | None = None) -> bool:
    """Set the output bias to the log unigram frequency of the token ids in ``batches`` (add-one smoothed).

    Only the first ``max_batches`` batches are read. Ids in ``exclude`` (padding and the other special tokens,
    which are never prediction targets) are not counted. False when the model's head has no known output bias.
    """
    bias = head_parts(model)[2]
    if bias is None:
        return False
    ids = (batch["input_ids"] for batch in itertools.islice(batches, max_batches))
    set_log_frequencies(bias, count_ids(ids, bias.shape[0], exclude))
    return True


@torch.no_grad()
def unigram_bias_from_data(
    model, datamodule, exclude: list[int] | None = None, max_batches: int = 200, max_tokens: int = MAX_COUNTED_TOKENS
) -> bool:
    """Set the output bias to the log unigram frequency of ``datamodule``'s training data (add-one smoothed).

    A data module with ``train_token_ids(max_tokens)`` (``CorpusDataModule``) hands over the ids of its tokenized
    training split, read straight from the arrow column: all of them for a split of up to ``max_tokens`` ids, else
    ``max_tokens`` ids in evenly spaced slices across the split (so a split in the files' order is sampled from
    every part of the corpus), the tokens a batch holds before masking; no loader, no collating. Any other data
    module (or one that returns None) has the first ``max_batches`` batches of its training loader counted, as
    :func:`unigram_bias` does.

    Args:
        model: the masked-LM model whose head's output bias is set.
        datamodule: the attached data module, after ``setup``.
        exclude: ids not counted (padding and the other special tokens, never prediction targets).
        max_batches: the batches counted through the training loader (the fallback).
        max_tokens: the ids counted from the tokenized split.

    Returns:
        False when the model's head has no known output bias (nothing read), else True.
    """
    bias = head_parts(model)[2]
    if bias is None:
        return False
    chunks = datamodule.train_token_ids(max_tokens) if isinstance(datamodule, StreamsTrainTokens) else None
    if chunks is None:
        return unigram_bias(model, datamodule.train_dataloader(), max_batches=max_batches, exclude=exclude)
    set_log_frequencies(bias, count_ids(chunks, bias.shape[0], exclude))
    return True


def trained_head(model: str) -> bool | None:
    """Whether the checkpoint ``model`` ships trained masked-LM head weights, read from its files' weight names.

    Nothing is loaded but the config and the weight files' headers (safetensors) or index. A checkpoint's head
    weights are saved under the head's attribute path (``cls.predictions.transform.dense.weight`` for BERT,
    ``lm_head.dense.weight`` for RoBERTa), so the family's head transform (:mod:`domainbert.core.families`) tells.

    Args:
        model: a local folder, ``pkg:<module>``, or a hub name.

    Returns:
        True or False for a local folder of a family whose head is described; None when it cannot tell without a
        download or a full load (a hub name, an unknown family, ``.bin`` weights only).
    """
    import json
    from pathlib import Path

    from domainbert.core.models_local import resolve_local_alias

    folder = Path(resolve_local_alias(model))
    config = folder / "config.json"
    if not config.is_file():
        return None
    try:
        model_type = json.loads(config.read_text(encoding="utf-8")).get("model_type")
    except (OSError, ValueError):
        return None
    head = family(str(model_type), fallback=True).mlm_head
    names = weight_names(folder)
    if head is None or names is None:
        return None
    return f"{head.dense}.weight" in names


def weight_names(folder) -> set[str] | None:
    """The parameter names a checkpoint folder's safetensors files (or their index) hold; None without them."""
    import json

    from safetensors import safe_open

    index = folder / "model.safetensors.index.json"
    if index.is_file():
        return set(json.loads(index.read_text(encoding="utf-8")).get("weight_map", {}))
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    names: set[str] = set()
    for path in files:
        with safe_open(str(path), framework="pt") as handle:
            names.update(handle.keys())
    return names
