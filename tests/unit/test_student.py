"""Building students: copied layers equal the teacher's, config students, checkpoints, tokenizer checks."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from domainbert.distill.student import (
    check_same_tokenizer,
    copied_layer_map,
    num_layers,
    select_layers,
    student_from_checkpoint,
    student_from_config,
    student_from_teacher,
)
from domainbert.errors import DomainBertError
from tests.helpers.distill_tiny import make_teacher
from tests.helpers.tiny import make_tiny


@pytest.fixture(scope="module")
def teachers(tmp_path_factory):
    root = tmp_path_factory.mktemp("teachers")
    return {f: make_teacher(f, root / f, layers=4) for f in ("bert", "roberta", "albert", "distilbert", "electra")}


def test_select_layers():
    assert select_layers(3, 6) == [1, 3, 5]
    assert select_layers(6, 12) == [1, 3, 5, 7, 9, 11]
    assert select_layers(6, 12, "spread") == [0, 2, 4, 7, 9, 11]  # DistilBERT's choice
    assert select_layers(1, 4, "spread") == [3]
    assert copied_layer_map([1, 3]) == {0: 0, 1: 2, 2: 4}
    with pytest.raises(DomainBertError, match="between 1 and"):
        select_layers(7, 6)


@pytest.mark.parametrize("family", ["bert", "roberta", "distilbert", "electra"])
def test_copied_layers_equal_the_teachers(teachers, family):
    teacher = AutoModelForSequenceClassification.from_pretrained(teachers[family]).eval()
    student, selected = student_from_teacher(teacher, 2)
    assert selected == [1, 3] and num_layers(student.config) == 2
    t_state, s_state = teacher.state_dict(), student.state_dict()
    layer_keys = [k for k in s_state if ".layer.1." in k]
    assert layer_keys
    for key in layer_keys:
        assert torch.equal(s_state[key], t_state[key.replace(".layer.1.", ".layer.3.")]), key
    for key in s_state:
        if ".layer." not in key:  # embeddings, pooler, classifier
            assert torch.equal(s_state[key], t_state[key]), key
    assert sum(p.numel() for p in student.parameters()) < sum(p.numel() for p in teacher.parameters())
    # the student runs and gives the teacher's output shapes
    ids = torch.randint(5, 100, (2, 7))
    assert student(input_ids=ids).logits.shape == teacher(input_ids=ids).logits.shape


def test_explicit_layer_list(teachers):
    teacher = AutoModelForSequenceClassification.from_pretrained(teachers["bert"])
    student, selected = student_from_teacher(teacher, [0, 2])
    assert selected == [0, 2]
    w = "bert.encoder.layer.{}.attention.self.query.weight"
    assert torch.equal(student.state_dict()[w.format(1)], teacher.state_dict()[w.format(2)])
    with pytest.raises(DomainBertError, match="numbered 0..3"):
        student_from_teacher(teacher, [0, 9])


def test_albert_student_shares_the_teachers_weights(teachers):
    teacher = AutoModelForSequenceClassification.from_pretrained(teachers["albert"])
    student, _ = student_from_teacher(teacher, 2)
    assert student.config.num_hidden_layers == 2
    t_state = teacher.state_dict()
    for key, value in student.state_dict().items():
        assert torch.equal(value, t_state[key]), key


def test_student_from_config_is_smaller(teachers):
    teacher = AutoModelForSequenceClassification.from_pretrained(teachers["bert"])
    student = student_from_config(
        teacher.config,
        {"num_hidden_layers": 1, "hidden_size": 16, "num_attention_heads": 2, "intermediate_size": 32},
        "classification",
    )
    assert student.config.num_hidden_layers == 1 and student.config.hidden_size == 16
    assert student.config.num_labels == 3 and student.config.vocab_size == teacher.config.vocab_size
    d = AutoModelForSequenceClassification.from_pretrained(teachers["distilbert"])
    ds = student_from_config(d.config, {"num_hidden_layers": 1, "hidden_size": 16}, "classification")
    assert ds.config.n_layers == 1 and ds.config.dim == 16
    other = student_from_config(
        teacher.config, {"model_type": "distilbert", "n_layers": 1, "dim": 16, "n_heads": 2}, "classification"
    )
    assert other.config.model_type == "distilbert" and other.config.vocab_size == teacher.config.vocab_size
    with pytest.raises(DomainBertError, match="no such field"):
        student_from_config(teacher.config, {"num_layerz": 1}, "classification")


def test_tokenizer_mismatch_is_a_clear_error(teachers, tmp_path):
    bert_tok = AutoTokenizer.from_pretrained(teachers["bert"])
    bert_tok.save_pretrained(tmp_path / "copy")
    check_same_tokenizer(bert_tok, AutoTokenizer.from_pretrained(tmp_path / "copy"), "t", "s")  # a copy: fine
    with pytest.raises(DomainBertError, match=r"does not use the teacher's tokenizer \(teacher-dir\).*only in"):
        check_same_tokenizer(bert_tok, AutoTokenizer.from_pretrained(teachers["roberta"]), "teacher-dir", "student")


def test_student_from_checkpoint_takes_the_teachers_labels(teachers, tmp_path):
    teacher = AutoModelForSequenceClassification.from_pretrained(teachers["bert"])
    mlm = make_tiny("bert", tmp_path / "mlm")
    student, missing = student_from_checkpoint(str(mlm), "classification", teacher.config)
    assert student.config.num_labels == 3 and student.config.id2label[2] == "video"
    assert any(k.startswith("classifier") for k in missing)
    roberta = make_tiny("roberta", tmp_path / "rob")
    with pytest.raises(DomainBertError, match="vocabulary"):
        student_from_checkpoint(str(roberta), "classification", teacher.config)
