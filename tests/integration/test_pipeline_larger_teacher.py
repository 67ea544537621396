"""The larger teacher reaches the user: its distillation reads the distill settings, it and its base-size student
are deployment candidates beside the chosen model and the student, and the report, its JSON and the last line name
one folder to ship."""

from __future__ import annotations

import json

import yaml

from domainbert.pipeline import DistillSpec, ExportSpec
from domainbert.pipeline.deployment import ship_line
from domainbert.pipeline.records import Ship
from domainbert.pipeline.runner import read_state
from domainbert.pipeline.specs import TransferSpec
from tests.helpers.pipeline_tiny import tiny_pipeline
from tests.helpers.tiny import make_tiny

DISTILL = "configs/distill/tiny_debug.yaml"
ARGS = ["--trainer.max_steps=2", "--model.init_args.teacher_cache=null", "--model.init_args.student_layers=1"]


def _config(out, stage: str) -> dict:
    return yaml.safe_load((out / stage / "config.yaml").read_text())


def test_the_larger_teacher_reads_the_distill_settings_stands_in_the_variants_and_one_folder_ships(
    tiny_bert, tmp_path, capsys
):
    out = tmp_path / "p"
    larger = make_tiny("roberta", tmp_path / "roberta")
    spec = DistillSpec(DISTILL, ARGS, transfer=TransferSpec(documents=7, epochs=1))
    export = ExportSpec(args=["--formats", '["int8"]', "--latency_examples", "4", "--repeats", "1"])
    report = tiny_pipeline(tiny_bert, out, [0], distill=spec, export=export, larger_teacher={"model": str(larger)})
    printed = capsys.readouterr().out.strip().splitlines()
    # its distillation reads distill.config, distill.transfer and distill.args, and stays the base model's size
    copy, small = _config(out, "distill-larger_teacher"), _config(out, "distill")
    for config in (copy, small):
        assert config["data"]["init_args"]["transfer"]["documents"] == 7
        assert (config["trainer"]["max_epochs"], config["trainer"]["max_steps"]) == (1, 2)
        assert config["model"]["init_args"]["teacher_cache"] is None  # from distill.args
    assert copy["model"]["init_args"]["student_layers"] is None and copy["model"]["init_args"]["losses"] is None
    assert small["model"]["init_args"]["student_layers"] == 1
    # the larger teacher and its base-size student are exported and stand in the one variants table
    state = read_state(out / "state.json")
    assert state["export-larger_teacher"]["status"] == "done"
    summary = json.loads((out / "export" / "report.json").read_text())
    labels = {r["label"]: r for r in summary["variants"]}
    for label in ("larger teacher", "larger teacher int8", "student", "student int8", "teacher", "teacher int8"):
        row = labels[label]
        assert {"size_mb", "latency_ms_b1", "latency_ms_b32", "f1_macro", "val_f1_macro"} <= set(row), label
        assert len(row["val_predictions"]["pred"]) == 15  # the validation rows, for the paired comparison
    # the rule reads the validation each model's own stage measured: the same weights, rows, length and precision
    for label, stage in (("student", "distill"), ("larger teacher", "finetune-larger_teacher-seed0")):
        assert abs(labels[label]["val_f1_macro"] - state[stage]["metrics"]["val/f1_macro"]) < 1e-4, label
    chosen = state["finetune-baseline-seed0"]["hf"]
    if labels.get("teacher", {}).get("path") == chosen:  # the baseline chosen: the distilled copy is a candidate
        assert "base-size student" in labels
    text = report.read_text()
    assert "| larger teacher |" in text and "| larger teacher int8 |" in text
    assert "val macro-F1 (chooses)" in text and "test macro-F1 (reported)" in text
    # one answer: the report's first section, report.json and the last line name the same folder
    ship = Ship.from_json(json.loads((out / "report.json").read_text())["ship"], "report.json: ship")
    assert ship.folder == summary["recommendation"]["path"] and ship.label == summary["recommendation"]["label"]
    assert printed[-1] == ship_line(ship) and printed[-1].startswith(f"Ship: {ship.folder} ({ship.label}): ")
    assert f"**{ship_line(ship)}**" in text.split("## Does domain adaptation help?")[0]
    assert "Shipped:" not in "\n".join(printed) and "Deploy:" not in "\n".join(printed)
    # the distilled candidate is described as what it is, not as a seed soup
    assert "**distilled from the larger teacher**: the base model's size (a copy of the baseline's best run)" in text
    assert "weight average of distilled" not in text
