"""Teachers beyond one model: an ensemble's averaged probabilities, a teacher with a tokenizer of its own."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from domainbert.distill.student import build_student, num_layers
from domainbert.distill.teacher import Retokenized, TeacherEnsemble, teacher_max_length
from domainbert.errors import DomainBertError
from domainbert.modules.tasks import Task
from tests.helpers.distill_tiny import make_teacher

TEXTS = ["The tool parses graphical images with plugin support.", "The client exports api modules over secure sockets."]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("teachers")
    return {
        "bert": make_teacher("bert", root / "bert", layers=4, seed=0),
        "bert2": make_teacher("bert", root / "bert2", layers=4, seed=1),
        "roberta": make_teacher("roberta", root / "roberta", layers=2, seed=2),
    }


def _load(path):
    return AutoModelForSequenceClassification.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)


def test_an_ensemble_gives_the_log_of_its_members_mean_probabilities(models):
    (a, tok), (b, _) = _load(models["bert"]), _load(models["bert2"])
    enc = tok(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        pa, pb = a(**enc).logits.softmax(-1), b(**enc).logits.softmax(-1)
        out = TeacherEnsemble([a, b])(**enc, output_hidden_states=True)
    assert torch.allclose(out.logits.exp(), (pa + pb) / 2, atol=1e-6)
    assert torch.allclose(out.logits.softmax(-1), (pa + pb) / 2, atol=1e-6)
    with torch.no_grad():
        first = a(**enc, output_hidden_states=True).hidden_states
    assert all(torch.equal(x, y) for x, y in zip(out.hidden_states, first))  # hidden states: the first member's


def test_a_multi_label_ensemble_averages_per_label_probabilities():
    class Fixed(torch.nn.Module):
        def __init__(self, logits):
            super().__init__()
            self.out = torch.tensor([logits])

        def forward(self, **inputs):
            from transformers.modeling_outputs import SequenceClassifierOutput

            return SequenceClassifierOutput(logits=self.out)

    out = TeacherEnsemble([Fixed([0.0, 20.0]), Fixed([2.0, -20.0])], multi_label=True)(input_ids=None)
    expected = torch.tensor([[(0.5 + torch.sigmoid(torch.tensor(2.0)).item()) / 2, 0.5]])
    assert torch.allclose(torch.sigmoid(out.logits), expected, atol=1e-5)


def test_a_retokenized_teacher_reads_the_students_tokens_as_its_own_text(models):
    teacher, teacher_tok = _load(models["roberta"])
    _, student_tok = _load(models["bert"])
    enc = student_tok(TEXTS, padding=True, return_tensors="pt")
    wrapped = Retokenized(teacher, teacher_tok, student_tok, teacher_max_length(teacher_tok, teacher))
    decoded = wrapped.texts(enc["input_ids"], enc["attention_mask"])
    assert decoded == [t.lower() for t in TEXTS]  # the tiny student tokenizer lower-cases
    with torch.no_grad():
        got = wrapped(**enc).logits
        own = teacher(**teacher_tok(decoded, padding=True, return_tensors="pt")).logits
    assert torch.allclose(got, own, atol=1e-5)
    assert wrapped(**enc).hidden_states is None  # no token positions shared with the student


def test_a_student_checkpoint_may_keep_its_own_tokenizer_for_classification(models):
    teacher, teacher_tok = _load(models["roberta"])
    student, _, tok = build_student(
        teacher, teacher_tok, Task.CLASSIFICATION, student=str(models["bert"]), student_layers=2, own_tokenizer=True
    )
    assert num_layers(student.config) == 2 and student.config.model_type == "bert"
    assert tok.get_vocab() == AutoTokenizer.from_pretrained(models["bert"]).get_vocab()
    with pytest.raises(DomainBertError, match="distillation needs one tokenizer"):
        build_student(teacher, teacher_tok, Task.CLASSIFICATION, student=str(models["bert"]), own_tokenizer=False)


def test_student_layers_cut_a_student_checkpoint_to_its_own_layers(models):
    teacher, tok = _load(models["bert2"])
    source, _ = _load(models["bert"])
    student, layer_map, _ = build_student(
        teacher, tok, Task.CLASSIFICATION, student=str(models["bert"]), student_layers=2
    )
    assert layer_map is None  # copied from the student checkpoint, not from the teacher: the uniform map applies
    src = source.bert.encoder.layer[3].attention.self.query.weight
    assert torch.equal(student.bert.encoder.layer[1].attention.self.query.weight, src)


def test_one_way_to_build_a_student_at_a_time(models):
    teacher, tok = _load(models["bert"])
    with pytest.raises(DomainBertError, match="give one of model.student"):
        build_student(teacher, tok, Task.CLASSIFICATION, student=str(models["bert2"]), student_config={"x": 1})
    with pytest.raises(DomainBertError, match="give one of model.student"):
        build_student(teacher, tok, Task.CLASSIFICATION)
