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

import logging
import math

import torch

from domainbert.core.families import attribute, family

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


@torch.no_grad()
def unigram_bias(model, batches, max_batches: int = 200, exclude: list[int] | None = None) -> bool:
    """Set the output bias to the log unigram frequency of the token ids in ``batches`` (add-one smoothed).

    Ids in ``exclude`` (padding and the other special tokens, which are never prediction targets) are not counted.
    """
    bias = head_parts(model)[2]
    if bias is None:
        return False
    vocab_size = bias.shape[0]
    counts = torch.ones(vocab_size, dtype=torch.float64)
    for i, batch in enumerate(batches):
        if i >= max_batches:
            break
        ids = batch["input_ids"].flatten()
        if exclude:
            ids = ids[~torch.isin(ids, torch.tensor(exclude, dtype=ids.dtype))]
        counts += torch.bincount(ids.clamp(0, vocab_size - 1), minlength=vocab_size).double()
    logp = counts.log() - math.log(counts.sum().item())
    bias.copy_(logp.to(bias.dtype))
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
