"""Fine-tuning for sequence classification (single texts, text pairs; multi-class or multi-label)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import torch
import torch.nn.functional as F

from domainbert.core.hf import check_source, load_config
from domainbert.core.models_local import resolve_local_alias
from domainbert.core.pooled import POOLING_KEY, is_mean_pooled
from domainbert.data import contract
from domainbert.data.windows import CONFIG_KEY, WINDOW_MASK, Windows, align_windows, recorded, window_mean
from domainbert.errors import DomainBertError
from domainbert.modules.base import enable_gradient_checkpointing as enable_gradient_checkpointing  # re-exported
from domainbert.modules.finetune import FineTuneModule, label_config, labels_from
from domainbert.modules.finetune import checkpoint_labels as checkpoint_labels  # re-exported
from domainbert.modules.finetune import freeze_bottom_layers as freeze_bottom_layers  # re-exported
from domainbert.modules.metrics import classification_metrics
from domainbert.modules.tasks import Task

log = logging.getLogger(__name__)


def update_classification(metrics, logits: torch.Tensor, labels: torch.Tensor, multi_label: bool) -> None:
    """Update classification metrics with a batch: probabilities when multi-label, else logits."""
    metrics.update(torch.sigmoid(logits) if multi_label else logits, labels.long())


class SequenceClassificationModule(FineTuneModule):
    """Fine-tune an encoder with a sequence-classification head (``AutoModelForSequenceClassification``).

    Logs ``train/loss``, ``val/loss``, ``val/acc``, ``val/f1_macro`` and the same under ``test/``.
    ``predict_step`` returns, per input, its fields plus ``label`` (or ``labels`` when multi-label) and
    ``probabilities``.
    """

    task = Task.CLASSIFICATION
    #: the windows the data reads long texts in (``data.long_text: windows``), set at ``setup``; None: truncated
    windows: Windows | None = None

    def __init__(
        self,
        init_from: str,
        num_labels: int | None = None,
        label_names: list[str] | None = None,
        multi_label: bool = False,
        class_weights: list[float] | str | None = None,
        threshold: float = 0.5,
        pooling: str = "auto",
        head_init: str | None = None,
        **kwargs,
    ) -> None:
        """Load the checkpoint and put a classification head of ``num_labels`` outputs on it.

        Args:
            num_labels: number of labels; linked from ``data.num_labels`` by the CLI.
            label_names: the labels in id order; linked from ``data.label_names``; saved as ``id2label``.
            multi_label: several labels per row (sigmoid + binary cross-entropy); must match the data's.
            class_weights: per-label loss weights in label order, or ``balanced`` (inverse label frequency of
                the training split); multi-label uses them as positive-class weights.
            threshold: multi-label probability above which a label is predicted.
            pooling: what the head reads. ``cls``: the family's own head (BERT's ``[CLS]`` pooler); ``mean``:
                the mean of the token states (:mod:`domainbert.core.pooled`), how sentence-embedding
                checkpoints were trained; ``auto``: ``mean`` for a sentence-transformers checkpoint with mean
                pooling or an export of a mean-pooling classifier, else ``cls``.
            head_init: ``probe``: before training, fit a logistic regression on the frozen mean-pooled
                embeddings of the training split (L2 strength chosen on validation) and start the head from it,
                so that fine-tuning starts at that baseline (needs ``pooling`` mean, single-label); ``auto``:
                ``probe`` where the head is mean-pooled and single-label; None: a random head where the checkpoint
                has none. ``random``: a random head even where ``init_from`` is a classifier whose saved weights
                lack theirs, and one that may be evaluated untrained; without it such a folder, or validating,
                testing or predicting with a head nothing trained, is refused.
            **kwargs: the options every fine-tuning module takes (learning rate, dropouts, LoRA...), documented
                with ``init_from`` in :class:`~domainbert.modules.finetune.FineTuneModule`.
        """
        check_source(resolve_local_alias(init_from))  # a broken folder is named before its labels are looked for
        pooling = resolve_pooling(pooling, init_from)
        head_init = resolve_head_init(head_init, pooling, multi_label)
        # saves the hyperparameters: under LightningCLI the values as given ("auto" included), else these
        super().__init__(init_from, **kwargs)
        self.pooling, self.head_init = pooling, head_init  # as resolved
        self.label_names = labels_from(num_labels, label_names, init_from)
        n = len(self.label_names)
        problem = "multi_label_classification" if multi_label else "single_label_classification"
        self.init_model({**label_config(self.label_names), "problem_type": problem, POOLING_KEY: pooling})
        self.register_buffer("class_weight", self._fixed_weights(class_weights, n), persistent=False)
        self.val_metrics = classification_metrics(n, multi_label)
        self.test_metrics = classification_metrics(n, multi_label)

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

    def setup(self, stage: str) -> None:
        self.check_datamodule(("multi_label",))
        if contract.transfer(self.attached_datamodule()) is not None:
            raise DomainBertError(
                "data.transfer adds unlabelled documents for a distillation's teacher to label; fine-tuning has no "
                "labels for them: unset data.transfer, or distil (--model distill)"
            )
        self.windows = align_windows(self.attached_datamodule(), self.base_config(), fit=stage == "fit")
        if stage == "fit" and self.head_init == "probe":  # a resumed fit restores its checkpoint over it
            from domainbert.modules.probe_init import init_head_from_probe

            init_head_from_probe(self.model, self.trainer.datamodule, len(self.label_names))
        elif self.initialised_later() and self.random_head and not self.trainer.ckpt_path:
            # evaluated as loaded, neither trained in this process nor restored from a checkpoint: the head is random
            head = [key for key in self.missing_keys if key.startswith(self.initialised_later())]
            if head:
                log.info("initialised at random (not in %s): %s", self.hparams.init_from, ", ".join(head))
        if stage == "fit" and self.hparams.class_weights == "balanced":
            dm = self.trainer.datamodule
            if not isinstance(dm, contract.CountsLabels):
                raise DomainBertError("class_weights: balanced needs a datamodule with label_counts() and raw()")
            self.class_weight = balanced_weights(dm.label_counts(), len(dm.raw("train")), self.hparams.multi_label)
            self.class_weight = self.class_weight.to(self.device)
            log.info("balanced class weights: %s", [round(w, 3) for w in self.class_weight.tolist()])

    def initialised_later(self) -> tuple[str, ...]:
        """The head, with ``head_init: probe``: ``fit`` starts it from the probe, not at random."""
        return ("classifier.",) if self.head_init == "probe" else ()

    def fresh_head(self) -> str | None:
        """``head_init`` as resolved: ``probe`` or ``random`` where the user asked for a fresh head; else None."""
        return self.head_init

    def base_config(self):
        """The config of the model (under LoRA, of the wrapped model), which the export writes."""
        return getattr(self.model, "get_base_model", lambda: self.model)().config

    def model_card(self) -> str | None:
        """The export's model card; for a model fine-tuned with windows, a section on long texts."""
        from domainbert.core.card import model_card

        windows = recorded(self.base_config())
        return model_card(self, {"Long texts": windows_card_note(windows)} if windows else None)

    # -- steps ------------------------------------------------------------------------------------
    def forward(self, batch: dict) -> torch.Tensor:
        """The logits of a batch; a batch of windows gives each text the mean of its windows' logits.

        That mean is the head applied to the mean of the windows' pooled vectors (:mod:`domainbert.data.windows`).
        """
        mask = batch.get(WINDOW_MASK)
        if mask is None:
            return self.model(**self.model_inputs(batch)).logits
        inputs = {k: v[mask] for k, v in self.model_inputs(batch).items()}
        return window_mean(self.model(**inputs).logits, mask)

    def compute_loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Cross-entropy (multi-label: binary cross-entropy), weighted by the class weights if any.

        Single-label targets are class ids, or one row of class probabilities per input (soft targets, see
        ``data.soft_label_column``): then the cross-entropy against those probabilities. With class weights,
        ``F.cross_entropy`` averages soft targets over the rows and class ids over the rows' weights.
        """
        logits = logits.float()
        weight = self.class_weight
        if self.hparams.multi_label:
            return F.binary_cross_entropy_with_logits(logits, labels.float(), pos_weight=weight)
        if labels.is_floating_point() and labels.dim() == 2:
            return F.cross_entropy(logits, labels, weight=weight)
        return F.cross_entropy(logits, labels.long(), weight=weight)

    def training_loss(self, batch: dict) -> torch.Tensor:
        """The classification loss of a batch."""
        return self.compute_loss(self(batch), batch["labels"])

    def evaluate(self, batch: dict, stage: str) -> None:
        """Log the batch's loss; update the accuracy and F1 of the epoch."""
        logits = self(batch).float()
        labels = batch["labels"]
        n = labels.shape[0]
        self.log(f"{stage}/loss", self.compute_loss(logits, labels), batch_size=n, prog_bar=stage == "val")
        metrics = self.val_metrics if stage == "val" else self.test_metrics
        update_classification(metrics, logits, labels, self.hparams.multi_label)
        self.log_metrics(stage, metrics, n)

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


def windows_card_note(windows: Windows) -> str:
    """The model card's paragraph on a model fine-tuned with windows: domainbert windows again, transformers not."""
    return (
        f"Fine-tuned with `data.long_text: windows`: a text longer than {windows.max_length} tokens was read in "
        f"windows of {windows.max_length} tokens overlapping by {windows.stride} (at most {windows.max_windows} per "
        "text), and the head classified the mean of the windows' pooled vectors. `domainbert predict` reads this "
        f"from `config.json` (`{CONFIG_KEY}`) and windows again. Plain transformers (`pipeline()`, "
        f"`AutoModelForSequenceClassification`) does not: it truncates, so pass `truncation=True, max_length="
        f"{windows.max_length}` and expect it to see only the first window of a long text."
    )


def resolve_pooling(pooling: str, init_from: str) -> str:
    """``cls`` or ``mean``; ``auto`` follows how the checkpoint was trained (see ``SequenceClassificationModule``)."""
    if pooling not in ("auto", "cls", "mean"):
        raise DomainBertError(f"model.pooling={pooling!r}: expected auto, cls or mean")
    if pooling != "auto":
        return pooling
    from domainbert.core.embed import native_pooling

    name = resolve_local_alias(init_from)
    if native_pooling(name) == "mean":
        return "mean"
    try:
        return "mean" if is_mean_pooled(load_config(name)) else "cls"
    except DomainBertError:
        if Path(os.path.expanduser(name)).is_dir():  # a local folder's own fault (bad JSON, code of its own)
            raise
        return "cls"  # a hub name without a network: the loader says so next


def resolve_head_init(head_init: str | None, pooling: str, multi_label: bool) -> str | None:
    """``probe``, ``random`` or None; ``auto`` is ``probe`` for a mean-pooled single-label head (see ``head_init``)."""
    if head_init not in (None, "probe", "auto", "random"):
        raise DomainBertError(f"model.head_init={head_init!r}: expected null, 'probe', 'auto' or 'random'")
    if head_init == "auto":
        return "probe" if pooling == "mean" and not multi_label else None
    if head_init == "probe" and (pooling != "mean" or multi_label):
        raise DomainBertError("model.head_init=probe needs model.pooling=mean and single-label data")
    return head_init


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
