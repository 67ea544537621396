"""Distillation in length-sorted chunks: the same outputs, losses and gradients as the whole batch, less padding."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from transformers import AutoModelForQuestionAnswering

from domainbert.distill.chunks import check_chunk_rows, length_chunks, run_in_chunks
from domainbert.distill.losses import AttentionLoss, HardLabelLoss, HiddenStateLoss, KLDivergenceLoss
from domainbert.distill.module import DistillationModule
from domainbert.distill.task_table import span_outputs
from domainbert.errors import DomainBertError
from tests.helpers.distill_tiny import batches, make_teacher
from tests.helpers.tiny import make_config, make_tiny, make_tokenizer


def _terms(kl: float = 0.5, hard: float = 0.5, hidden: float = 0.0, attention: float = 0.0) -> list:
    """Fresh loss terms of these weights (0: left out), as ``model.losses`` lists them."""
    made = {"kl": KLDivergenceLoss, "hard": HardLabelLoss, "hidden": HiddenStateLoss, "attention": AttentionLoss}
    weights = {"kl": kl, "hard": hard, "hidden": hidden, "attention": attention}
    return [made[name](weight=w) for name, w in weights.items() if w]


def _mask(lengths: list[int], width: int) -> torch.Tensor:
    return (torch.arange(width) < torch.tensor(lengths)[:, None]).long()


def test_chunks_take_the_longest_rows_first_and_keep_file_order_among_equals():
    chunks = length_chunks(_mask([3, 5, 2, 5, 4], 6), rows=2)
    assert [c.tolist() for c in chunks] == [[1, 3], [4, 0], [2]]


def test_the_batch_runs_whole_when_chunks_would_not_split_it_or_padding_is_on_the_left():
    mask = _mask([3, 5, 2], 5)
    assert length_chunks(mask, None) is None
    assert length_chunks(mask, 3) is None
    assert length_chunks(mask.flip(1), 1) is None  # left padding: a chunk cannot be cut from the left


@pytest.mark.parametrize("bad", [0, -2, True, "all", 2.5])
def test_chunk_rows_must_be_a_positive_count_auto_or_null(bad):
    with pytest.raises(DomainBertError, match=r"chunk_rows=.*expected a number of rows of at least 1, 'auto' or null"):
        check_chunk_rows(bad)
    for good in (1, 8, "auto", None):
        check_chunk_rows(good)


def _loss_and_grads(module: DistillationModule, batch: dict) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The distillation loss of ``batch`` as a training step computes it, and the student's gradients."""
    module.model.eval()  # no dropout: the chunked and whole-batch runs must then agree exactly
    module.model.zero_grad()
    input_ids, selected, view = module.prepare(batch, salt=3)
    chunks = module.chunks(view["attention_mask"])
    student = module._run(module.model, batch, input_ids, selected, module.need_hidden, module.need_attentions, chunks)
    loss, _ = module.distill_loss(student, module.teacher_outputs(batch, input_ids, selected, chunks), view)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in module.model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize(
    ("task", "kind", "options"),
    [
        ("classification", "seq", {"hidden": 0.5, "attention": 0.5}),  # hidden states and attention maps too
        ("tagging", "tok", {"hidden": 0.5}),
        ("mlm", None, {"hidden": 0.5}),
    ],
)
def test_a_chunked_step_gives_the_whole_batchs_loss_and_gradients(tmp_path, task, kind, options):
    if kind is None:
        teacher = make_tiny("bert", tmp_path / "teacher")
    else:
        teacher = make_teacher("bert", tmp_path / "teacher", layers=4, task=kind)
    whole = DistillationModule(
        teacher=str(teacher), task=task, student_layers=2, chunk_rows=None, losses=_terms(**options)
    )
    chunked = DistillationModule(
        teacher=str(teacher), task=task, student_layers=2, chunk_rows=3, losses=_terms(**options)
    )
    chunked.model.load_state_dict(whole.model.state_dict())
    batch = batches(whole.tokenizer, "train", batch_size=12)[0]
    if task == "tagging":  # one tag per token, none on padding
        batch["labels"] = torch.where(batch["attention_mask"].bool(), batch["input_ids"] % 3, -100)
    if task == "mlm":
        batch.pop("labels")
    lengths = batch["attention_mask"].sum(1)
    assert lengths.min() < lengths.max(), "the fixture batch must have padding for the test to mean anything"
    assert len(chunked.chunks(batch["attention_mask"])) == 4
    loss, grads = _loss_and_grads(whole, batch)
    chunked_loss, chunked_grads = _loss_and_grads(chunked, batch)
    torch.testing.assert_close(chunked_loss, loss, rtol=1e-5, atol=1e-6)
    assert grads.keys() == chunked_grads.keys() and grads
    for name, grad in grads.items():
        torch.testing.assert_close(chunked_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_span_outputs_come_back_per_token_in_the_batchs_width():
    tok = make_tokenizer("bert")
    torch.manual_seed(0)
    model = AutoModelForQuestionAnswering.from_config(make_config("bert", len(tok), tok)).eval()
    enc = tok(["a short one", "a much longer question about the tool here", "mid length text"], padding=True)
    inputs = {k: torch.tensor(v) for k, v in enc.items() if k in tok.model_input_names}
    whole = span_outputs(model, inputs, None, output_hidden_states=True)
    chunks = length_chunks(inputs["attention_mask"], rows=1)
    run = lambda x, s: span_outputs(model, x, s, output_hidden_states=True)  # noqa: E731
    parts = run_in_chunks(run, inputs, None, chunks, "token")
    real = inputs["attention_mask"].bool()
    assert parts.logits.shape == whole.logits.shape
    torch.testing.assert_close(parts.logits[real], whole.logits[real], rtol=1e-5, atol=1e-5)
    assert not parts.logits[~real].any()
    for mine, theirs in zip(parts.hidden_states, whole.hidden_states, strict=True):
        torch.testing.assert_close(mine[real], theirs[real], rtol=1e-5, atol=1e-5)


def test_auto_chunks_batches_on_a_cpu(tmp_path, monkeypatch):
    monkeypatch.setattr("domainbert.core.hardware.cpu_has_amx", lambda: False)
    teacher = make_teacher("bert", tmp_path / "teacher", layers=2)
    module = DistillationModule(teacher=str(teacher), student_layers=1)
    mask = _mask([5] * 20, 5)
    assert [len(c) for c in module.chunks(mask)] == [8, 8, 4]


@pytest.mark.parametrize(
    "amx,precision,whole",
    [(True, "bf16-mixed", True), (True, "32-true", False), (False, "bf16-mixed", False)],
    ids=["amx-bf16", "amx-fp32", "avx512-bf16"],
)
def test_auto_runs_the_whole_batch_on_a_cpu_with_amx_in_bf16(tmp_path, monkeypatch, amx, precision, whole):
    monkeypatch.setattr("domainbert.core.hardware.cpu_has_amx", lambda: amx)
    teacher = make_teacher("bert", tmp_path / "teacher", layers=2)
    module = DistillationModule(teacher=str(teacher), student_layers=1)
    module._trainer = SimpleNamespace(precision=precision)  # what attached_trainer reads
    chunks = module.chunks(_mask([5] * 20, 5))
    assert (chunks is None) is whole
    assert whole or [len(c) for c in chunks] == [8, 8, 4]
