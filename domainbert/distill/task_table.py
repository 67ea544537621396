"""What distillation does per task: one table, :data:`DISTILL_TASKS`, with one small record per task.

A record says how a model is run for the outputs that are distilled, which gold targets the hard-label loss
reads, how the soft-target logits are laid out for the losses, and how the student is scored:

- ``classification``: the head's logits per text; accuracy and macro-F1 (``val/acc``, ``val/f1_macro``).
- ``tagging``: the head's logits per token, at the tokens with a tag; token accuracy and macro-F1.
- ``qa``: the start and end logits, each a distribution over the window's tokens; SQuAD exact match and F1 of
  the best span over each question's windows (``val/em``, ``val/f1``).
- ``mlm``: the vocabulary logits at the masked tokens (masks drawn per step); masked-token accuracy
  (``val/acc``). Its teacher outputs cannot be cached: the masks change at every step.

Hidden-state and attention losses read the encoder's outputs, the same for every task.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torchmetrics import MeanMetric, MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score

from domainbert.core.families import family
from domainbert.data.masking import IGNORE_INDEX
from domainbert.errors import DomainBertError
from domainbert.modules.classification import update_classification
from domainbert.modules.metrics import classification_metrics
from domainbert.modules.qa import AnswerCollector
from domainbert.modules.tasks import Task, spec

#: the logit given to padding before a softmax over positions (finite, so that KL stays finite)
_PAD_LOGIT = -1e4


#: how a task's logits are laid out: one row per text, one per token, or one per selected (masked) token
Layout = Literal["row", "token", "selected"]


@dataclass
class Outputs:
    """A model's outputs as the loss terms read them."""

    logits: torch.Tensor
    hidden_states: tuple | None = None
    attentions: tuple | None = None


# -- running a model ------------------------------------------------------------------------------
def head_outputs(model, inputs: dict, selected: torch.Tensor | None, **kw) -> Any:
    """The model's own output (``logits`` of its head)."""
    return model(**inputs, return_dict=True, **kw)


def masked_outputs(model, inputs: dict, selected: torch.Tensor, **kw) -> Outputs:
    """Vocabulary logits at the ``selected`` (masked) positions only: the encoder, then the MLM head on those."""
    head = family(model.config, fallback=True).mlm_head
    if head is None:  # a family without a known head: the full vocabulary projection, then the selection
        out = model(**inputs, return_dict=True, **kw)
        return Outputs(out.logits[selected], out.hidden_states, out.attentions)
    enc = model.base_model(**inputs, return_dict=True, **kw)
    return Outputs(head.logits(model, enc.last_hidden_state[selected]), enc.hidden_states, enc.attentions)


def span_outputs(model, inputs: dict, selected: torch.Tensor | None, **kw) -> Outputs:
    """Start and end logits stacked per token, ``(B, S, 2)`` (so the teacher cache stores them per token)."""
    out = model(**inputs, return_dict=True, **kw)
    return Outputs(torch.stack([out.start_logits, out.end_logits], -1), out.hidden_states, out.attentions)


# -- targets and the losses' view of the logits -------------------------------------------------------
def label_targets(batch: dict) -> torch.Tensor | None:
    """``batch["labels"]``, if any."""
    return batch.get("labels")


def span_targets(batch: dict) -> torch.Tensor | None:
    """``(B, 2)`` gold start and end positions, if the batch has them."""
    if "start_positions" not in batch:
        return None
    return torch.stack([batch["start_positions"], batch["end_positions"]], 1)


def same_logits(logits: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The logits as they are."""
    return logits


def span_logits(logits: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """``(B, S, 2)`` start/end logits as ``(2B, S)``: per row one distribution over positions, padding left out.

    Row ``2i`` is example ``i``'s start and row ``2i + 1`` its end, matching :func:`span_targets` flattened, so
    the hard-label loss is the mean of the start and end cross-entropies (as ``transformers`` computes it).
    """
    x = logits.float().masked_fill(~attention_mask.bool()[..., None], _PAD_LOGIT)
    return x.transpose(1, 2).reshape(-1, x.shape[1])


# -- scoring ------------------------------------------------------------------------------------------
def tagging_metrics(label_names: list[str], multi_label: bool = False) -> MetricCollection:
    """Token accuracy and macro-F1 over the tokens with a tag."""
    n = len(label_names)
    return MetricCollection(
        {
            "acc": MulticlassAccuracy(num_classes=n, average="micro", ignore_index=IGNORE_INDEX),
            "f1_macro": MulticlassF1Score(num_classes=n, average="macro", ignore_index=IGNORE_INDEX),
        }
    )


def update_tagging(metrics, logits: torch.Tensor, labels: torch.Tensor, batch: dict, multi_label: bool) -> None:
    """Update the token metrics with a batch."""
    metrics.update(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1).long())


def update_masked(metrics, logits: torch.Tensor, labels: torch.Tensor, batch: dict, multi_label: bool) -> None:
    """Update the masked-token accuracy with a batch."""
    if labels.numel():
        metrics["acc"].update((logits.argmax(-1) == labels).float())


def update_spans(metrics, logits: torch.Tensor, labels: torch.Tensor, batch: dict, multi_label: bool) -> None:
    """Collect each window's best span (batches without ``meta`` have no text to cut answers from)."""
    if batch.get("meta"):
        metrics.add(logits[..., 0], logits[..., 1], batch["meta"])


@dataclass(frozen=True)
class DistillTask:
    """How distillation treats one task.

    Attributes:
        task: the task.
        run: ``(model, inputs, selected, **output_flags) -> output`` with ``logits`` (and hidden states and
            attentions when asked for).
        metrics: ``(label_names, multi_label) -> metrics`` with ``update``/``compute() -> dict``/``reset``.
        update: ``(metrics, logits, targets, batch, multi_label)``: update the metrics with a batch.
        targets: ``batch -> gold targets`` for the hard-label loss, or None.
        loss_logits: ``(logits, attention_mask) -> logits`` as the soft-target and hard-label losses read them.
        masked: the inputs are masked at every step and only masked positions are scored (masked-LM).
        layout: how ``run``'s logits are laid out: ``row`` (one per text), ``token`` (``(rows, width, ...)``) or
            ``selected`` (one per masked position, row-major), for :mod:`domainbert.distill.chunks`.
        no_cache: why teacher outputs cannot be cached for this task; None where they can.
    """

    task: Task
    run: Callable[..., Any]
    metrics: Callable[[list[str] | None, bool], Any]
    update: Callable[..., None]
    targets: Callable[[dict], torch.Tensor | None] = label_targets
    loss_logits: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = same_logits
    masked: bool = False
    layout: Layout = "row"
    no_cache: str | None = None

    @property
    def labelled(self) -> bool:
        """The teacher's outputs are a label set that the data must share."""
        return spec(self.task).labelled


#: the one table of per-task distillation behaviour
DISTILL_TASKS: dict[Task, DistillTask] = {
    Task.CLASSIFICATION: DistillTask(
        Task.CLASSIFICATION,
        run=head_outputs,
        metrics=lambda names, multi: classification_metrics(len(names), multi),
        update=lambda metrics, logits, labels, batch, multi: update_classification(metrics, logits, labels, multi),
    ),
    Task.TAGGING: DistillTask(
        Task.TAGGING, run=head_outputs, metrics=tagging_metrics, update=update_tagging, layout="token"
    ),
    Task.QA: DistillTask(
        Task.QA,
        run=span_outputs,
        metrics=lambda names, multi: AnswerCollector(),
        update=update_spans,
        targets=span_targets,
        loss_logits=span_logits,
        layout="token",
    ),
    Task.MLM: DistillTask(
        Task.MLM,
        run=masked_outputs,
        metrics=lambda names, multi: MetricCollection({"acc": MeanMetric()}),
        update=update_masked,
        masked=True,
        layout="selected",
        no_cache="masked-LM: the masks change at every step",
    ),
}


def distill_task(task: Task | str) -> DistillTask:
    """The record of ``task`` (any accepted name).

    Raises:
        DomainBertError: an unknown task, or one distillation does not support; the message names those it does.
    """
    name = Task.parse(task)
    if name not in DISTILL_TASKS:  # pragma: no cover - every task is supported today
        raise DomainBertError(f"task={task!r}: distillation supports {', '.join(DISTILL_TASKS)}")
    return DISTILL_TASKS[name]
