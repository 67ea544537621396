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

log = logging.getLogger(__name__)

#: per family: (dense transform, its LayerNorm, the output bias) as attribute paths from the MLM model
HEAD_PARTS = {
    "bert": ("cls.predictions.transform.dense", "cls.predictions.transform.LayerNorm", "cls.predictions.bias"),
    "roberta": ("lm_head.dense", "lm_head.layer_norm", "lm_head.bias"),
    "xlm-roberta": ("lm_head.dense", "lm_head.layer_norm", "lm_head.bias"),
    "camembert": ("lm_head.dense", "lm_head.layer_norm", "lm_head.bias"),
    "distilbert": ("vocab_transform", "vocab_layer_norm", "vocab_projector.bias"),
    "electra": ("generator_predictions.dense", "generator_predictions.LayerNorm", "generator_lm_head.bias"),
    "albert": ("predictions.dense", "predictions.LayerNorm", "predictions.bias"),
}


def _get(model, path: str):
    for part in path.split("."):
        model = getattr(model, part, None)
        if model is None:
            return None
    return model


@torch.no_grad()
def identity_transform(model) -> bool:
    """Set the head's transform to the identity (dense where square, LayerNorm affine). False if unknown."""
    parts = HEAD_PARTS.get(model.config.model_type)
    dense, norm = (_get(model, parts[0]), _get(model, parts[1])) if parts else (None, None)
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
    parts = HEAD_PARTS.get(model.config.model_type)
    bias = _get(model, parts[2]) if parts else None
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
