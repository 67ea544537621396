"""A pipeline whose fine-tuning fails to learn ships the frozen-embedding probe as a classifier,
says so in its last line and its report, and that classifier loads through ``domainbert predict`` and distils."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from domainbert.pipeline import ExportSpec, ProbeSpec, StageSpec
from domainbert.pipeline.runner import read_state
from tests.helpers.pipeline_tiny import FIX, tiny_pipeline

#: fine-tuning that cannot learn: a learning rate of 1e-12 leaves the random head as it is
FAILING = ["--trainer.max_epochs=1", "--model.learning_rate=1e-12", "--model.head_init=null"]
DISTILL = ["--trainer.max_steps=2", "--trainer.val_check_interval=2", "--model.init_args.teacher_cache=null"]


def _predicted_labels(hf: Path, data: Path, root: Path) -> list[str]:
    """The labels ``domainbert predict`` gives the rows of ``data`` with the export ``hf``."""
    from domainbert.cli import main

    main(
        ["predict", "--model", "classification", "--model.init_from", str(hf), "--data", "classification"]
        + ["--data.predict", str(data), "--data.max_length", "128", "--trainer.default_root_dir", str(root)]
        + ["--run_name", "p", "--trainer.enable_progress_bar", "false", "--trainer.accelerator", "cpu"]
        + ["--trainer.precision", "32-true"]
    )
    rows = (root / "p" / "version_0" / "predictions.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["label"] for line in rows]


def test_when_fine_tuning_fails_the_probe_ships_as_a_classifier_and_the_last_line_and_report_say_so(
    tiny_bert, tmp_path, capsys
):
    out = tmp_path / "p"
    report = tiny_pipeline(
        tiny_bert,
        out,
        [0],
        task_test=None,
        probe=ProbeSpec(),
        finetune=StageSpec("configs/finetune/tiny_classification.yaml", FAILING),
        distill=StageSpec("configs/distill/tiny_debug.yaml", [*DISTILL, "--model.init_args.student_layers=1"]),
        export=ExportSpec(),
    )
    printed = capsys.readouterr().out
    state = read_state(out / "state.json")
    probe = json.loads((out / "probe" / "result.json").read_text())
    tuned = state["finetune-baseline-seed0"]["metrics"]["val/f1_macro"]
    assert probe["val"]["f1_macro"] > tuned  # the premise: fine-tuning learnt nothing the probe did not beat
    shipped = out / "probe" / "hf"
    last = printed.strip().splitlines()[-1]
    assert last.startswith(f"Ship: {shipped} (frozen probe): ")  # the export is skipped: the chosen model ships
    assert "fine-tuning failed to beat the frozen-embedding probe" in last
    text = report.read_text()
    assert "Warning: fine-tuning failed." in text and "ships the probe as a classifier" in text
    assert "**frozen probe**, the base encoder, frozen, with the probe's logistic regression as its" in text
    # the distillation's teacher is the probe classifier; with no test split the export is skipped, and said so
    distill = yaml.safe_load(Path(state["distill"]["config"]).read_text())
    assert distill["model"]["init_args"]["teacher"] == str(shipped)
    assert "[export] skipped: no test split (task_test)" in printed and "export" not in state
    assert "**not exported**: no test split (task_test)" in text
    # the shipped folder is a classifier domainbert loads: its predictions are the probe's own
    predicted = _predicted_labels(shipped, FIX / "cls_val.jsonl", tmp_path / "runs")
    gold = [json.loads(line)["label"] for line in (FIX / "cls_val.jsonl").read_text().splitlines() if line.strip()]
    accuracy = sum(p == g for p, g in zip(predicted, gold)) / len(gold)
    assert len(predicted) == len(gold) and abs(accuracy - probe["val"]["acc"]) < 1e-6
