"""Start a mean-pooling classification head from a logistic regression on the frozen embeddings.

Fine-tuning a sentence-embedding checkpoint with a random head first spends steps (and damages features)
learning what a linear probe finds in seconds. Fitting the probe on the training split, choosing its L2
strength on validation, and copying it into the head makes step 0 score the probe's validation metric.
"""

from __future__ import annotations

import logging

import torch

from domainbert.adapt.embed import encode
from domainbert.adapt.probe import select_probe
from domainbert.core.hardware import auto_precision
from domainbert.errors import DomainBertError

log = logging.getLogger(__name__)


#: the batch entries an encoder takes
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


@torch.no_grad()
def embed_batches(model, loader) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean-pooled embeddings and labels of every batch of ``loader`` through ``model``'s encoder, frozen.

    Soft targets (rows of class probabilities) count as their most probable class.
    """
    encoder = getattr(model, model.base_model_prefix)
    device = next(encoder.parameters()).device
    was_training = encoder.training
    encoder.eval()
    xs, ys = [], []
    bf16 = auto_precision(device.type) == "bf16-mixed"
    try:
        for batch in loader:
            xs.append(encode(encoder, {k: v for k, v in batch.items() if k in _INPUTS}, bf16))
            labels = batch["labels"]
            ys.append((labels.argmax(-1) if labels.dim() == 2 else labels).long().cpu())  # soft targets: arg-max
    finally:
        encoder.train(was_training)
    return torch.cat(xs), torch.cat(ys)


def _linear_heads(head) -> list[torch.nn.Linear]:
    """The linear layer(s) behind ``classifier``: itself, or with LoRA the original and every trained copy."""
    if isinstance(head, torch.nn.Linear):
        return [head]
    copies = [getattr(head, "original_module", None), *getattr(head, "modules_to_save", {}).values()]
    return [h for h in copies if isinstance(h, torch.nn.Linear)]


def init_head_from_probe(model, datamodule, num_labels: int) -> float | None:
    """Fit the probe on the training batches, pick ``C`` on the validation batches, copy it into ``model.classifier``.

    Returns:
        The probe's validation macro-F1 (None without a validation split).

    Raises:
        DomainBertError: when the model has no mean-pooling head (``classifier`` of ``num_labels`` outputs).
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # LoRA: peft's wrapper
    heads = _linear_heads(getattr(base, "classifier", None))
    if not heads or any(h.out_features != num_labels for h in heads):
        raise DomainBertError("model.head_init=probe: the model has no mean-pooling linear head (set pooling: mean)")
    x_train, y_train = embed_batches(base, datamodule.train_dataloader())
    val = datamodule.val_dataloader()
    x_val, y_val = embed_batches(base, val) if val else (None, None)
    probe = select_probe(x_train, y_train, x_val, y_val, num_labels)
    for head in heads:
        head.weight.data.copy_(probe.weight.to(head.weight))
        head.bias.data.copy_(probe.bias.to(head.bias))
    score = probe.val_scores.get(probe.c)
    log.info("head initialised from a logistic-regression probe (C=%s, validation macro-F1 %s)", probe.c, score)
    return score
