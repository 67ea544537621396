"""Start a mean-pooling classification head from a logistic regression on the frozen embeddings.

Fine-tuning a sentence-embedding checkpoint with a random head first spends steps (and damages features)
learning what a linear probe finds in seconds. Fitting the probe on the training split, choosing its L2
strength on validation, and copying it into the head makes step 0 score the probe's validation metric.

The probe is the one ``domainbert probe`` fits on the same files with the same model and settings, and it is kept
in domainbert's embedding cache (:mod:`domainbert.core.embed_cache`): after the pipeline's probe stage, every
seed's head start reads it instead of embedding the texts and fitting again, and says so in one ``[cache]`` line.
``DOMAINBERT_EMBEDDING_CACHE=off`` turns the cache off (same weights, computed).
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from domainbert.core.embed import encode
from domainbert.core.hardware import auto_precision
from domainbert.core.probe import select_probe
from domainbert.data import contract
from domainbert.data.windows import WINDOW_MASK, window_mean
from domainbert.errors import DomainBertError

log = logging.getLogger(__name__)


#: the batch entries an encoder takes
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


@torch.no_grad()
def embed_batches(model, loader) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean-pooled embeddings and labels of every batch of ``loader`` through ``model``'s encoder, frozen.

    Soft targets (rows of class probabilities) count as their most probable class. A batch of windows
    (``data.long_text: windows``) gives each text the mean of its windows' embeddings, as the head will read it.
    """
    encoder = getattr(model, model.base_model_prefix)
    device = next(encoder.parameters()).device
    was_training = encoder.training
    encoder.eval()
    xs, ys = [], []
    bf16 = auto_precision(device.type) == "bf16-mixed"
    try:
        for batch in loader:
            xs.append(embed_batch(encoder, batch, bf16))
            labels = batch["labels"]
            ys.append((labels.argmax(-1) if labels.dim() == 2 else labels).long().cpu())  # soft targets: arg-max
    finally:
        encoder.train(was_training)
    return torch.cat(xs), torch.cat(ys)


def embed_batch(encoder, batch: dict, bf16: bool) -> torch.Tensor:
    """The mean-pooled embeddings of one batch; of a batch of windows, each text's mean over its windows."""
    mask = batch.get(WINDOW_MASK)
    if mask is None:
        return encode(encoder, {k: v for k, v in batch.items() if k in _INPUTS}, bf16)
    windows = encode(encoder, {k: v[mask] for k, v in batch.items() if k in _INPUTS}, bf16)
    return window_mean(windows, mask)


def _linear_heads(head) -> list[torch.nn.Linear]:
    """The linear layer(s) behind ``classifier``: itself, or with LoRA the original and every trained copy."""
    if isinstance(head, torch.nn.Linear):
        return [head]
    copies = [getattr(head, "original_module", None), *getattr(head, "modules_to_save", {}).values()]
    return [h for h in copies if isinstance(h, torch.nn.Linear)]


def init_head_from_probe(model, datamodule, num_labels: int) -> float | None:
    """Fit the probe on the training split, pick ``C`` on the validation split, copy it into ``model.classifier``.

    The probe is the one ``domainbert probe`` fits on the same files with the same model: read from the
    embedding cache (:mod:`domainbert.core.embed_cache`) when a stage fitted it already, with one ``[cache]`` line.
    A datamodule without plain labelled files (soft targets, or no ``raw`` splits) or that reads long texts in
    windows has the probe fitted on its batches instead, uncached: with windows, on each text's mean of its windows'
    embeddings, the vector the head reads in fine-tuning (the cache holds truncated texts' embeddings).

    Returns:
        The probe's validation macro-F1 (None without a validation split).

    Raises:
        DomainBertError: when the model has no mean-pooling head (``classifier`` of ``num_labels`` outputs).
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # LoRA: peft's wrapper
    heads = _linear_heads(getattr(base, "classifier", None))
    if not heads or any(h.out_features != num_labels for h in heads):
        raise DomainBertError("model.head_init=probe: the model has no mean-pooling linear head (set pooling: mean)")
    probe = probe_of_files(base, datamodule, num_labels)
    if probe is None:
        x_train, y_train = embed_batches(base, datamodule.train_dataloader())
        val = datamodule.val_dataloader()
        x_val, y_val = embed_batches(base, val) if val else (None, None)
        probe = select_probe(x_train, y_train, x_val, y_val, num_labels)
    for head in heads:
        head.weight.data.copy_(probe.weight.to(head.weight))
        head.bias.data.copy_(probe.bias.to(head.bias))
    score = probe.val_scores.get(probe.c)
    shown = "none (no validation split)" if score is None else f"{score:.4f}"
    log.info("head initialised from a logistic-regression probe (C=%s, validation macro-F1 %s)", probe.c, shown)
    return score


def file_splits(datamodule, num_labels: int) -> dict[str, tuple[list, torch.Tensor, str]] | None:
    """``{"train"/"val": (texts or (text, pair) tuples, label ids, path)}`` of a single-label datamodule's files.

    None for a datamodule that is not one (no ``raw`` splits, multi-label, soft targets, another label count), or
    that reads long texts in windows (``data.long_text: windows``): the files' texts embed truncated.
    """
    from domainbert.data.labels import label_text

    if not isinstance(datamodule, contract.LabelledFiles) or contract.multi_label(datamodule):
        return None
    if contract.soft_label_column(datamodule) or len(datamodule.label2id) != num_labels:
        return None
    if contract.windows(datamodule) is not None:
        return None
    ids, pair = datamodule.label2id, contract.text_pair_column(datamodule)
    out = {}
    for split, name in (("train", "train"), ("val", "validation")):
        if not datamodule.paths.get(name):
            continue
        rows = datamodule.raw(name)
        texts = [str(t or "") for t in rows[datamodule.text_column]]
        if pair:
            texts = list(zip(texts, [str(t or "") for t in rows[pair]]))
        try:
            y = torch.tensor([ids[label_text(v)] for v in rows[datamodule.label_column]], dtype=torch.long)
        except (KeyError, ValueError):  # the datamodule's own checks name the row
            return None
        out[split] = (texts, y, str(datamodule.paths[name]))
    return out if "train" in out else None


def probe_of_files(base, datamodule, num_labels: int):
    """The probe on the mean-pooled embeddings of the datamodule's files by ``base``'s encoder, as loaded.

    Embedded as ``domainbert probe`` embeds them (same batching, same key), so the cache serves both; None when the
    datamodule has no plain labelled files (:func:`file_splits`).
    """
    from domainbert.core.embed import BATCH_SIZE, modes_kept
    from domainbert.core.embed_cache import Embedder, cached_probe

    splits = file_splits(datamodule, num_labels)
    if splits is None:
        return None
    encoder = getattr(base, base.base_model_prefix)
    source = getattr(base.config, "name_or_path", "") or ""  # the folder from_pretrained read: the model's identity
    embedder = Embedder(source, datamodule.tokenizer, encoder, datamodule.max_length, BATCH_SIZE)
    keys = {s: embedder.key(texts) for s, (texts, _, _) in splits.items()}
    ys = {s: y for s, (_, y, _) in splits.items()}

    def fit():
        with modes_kept(encoder):
            xs = {s: embedder.embed(texts, Path(path).name)[0] for s, (texts, _, path) in splits.items()}
        return select_probe(xs["train"], ys["train"], xs.get("val"), ys.get("val"), num_labels)

    labels = list(datamodule.label2id)
    return cached_probe(keys, ys, labels, fit, Path(splits["train"][2]).name)


#: the probe's weights beside ``result.json`` in ``domainbert probe``'s output folder
PROBE_WEIGHTS = "probe.safetensors"


def save_probe(probe, folder) -> str:
    """Write a fitted probe's ``weight`` and ``bias`` to ``<folder>/probe.safetensors``; the file's path."""
    from safetensors.torch import save_file

    from domainbert.core.files import atomic_file

    path = Path(folder) / PROBE_WEIGHTS
    with atomic_file(path) as tmp:
        save_file({"weight": probe.weight.float().contiguous(), "bias": probe.bias.float().contiguous()}, str(tmp))
    return str(path)


def probe_classifier(base_model: str, weight: torch.Tensor, bias: torch.Tensor, labels: list[str]):
    """A mean-pooling sequence classifier: ``base_model``'s encoder as it is, and the probe as its linear head.

    Its logits on a text are the probe's on that text's mean-pooled embedding, so it ships the probe as a
    model that ``domainbert predict``, ``export`` and distillation load like any fine-tuned classifier.

    Returns:
        ``(model, tokenizer)``, the model in eval mode.

    Raises:
        DomainBertError: the weights do not fit the encoder's width or the label count.
    """
    from transformers import AutoModelForSequenceClassification

    from domainbert.core.hf import load_config, load_model, load_tokenizer
    from domainbert.core.models_local import resolve_local_alias
    from domainbert.core.pooled import mark_config
    from domainbert.modules.finetune import label_config

    name = resolve_local_alias(base_model)
    config = load_config(name)
    if tuple(weight.shape) != (len(labels), config.hidden_size) or tuple(bias.shape) != (len(labels),):
        raise DomainBertError(
            f"probe weights {tuple(weight.shape)} do not fit {len(labels)} labels on {base_model} "
            f"(width {config.hidden_size})"
        )
    for key, value in label_config(labels).items():
        setattr(config, key, value)
    config.problem_type = "single_label_classification"
    mark_config(config)
    model, _ = load_model(AutoModelForSequenceClassification, name, config=config, ignore_mismatched_sizes=True)
    model.classifier.weight.data.copy_(weight.to(model.classifier.weight))
    model.classifier.bias.data.copy_(bias.to(model.classifier.bias))
    return model.eval(), load_tokenizer(name)


def export_probe_classifier(base_model: str, probe_folder: str, out: str) -> str:
    """Write the classifier of :func:`probe_classifier` for ``domainbert probe``'s output ``probe_folder`` to ``out``.

    Reads ``probe.safetensors`` and the label names of ``result.json``; the export is atomic, with a model card. The
    length and precision the probe embedded its texts at (``scoring`` in ``result.json``) are recorded in the
    classifier's config (:mod:`domainbert.core.scoring`), so that it answers as the probe scored: in bf16 where the
    embeddings were bf16 and this machine runs bf16 natively.

    Raises:
        DomainBertError: the probe folder lacks its weights (a probe run by an older domainbert: run it again).
    """
    import json

    from safetensors.torch import load_file

    from domainbert.core.hf import export_hf
    from domainbert.core.scoring import set_scoring

    folder = Path(probe_folder)
    if not (folder / PROBE_WEIGHTS).is_file() or not (folder / "result.json").is_file():
        raise DomainBertError(f"{folder}: no {PROBE_WEIGHTS} and result.json; run `domainbert probe` again")
    weights = load_file(str(folder / PROBE_WEIGHTS))
    result = json.loads((folder / "result.json").read_text(encoding="utf-8"))
    model, tokenizer = probe_classifier(base_model, weights["weight"], weights["bias"], list(result["labels"]))
    scoring = result.get("scoring") or {}
    set_scoring(model.config, **scoring)  # in the folder's one atomic write
    if scoring.get("max_length"):
        tokenizer.model_max_length = scoring["max_length"]  # pipeline(..., truncation=True) cuts there too
    card = _probe_card(base_model, result)
    export_hf(model, tokenizer, out, card=card)
    log.info("the probe as a classifier (frozen %s, the probe as its head): %s", base_model, out)
    return str(out)


def _probe_card(base_model: str, result: dict) -> str:
    """A short model card for the probe classifier."""
    scores = "; ".join(f"{split} {result[split]}" for split in ("val", "test") if split in result)
    return "\n".join(
        [
            "---",
            "pipeline_tag: text-classification",
            "library_name: transformers",
            "---",
            "",
            "# Frozen-embedding probe classifier",
            "",
            f"The encoder of `{base_model}`, unchanged, read through the mean of its token states, with a logistic "
            f"regression fitted on those embeddings (L2 strength C={result.get('c')}, chosen on validation) as "
            "its linear head. Written by `domainbert` from a `domainbert probe` run.",
            "",
            f"Labels: {', '.join(result.get('labels', []))}. Scores of the probe: {scores or 'none recorded'}.",
            "",
            "Load it with domainbert (`domainbert predict --model classification --model.init_from <this folder>`)"
            " or with `AutoModelForSequenceClassification.from_pretrained(<this folder>, trust_remote_code=True)`.",
            "",
        ]
    )
