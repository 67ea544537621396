"""One task vocabulary: names and their older aliases, the per-task tables of the modules and of distillation."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers import (
    AutoModelForMaskedLM,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

from domainbert.distill.losses import HardLabelLoss, KLDivergenceLoss
from domainbert.distill.task_table import DISTILL_TASKS, Outputs, distill_task, span_logits, span_targets
from domainbert.errors import DomainBertError
from domainbert.modules.lora import LoraSettings, apply_lora
from domainbert.modules.tasks import SPECS, Task, spec


@pytest.mark.parametrize(
    ("name", "task"),
    [
        ("classification", Task.CLASSIFICATION),
        ("tagging", Task.TAGGING),
        ("qa", Task.QA),
        ("mlm", Task.MLM),
        ("sequence-classification", Task.CLASSIFICATION),  # distillation's older names
        ("token-classification", Task.TAGGING),
        ("masked-lm", Task.MLM),
        ("seq_cls", Task.CLASSIFICATION),  # LoRA's older names
        ("token_cls", Task.TAGGING),
        (" Classification ", Task.CLASSIFICATION),
        (Task.QA, Task.QA),
    ],
)
def test_every_name_of_a_task_parses_to_it(name, task):
    assert Task.parse(name) is task


def test_an_unknown_task_names_the_known_ones():
    with pytest.raises(DomainBertError, match=r"task='ner': expected one of classification, tagging, qa, mlm"):
        Task.parse("ner")


def test_a_task_is_its_name_as_a_string():
    assert Task.CLASSIFICATION == "classification" and f"{Task.QA}" == "qa"


def test_the_model_table_covers_every_task_with_its_head():
    assert set(SPECS) == set(Task)
    heads = {
        Task.CLASSIFICATION: AutoModelForSequenceClassification,
        Task.TAGGING: AutoModelForTokenClassification,
        Task.QA: AutoModelForQuestionAnswering,
        Task.MLM: AutoModelForMaskedLM,
    }
    assert {t: s.auto_cls for t, s in SPECS.items()} == heads
    assert [t for t, s in SPECS.items() if s.labelled] == [Task.CLASSIFICATION, Task.TAGGING]
    assert spec("seq_cls").peft_type == "SEQ_CLS" and spec("token_cls").peft_type == "TOKEN_CLS"
    assert spec("qa").peft_type == "QUESTION_ANS"


def test_the_fine_tuning_modules_name_their_task():
    from domainbert.modules.classification import SequenceClassificationModule
    from domainbert.modules.qa import QuestionAnsweringModule
    from domainbert.modules.tagging import TokenClassificationModule

    assert SequenceClassificationModule.task is Task.CLASSIFICATION
    assert TokenClassificationModule.task is Task.TAGGING
    assert QuestionAnsweringModule.task is Task.QA


def test_lora_refuses_a_task_without_a_peft_head():
    with pytest.raises(DomainBertError, match="not to mlm"):
        apply_lora(None, LoraSettings(), "masked-lm")


def test_distillation_supports_every_fine_tuning_task_and_mlm():
    assert set(DISTILL_TASKS) == set(Task)
    assert distill_task("sequence-classification") is DISTILL_TASKS[Task.CLASSIFICATION]
    assert [t for t, d in DISTILL_TASKS.items() if d.no_cache] == [Task.MLM]
    assert [t for t, d in DISTILL_TASKS.items() if d.masked] == [Task.MLM]
    assert [t for t, d in DISTILL_TASKS.items() if d.labelled] == [Task.CLASSIFICATION, Task.TAGGING]


def test_qa_distils_start_and_end_as_distributions_over_the_tokens():
    torch.manual_seed(0)
    start, end = torch.randn(3, 5), torch.randn(3, 5)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 1, 0]])
    batch = {"start_positions": torch.tensor([1, 0, 3]), "end_positions": torch.tensor([2, 2, 3])}
    logits = span_logits(torch.stack([start, end], -1), mask)
    assert logits.shape == (6, 5)
    assert torch.equal(logits[0], start[0]) and torch.equal(logits[1], end[0])  # row 2i: start, 2i + 1: end
    assert (logits[2:4, 3:] < -1e3).all()  # padding never wins
    view = {"attention_mask": mask, "labels": span_targets(batch)}
    hard = HardLabelLoss()(Outputs(logits), None, view)
    pad = ~mask.bool()
    expected = (
        F.cross_entropy(start.masked_fill(pad, -1e4), batch["start_positions"])
        + F.cross_entropy(end.masked_fill(pad, -1e4), batch["end_positions"])
    ) / 2  # what transformers' QA loss computes, padding left out
    torch.testing.assert_close(hard, expected)
    same = KLDivergenceLoss(2.0)(Outputs(logits), Outputs(logits.clone()), view)
    assert same.item() == pytest.approx(0.0, abs=1e-6)
    assert span_targets({"input_ids": torch.zeros(1, 2)}) is None
