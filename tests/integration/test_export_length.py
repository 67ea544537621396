"""A fine-tuned export answers as its test pass scored it, from every documented loader: ``classify`` gives the test
pass's very probabilities, ``domainbert predict`` reads the training length, and so do the ONNX variant's tokenizer
and ``pipeline(..., truncation=True)``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from lightning.pytorch import Callback

from domainbert.cli import main
from domainbert.cli.lightning_cli import cli_main
from domainbert.core.prediction import in_file_order, sampler_order
from domainbert.core.scoring import SCORING_KEY
from domainbert.deploy.classifier import classify
from domainbert.deploy.load import load_variant

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"
TINY_CLS = str(ROOT / "configs/finetune/tiny_classification.yaml")
LENGTH = 10  # below most fixture texts' token counts: the length decides what the model reads


class TestProbabilities(Callback):
    """The test pass's probabilities of every row, in file order (a forward hook on the classifier)."""

    def on_test_start(self, trainer, pl_module) -> None:
        self.probs: list[list[float]] = []
        self.hook = pl_module.model.register_forward_hook(
            lambda m, a, out: self.probs.extend(torch.softmax(out.logits.float(), -1).tolist())
        )
        self.order = sampler_order(trainer.test_dataloaders)

    def on_test_end(self, trainer, pl_module) -> None:
        self.hook.remove()
        self.probs = in_file_order(self.probs, self.order)


@pytest.fixture(scope="module")
def fitted(tiny_bert, tmp_path_factory):
    """A tiny classifier fine-tuned at max_length 10 in bf16-mixed, its test pass's probabilities, its export."""
    root = tmp_path_factory.mktemp("fit")
    args = ["fit", "--config", TINY_CLS, "--model.init_from", str(tiny_bert), "--data.max_length", str(LENGTH)]
    args += ["--data.batch_size", "4", "--trainer.max_epochs", "1", "--trainer.precision", "bf16-mixed"]
    args += ["--trainer.default_root_dir", str(root), "--run_name", "r", "--trainer.accelerator", "cpu"]
    cli = cli_main(args)
    probe = TestProbabilities()
    cli.trainer.callbacks.append(probe)
    cli.trainer.test(cli.model, datamodule=cli.datamodule, ckpt_path=None, verbose=False)
    return root / "r" / "version_0" / "hf", probe.probs, root


def _texts() -> list[str]:
    return [json.loads(line)["text"] for line in (FIX / "cls_test.jsonl").read_text(encoding="utf-8").splitlines()]


def test_the_export_records_how_it_was_scored(fitted):
    hf, _, _ = fitted
    record = json.loads((hf / "config.json").read_text())[SCORING_KEY]
    assert record == {"max_length": LENGTH, "precision": "bf16-mixed"}
    assert json.loads((hf / "tokenizer_config.json").read_text())["model_max_length"] == LENGTH


def test_classify_gives_the_test_pass_probabilities_by_default(fitted, monkeypatch):
    hf, scored, _ = fitted
    monkeypatch.setattr("domainbert.core.hardware.cpu_has_fast_bf16", lambda: True)  # bf16 runs here as it ran there
    model, tokenizer, _ = load_variant(hf)
    rows = classify(model, tokenizer, _texts(), batch_size=4)
    assert len(rows) == len(scored) == 15
    for row, probs in zip(rows, scored, strict=True):
        assert list(row["probabilities"].values()) == [round(p, 6) for p in probs]


def test_predict_reads_the_training_length_the_export_records(fitted, capsys):
    hf, _, root = fitted
    args = ["predict", "--model", "classification", "--model.init_from", str(hf), "--data", "classification"]
    args += ["--data.predict", str(FIX / "cls_test.jsonl"), "--trainer.default_root_dir", str(root), "--run_name", "p"]
    main([*args, "--trainer.enable_progress_bar", "false", "--trainer.accelerator", "cpu"])
    run = root / "p" / "version_0"
    config = yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8"))
    assert config["data"]["init_args"]["max_length"] == LENGTH
    written = [json.loads(line) for line in (run / "predictions.jsonl").read_text(encoding="utf-8").splitlines()]
    model, tokenizer, _ = load_variant(hf)
    served = classify(model, tokenizer, _texts(), bf16=config["trainer"]["precision"] == "bf16-mixed")
    assert [r["label"] for r in written] == [r["label"] for r in served]
    for row, ours in zip(written, served, strict=True):
        assert row["probabilities"] == pytest.approx(ours["probabilities"], abs=1e-5)


def test_the_onnx_variant_and_its_tokenizer_read_the_training_length(fitted, tmp_path):
    pytest.importorskip("onnxruntime")
    from domainbert.deploy.command import export

    hf, _, _ = fitted
    export(str(hf), str(tmp_path / "out"), data=str(FIX / "cls_test.jsonl"), onnx=True, latency_examples=4, repeats=1)
    onnx = tmp_path / "out" / "onnx"
    assert json.loads((onnx / "tokenizer_config.json").read_text())["model_max_length"] == LENGTH
    assert json.loads((onnx / "config.json").read_text())[SCORING_KEY] == {"max_length": LENGTH}
    graph, tokenizer, info = load_variant(onnx)
    model, _, _ = load_variant(hf)
    texts = _texts()
    got = classify(graph, tokenizer, texts)
    want = classify(model, tokenizer, texts, bf16=False)
    for a, b in zip(got, want, strict=True):
        assert a["probabilities"] == pytest.approx(b["probabilities"], abs=1e-4)
    enc = tokenizer(texts, truncation=True)  # any tokenizer user, as pipeline(..., truncation=True) calls it
    assert max(len(ids) for ids in enc["input_ids"]) == LENGTH
