"""The task vocabulary: one name per task, shared by the modules, distillation, LoRA and the student builder.

- ``classification``: ``SequenceClassificationModule`` on ``ClassificationDataModule`` (``--model classification
  --data classification``); head ``AutoModelForSequenceClassification``.
- ``tagging``: ``TokenClassificationModule`` on ``TaggingDataModule``; head ``AutoModelForTokenClassification``.
- ``qa``: ``QuestionAnsweringModule`` on ``QADataModule``; head ``AutoModelForQuestionAnswering``.
- ``mlm``: ``MaskedLMModule`` on ``CorpusDataModule`` (``--data corpus``); head ``AutoModelForMaskedLM``.

Distillation (``DistillationModule(task=...)``) takes the same names. Older names stay accepted where users and
saved configs give them (:data:`ALIASES`): distillation's ``sequence-classification``, ``token-classification``
and ``masked-lm``, and LoRA's ``seq_cls`` and ``token_cls``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from transformers import (
    AutoModelForMaskedLM,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

from domainbert.errors import DomainBertError


class Task(StrEnum):
    """A task, by its one name."""

    CLASSIFICATION = "classification"
    TAGGING = "tagging"
    QA = "qa"
    MLM = "mlm"

    @classmethod
    def parse(cls, value: str | Task) -> Task:
        """The task named ``value``: a task name, or one of the older names in :data:`ALIASES`.

        Raises:
            DomainBertError: an unknown name; the message lists the known ones.
        """
        if isinstance(value, Task):
            return value
        name = str(value).strip().lower()
        try:
            return cls(ALIASES.get(name, name))
        except ValueError:
            known = ", ".join(t.value for t in cls)
            raise DomainBertError(
                f"task={value!r}: expected one of {known} (older names: {', '.join(ALIASES)})"
            ) from None


#: older names -> the task's name (distillation's ``task`` and LoRA's task kinds before they were one set)
ALIASES: dict[str, str] = {
    "sequence-classification": "classification",
    "seq_cls": "classification",
    "token-classification": "tagging",
    "token_cls": "tagging",
    "question-answering": "qa",
    "masked-lm": "mlm",
}


@dataclass(frozen=True)
class TaskSpec:
    """What a task means for the model: its head class, how messages name the head, its label set.

    Attributes:
        auto_cls: the ``transformers`` auto class of the task's head.
        head: the head's name in messages (``the teacher has no trained <head> head``).
        peft_type: peft's ``task_type`` for LoRA; None where LoRA does not apply.
        labelled: the head's outputs are a label set (``id2label``), which must agree with the data's.
    """

    auto_cls: type
    head: str
    peft_type: str | None
    labelled: bool


#: the one table of per-task model facts
SPECS: dict[Task, TaskSpec] = {
    Task.CLASSIFICATION: TaskSpec(AutoModelForSequenceClassification, "sequence-classification", "SEQ_CLS", True),
    Task.TAGGING: TaskSpec(AutoModelForTokenClassification, "token-classification", "TOKEN_CLS", True),
    Task.QA: TaskSpec(AutoModelForQuestionAnswering, "question-answering", "QUESTION_ANS", False),
    Task.MLM: TaskSpec(AutoModelForMaskedLM, "masked-lm", None, False),
}


def spec(task: str | Task) -> TaskSpec:
    """The :class:`TaskSpec` of ``task`` (any accepted name)."""
    return SPECS[Task.parse(task)]
