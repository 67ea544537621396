"""The pipeline's deployment choice: the export's options, the deploy settings' checks, the report's and last lines."""

from __future__ import annotations

import json

import pytest

from domainbert.errors import DomainBertError
from domainbert.pipeline.deployment import answer, export_options, final_lines, report_lines, ship_line
from domainbert.pipeline.recipe import Choice
from domainbert.pipeline.runner import tool_argv
from domainbert.pipeline.specs import DeploySpec, ExportSpec, TaskFiles
from domainbert.pipeline.strategies.base import Run

TASK = TaskFiles("train.jsonl", "val.jsonl", "test.jsonl")
STUDENT = Run("distill", hf="p/distill/hf", predictions="p/distill/test_predictions.json")
PROBE = Run("probe", kind="probe", hf="p/probe/hf", predictions="p/probe/test_predictions.json")


def test_the_export_measures_the_probe_and_validation_and_carries_the_rule():
    options = export_options(STUDENT, "p/ft/hf", TASK, DeploySpec(max_drop=0.5), "p/ft/test.json", PROBE)
    assert (options["model"], options["teacher"]) == ("p/distill/hf", "p/ft/hf")
    assert (options["role"], options["data"], options["val"]) == ("student", "test.jsonl", "val.jsonl")
    assert (options["probe"], options["probe_predictions"]) == ("p/probe/hf", "p/probe/test_predictions.json")
    assert (options["max_drop"], options["max_ms"]) == (0.5, None)
    argv = tool_argv("export", options, ExportSpec().args)
    assert argv[argv.index("--max_ms") + 1] == "null"
    assert argv[-2:] == ["--int8", "true"]  # the export stage's own args come last


def test_a_probe_that_is_the_teacher_is_not_measured_twice_and_the_settings_turn_rows_off():
    shipped_probe = export_options(STUDENT, "p/probe/hf", TASK, None, None, PROBE)
    assert "probe" not in shipped_probe and shipped_probe["max_drop"] == 1.0
    off = export_options(STUDENT, "p/ft/hf", TASK, DeploySpec(validation=False, probe=False), None, PROBE)
    assert "probe" not in off and "val" not in off
    no_val = export_options(STUDENT, "p/ft/hf", TaskFiles("t", None, "te"), DeploySpec(), None, None)
    assert "val" not in no_val and "probe" not in no_val


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"max_drop": -1.0}, "pipeline: deploy.max_drop=-1.0: expected macro-F1 points at or above 0"),
        ({"max_ms": 0.0}, "pipeline: deploy.max_ms=0.0: expected ms/example at batch 32 above 0"),
    ],
)
def test_the_deploy_settings_are_checked_when_made(fields, message):
    with pytest.raises(DomainBertError, match=message):
        DeploySpec(**fields)
    assert DeploySpec(max_drop=None, max_ms=5.0).max_ms == 5.0


def _export(tmp_path, below: bool):
    folder = tmp_path / "p" / "export"
    folder.mkdir(parents=True)
    rec = {"variant": "int8", "label": "student int8", "path": str(folder / "int8"), "score": 0.728}
    rec.update(split="validation", data="val.jsonl", why="the fastest at batch 32 ...", latency_ms_b32=4.2)
    rec.update(rule="at most 5 ms/example at batch 32", probe=0.761 if below else 0.7, below_probe=below)
    rec.update(max_drop=1.0, max_ms=5.0)
    (folder / "report.json").write_text(json.dumps({"recommendation": rec}))
    (folder / "tradeoff.png").write_bytes(b"png")
    return str(folder)


CHOSEN = Run("finetune-baseline-seed0", 0, hf="p/finetune-baseline-seed0/hf", metrics={"val/f1_macro": 0.80})
CHOICE = Choice("baseline", CHOSEN, "f1_macro", {"baseline": 0.80}, "baseline")


def test_the_answer_is_the_exports_recommendation_and_warns_below_the_probe(tmp_path):
    folder = _export(tmp_path, below=True)
    ship = answer(folder, CHOICE, "best validation", None)
    assert (ship["folder"], ship["label"], ship["source"]) == (
        str(tmp_path / "p/export/int8"),
        "student int8",
        "export",
    )
    line = ship_line(ship)
    assert line == (
        f"Ship: {tmp_path}/p/export/int8 (student int8): 4.2 ms/example at batch 32, validation macro-F1 0.7280: "
        "the fastest at batch 32 ...."
    )
    warning = "WARNING: the recommended student int8 scores 0.7280 validation macro-F1, below the frozen-embedding"
    assert ship["warning"].startswith(warning)
    text = "\n".join(report_lines(folder, tmp_path / "p"))
    assert "![latency against macro-F1](export/tradeoff.png)" in text
    assert "95% paired bootstrap interval against the best over the validation rows" in text


def test_without_a_recommendation_the_chosen_model_ships_and_says_why(tmp_path):
    skipped = answer(None, CHOICE, "best validation", "no test split (task_test)")
    assert skipped["folder"] == "p/finetune-baseline-seed0/hf" and skipped["latency_ms_b32"] is None
    assert ship_line(skipped) == (
        "Ship: p/finetune-baseline-seed0/hf (baseline): validation f1_macro 0.8000: the fine-tuned model chosen on "
        "validation (best validation); no deployment variant was measured (no test split (task_test))."
    )
    folder = tmp_path / "export"
    folder.mkdir()
    (folder / "report.json").write_text(json.dumps({"recommendation": {"variant": None, "why": "no variant is ..."}}))
    none = answer(str(folder), CHOICE, "best validation", None)
    assert none["folder"] == CHOSEN.hf and "no deployment variant meets the rule: no variant is ..." in none["why"]
    assert report_lines(None, tmp_path) == []


def test_the_last_lines_are_read_from_the_pipelines_report_json(tmp_path):
    ship = answer(_export(tmp_path, below=False), CHOICE, "best validation", None)
    (tmp_path / "report.json").write_text(json.dumps({"ship": ship}))
    assert final_lines(tmp_path / "report.json") == [ship_line(ship)]
    (tmp_path / "report.json").write_text(json.dumps({"ship": ship, "left_on_table": ["Left on the table: ..."]}))
    assert final_lines(tmp_path / "report.json") == ["Left on the table: ...", ship_line(ship)]  # the answer last
    assert final_lines(tmp_path / "missing.json") == []
