"""Weights that do not fit never load as random: a classifier folder without its head, an empty ``model.safetensors``,
a weight the model has no place for, an empty ``model_int8.pt``.

``load_variant`` (and so ``export``), ``predict`` and ``fit --model.init_from`` refuse them on one line naming the
weights, unless the user asks for a fresh head (``--model.head_init random``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from domainbert.cli import main
from domainbert.deploy.folders import INT8_WEIGHTS, VARIANT_FILE
from domainbert.deploy.load import load_variant
from domainbert.deploy.sample import sample_classifier
from domainbert.errors import DomainBertError
from domainbert.modules.classification import SequenceClassificationModule
from tests.helpers import bad_input, faults_summary

LABELS = ["api", "graphics", "network"]


def rewrite(folder: Path, change) -> Path:
    """``folder`` with ``change(tensors)`` saved as its ``model.safetensors``."""
    weights = folder / "model.safetensors"
    save_file(change(load_file(str(weights))), str(weights), metadata={"format": "pt"})
    return folder


@pytest.fixture
def headless(tmp_path) -> Path:
    """A classifier folder (config: BertForSequenceClassification) whose weights lack ``classifier.*``."""
    folder = Path(sample_classifier(tmp_path / "headless", labels=LABELS))
    return rewrite(folder, lambda t: {k: v for k, v in t.items() if not k.startswith("classifier.")})


def one_line(err: pytest.ExceptionInfo) -> str:
    assert "\n" not in str(err.value)
    return str(err.value)


@bad_input
def test_a_classifier_folder_without_its_head_is_refused_naming_the_weights(headless):
    with pytest.raises(DomainBertError) as err:
        load_variant(headless)
    line = one_line(err)
    assert line.startswith(f"{headless}: its weights do not fit BertForSequenceClassification: missing ")
    assert "classifier.bias, classifier.weight" in line and "export or save the trained model again" in line


@bad_input
def test_an_empty_safetensors_file_is_refused_with_the_list_cut_short(tmp_path):
    folder = rewrite(Path(sample_classifier(tmp_path / "empty", labels=LABELS)), lambda t: {})
    with pytest.raises(DomainBertError) as err:
        load_variant(folder)
    assert "missing bert.embeddings" in one_line(err) and " more); " in one_line(err)


@bad_input
def test_a_weight_the_model_has_no_place_for_is_refused(tmp_path):
    folder = Path(sample_classifier(tmp_path / "extra", labels=LABELS))
    rewrite(folder, lambda t: {**t, "adapter.weight": torch.zeros(2)})
    with pytest.raises(DomainBertError) as err:
        load_variant(folder)
    assert "unexpected adapter.weight" in one_line(err)


@bad_input
def test_an_empty_int8_state_dict_is_one_line_naming_the_file(tmp_path):
    folder = Path(sample_classifier(tmp_path / "int8", labels=LABELS))
    torch.save({}, folder / INT8_WEIGHTS)
    (folder / VARIANT_FILE).write_text(json.dumps({"variant": "int8", "backend": "torch"}))
    with pytest.raises(DomainBertError) as err:
        load_variant(folder)
    line = one_line(err)
    assert line.startswith(f"{folder / INT8_WEIGHTS}: holds an empty state dict; expected a state dict of the model's")


@bad_input
def test_export_refuses_a_random_headed_model_and_writes_nothing(headless, tmp_path, capsys):
    data = tmp_path / "test.jsonl"
    data.write_text("".join(json.dumps({"text": f"row {i}", "label": LABELS[i % 3]}) + "\n" for i in range(6)))
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as done:
        main(["export", "--model", str(headless), "--data", str(data), "--out", str(out), "--onnx", "false"])
    assert done.value.code == 2
    line = faults_summary.check_one_line(capsys.readouterr().err)
    assert "classifier.bias, classifier.weight" in line
    assert not [p for p in out.rglob("*") if not p.name.startswith(".")]  # no variant, no report, no recommendation


def _predict(init_from: Path, tmp_path: Path, *extra: str) -> list[str]:
    txt, train = tmp_path / "in.txt", tmp_path / "train.jsonl"
    txt.write_text("The server exports network packets.\n", encoding="utf-8")
    train.write_text("".join(json.dumps({"text": f"row {label}", "label": label}) + "\n" for label in LABELS))
    argv = ["predict", "--model", "classification", "--model.init_from", str(init_from), "--data", "classification"]
    argv += ["--data.predict", str(txt), "--data.train", str(train)]
    return [*argv, "--trainer.default_root_dir", str(tmp_path / "runs"), "--trainer.accelerator", "cpu", *extra]


@bad_input
def test_predict_from_a_classifier_folder_without_its_head_is_refused(headless, tmp_path, capsys):
    with pytest.raises(SystemExit) as done:
        main(_predict(headless, tmp_path))
    assert done.value.code == 2
    line = faults_summary.check_one_line(capsys.readouterr().err)
    assert "was saved with a trained sequence-classification head (config.json: architectures)" in line
    assert "missing classifier.bias, classifier.weight" in line and "--model.head_init random" in line


@bad_input
def test_predict_with_a_head_nothing_trained_is_refused(tiny_bert, tmp_path, capsys):
    with pytest.raises(SystemExit) as done:
        main(_predict(tiny_bert, tmp_path))  # an encoder: no head of its own, and no --ckpt_path
    assert done.value.code == 2
    line = faults_summary.check_one_line(capsys.readouterr().err)
    assert "has no trained sequence-classification head and no --ckpt_path gives one" in line
    assert "its predict outputs would be random" in line and not list((tmp_path / "runs").rglob("predictions.jsonl"))


def test_a_fresh_head_is_the_users_to_ask_for(headless, tiny_bert, tmp_path, capsys):
    with pytest.raises(DomainBertError, match="but its weights lack it: missing classifier.bias"):
        SequenceClassificationModule(str(headless), label_names=LABELS)
    module = SequenceClassificationModule(str(headless), label_names=LABELS, head_init="random")
    assert module.random_head == ["classifier.bias", "classifier.weight"]
    assert SequenceClassificationModule(str(tiny_bert), label_names=LABELS).random_head  # fine-tuning starts one
    main(_predict(tiny_bert, tmp_path, "--model.head_init", "random"))  # evaluated untrained, as asked
    assert list((tmp_path / "runs").rglob("predictions.jsonl"))
