"""An export answers as its training stage scored it: the training length and precision, recorded in the folder,
read by default by ``classify``, ``domainbert export``, ``domainbert predict`` and any tokenizer user; ``classify``
batches rows as a test pass does, in the order given."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

from domainbert.cli.predict_args import predict_args
from domainbert.core.callbacks import HFExport
from domainbert.core.scoring import SCORING_KEY, record_scoring, scored_length
from domainbert.data.classification import ClassificationDataModule
from domainbert.deploy.bench import length_sorted_batches
from domainbert.deploy.classifier import classify
from domainbert.deploy.command import export
from domainbert.deploy.load import load_variant
from domainbert.deploy.sample import WORDS, sample_classifier
from domainbert.errors import DomainBertError

LABELS = ["api", "graphics", "network"]
#: texts of 2 to 40 words: most are longer than the 8 tokens recorded below
TEXTS = [" ".join(WORDS[i % len(WORDS)] for i in range(k, k + 2 + 3 * k)) for k in range(13)]


@pytest.fixture
def folder(tmp_path) -> Path:
    """A tiny classifier whose export records a training length of 8 tokens, scored in float32."""
    path = sample_classifier(tmp_path / "model", labels=LABELS)
    record_scoring(path, max_length=8, precision="32-true")
    return path


def _fake_fit(tmp_path: Path, max_length: int, precision: str) -> SimpleNamespace:
    """What ``HFExport`` reads of a trainer whose fit just ended (no checkpoint to restore)."""
    datamodule = SimpleNamespace(max_length=max_length)
    return SimpleNamespace(
        sanity_checking=False,
        loggers=[],
        default_root_dir=str(tmp_path / "run"),
        checkpoint_callbacks=[],
        datamodule=datamodule,
        precision=precision,
    )


def test_the_fit_export_records_the_training_length_and_precision(tmp_path):
    from domainbert.modules.classification import SequenceClassificationModule

    module = SequenceClassificationModule(str(sample_classifier(tmp_path / "base", labels=LABELS)))
    callback = HFExport(restore_best=False)
    callback.on_fit_end(_fake_fit(tmp_path, 8, "bf16-mixed"), module)
    hf = tmp_path / "run" / "hf"
    assert json.loads((hf / "config.json").read_text())[SCORING_KEY] == {"max_length": 8, "precision": "bf16-mixed"}
    assert json.loads((hf / "tokenizer_config.json").read_text())["model_max_length"] == 8  # was the base's 128
    assert AutoTokenizer.from_pretrained(hf).model_max_length == 8  # what pipeline(..., truncation=True) cuts at


def test_pipeline_and_classify_read_the_recorded_length_by_default(folder):
    from transformers import pipeline

    model, tokenizer, _ = load_variant(folder)
    assert scored_length(model.config, tokenizer) == 8
    rows = classify(model, tokenizer, TEXTS)
    assert rows == classify(model, tokenizer, TEXTS, max_length=8)
    assert rows != classify(model, tokenizer, TEXTS, max_length=128)  # the length does change the answers
    pipe = pipeline("text-classification", model=str(folder), device="cpu")
    for text, row in zip(TEXTS, rows, strict=True):
        scores = {d["label"]: d["score"] for d in pipe(text, top_k=None, truncation=True)}
        assert scores == pytest.approx(row["probabilities"], abs=1e-5)


def test_classify_batches_rows_as_the_test_pass_does_and_answers_in_the_order_given(folder, tmp_path):
    model, tokenizer, _ = load_variant(folder)
    data = tmp_path / "test.jsonl"
    data.write_text("".join(json.dumps({"text": t, "label": LABELS[i % 3]}) + "\n" for i, t in enumerate(TEXTS)))
    dm = ClassificationDataModule(test=str(data), labels=LABELS, batch_size=4, max_length=8)
    dm.connect(tokenizer=tokenizer)
    seen = [({k: v for k, v in b.items() if k in tokenizer.model_input_names}) for b in dm.test_dataloader()]
    ours = [batch for _, batch in length_sorted_batches(tokenizer, TEXTS, 4, 8)]
    assert len(ours) == len(seen) and len(seen) > 1
    for a, b in zip(ours, seen, strict=True):
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    one_by_one = [classify(model, tokenizer, [t])[0] for t in TEXTS]
    for row, alone in zip(classify(model, tokenizer, TEXTS, batch_size=4), one_by_one, strict=True):
        assert row["label"] == alone["label"]
        assert row["probabilities"] == pytest.approx(alone["probabilities"], abs=1e-5)


def test_classify_runs_in_the_recorded_precision_where_bf16_is_native(folder, monkeypatch):
    model, tokenizer, _ = load_variant(folder)
    monkeypatch.setattr("domainbert.core.hardware.cpu_has_fast_bf16", lambda: True)
    fp32, bf16 = (classify(model, tokenizer, TEXTS, bf16=flag) for flag in (False, True))
    assert fp32 != bf16
    assert classify(model, tokenizer, TEXTS) == fp32  # recorded 32-true: float32 even where bf16 is native
    model.config.domainbert_scoring = {"max_length": 8, "precision": "bf16-mixed"}
    assert classify(model, tokenizer, TEXTS) == bf16
    monkeypatch.setattr("domainbert.core.hardware.cpu_has_fast_bf16", lambda: False)
    assert classify(model, tokenizer, TEXTS) == fp32  # emulated bf16 would be several times slower


def test_one_string_is_one_text_and_anything_else_is_refused(folder):
    model, tokenizer, _ = load_variant(folder)
    one = classify(model, tokenizer, TEXTS[5])
    assert len(one) == 1 and one == classify(model, tokenizer, [TEXTS[5]])
    assert classify(model, tokenizer, []) == []
    with pytest.raises(DomainBertError, match=r"texts\[1\]: expected a string, got int"):
        classify(model, tokenizer, ["a text", 3])
    with pytest.raises(DomainBertError, match="expected a string or a list of strings, got bytes"):
        classify(model, tokenizer, b"a text")


def test_a_malformed_record_is_refused_naming_the_field(folder):
    config = AutoConfig.from_pretrained(folder)
    config.domainbert_scoring = {"max_length": "long"}
    tokenizer = AutoTokenizer.from_pretrained(folder)
    with pytest.raises(DomainBertError, match=r"field 'domainbert_scoring': 'max_length' must be a positive integer"):
        scored_length(config, tokenizer)


def test_export_reads_the_recorded_length_and_every_variant_records_it(folder, tmp_path):
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"text": t, "label": LABELS[i % 3]}) + "\n" for i, t in enumerate(TEXTS)))
    result = export(str(folder), str(tmp_path / "out"), data=str(data), latency_examples=4, repeats=1, int8=True)
    assert {row["max_length"] for row in result["variants"]} == {8}
    for name in ("student", "int8"):
        variant = tmp_path / "out" / name
        assert json.loads((variant / "tokenizer_config.json").read_text())["model_max_length"] == 8
        model, tokenizer, _ = load_variant(variant)
        assert scored_length(model.config, tokenizer) == 8
    int8 = json.loads((tmp_path / "out" / "int8" / "config.json").read_text())[SCORING_KEY]
    assert int8 == {"max_length": 8}  # float32 activations, whatever the model was scored in


def test_export_cuts_at_its_own_max_length_and_records_that(folder, tmp_path):
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"text": t, "label": LABELS[i % 3]}) + "\n" for i, t in enumerate(TEXTS)))
    export(str(folder), str(tmp_path / "out"), data=str(data), max_length=16, latency_examples=4, repeats=1)
    model, tokenizer, _ = load_variant(tmp_path / "out" / "student")
    assert scored_length(model.config, tokenizer) == 16 and tokenizer.model_max_length == 16


def test_a_model_with_fewer_positions_than_max_length_is_exported_with_inputs_cut_to_fit(tmp_path, caplog):
    folder = sample_classifier(tmp_path / "model", labels=["a", "b"])
    config = AutoConfig.from_pretrained(folder)
    config.max_position_embeddings = 16  # below export's default max_length of 128
    AutoModelForSequenceClassification.from_config(config).save_pretrained(folder)
    long_text = " ".join(list(WORDS) * 8)
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"text": long_text, "label": lab}) + "\n" for lab in "abab"))
    caplog.set_level(logging.INFO, logger="domainbert.deploy.command")
    result = export(str(folder), str(tmp_path / "out"), data=str(data), latency_examples=4, repeats=1, int8=False)
    assert "--max_length 128 is beyond the model's 16 positions; inputs are cut at 16" in caplog.text
    assert {row["variant"] for row in result["variants"]} >= {"student"}


# -- domainbert predict --------------------------------------------------------------------------------------
def test_predict_reads_the_length_an_export_records_unless_one_is_given(folder, tmp_path):
    record_scoring(folder, max_length=8, precision="bf16-mixed")  # predict's automatic precision
    base = ["--model", "classification", "--model.init_from", str(folder), "--data", "classification"]
    assert predict_args(base) == ["--data.max_length", "8"]
    assert predict_args([*base, "--data.max_length", "64"]) == []
    assert predict_args([*base, "--data.init_args.max_length=64"]) == []
    assert predict_args([*base, "--help"]) == []
    assert predict_args(["--model", "classification", "--model.init_from", str(folder)]) == []  # no data given
    config = tmp_path / "c.yaml"
    config.write_text(f"model:\n  init_args:\n    init_from: {folder}\ndata:\n  class_path: x\n")
    assert predict_args(["--config", str(config)]) == ["--data.max_length", "8"]
    config.write_text(f"model:\n  init_from: {folder}\ndata:\n  init_args:\n    max_length: 32\n")
    assert predict_args(["--config", str(config)]) == []  # the config's own length
    assert predict_args(["--config", "finetune", "--model.init_from", str(folder)]) == []  # a built-in config's too
    plain = sample_classifier(tmp_path / "plain", labels=LABELS)  # an export without a record
    assert predict_args(["--model.init_from", str(plain), "--data", "classification"]) == []


def test_predict_runs_in_float32_where_the_export_was_scored_so(folder, monkeypatch):
    monkeypatch.setattr("domainbert.core.hardware.cpu_has_fast_bf16", lambda: True)
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    base = ["--model.init_from", str(folder), "--data", "classification"]
    assert predict_args(base) == ["--data.max_length", "8", "--trainer.precision", "32-true"]
    assert predict_args([*base, "--trainer.precision", "bf16-mixed"]) == ["--data.max_length", "8"]
