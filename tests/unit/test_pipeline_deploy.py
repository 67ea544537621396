"""The pipeline's deployment choice: the export's options, the deploy settings' checks, the report's and last lines."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from domainbert.deploy.recommend import Recommendation
from domainbert.errors import DomainBertError
from domainbert.pipeline.deployment import answer, export_options, final_lines, report_lines, ship_line
from domainbert.pipeline.recipe import Choice
from domainbert.pipeline.records import Ship
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
    assert argv[-4:] == ["--int8", "true", "--bf16", "auto"]  # the export stage's own args come last


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
    rec = Recommendation("f1_macro", "validation", "at most 5 ms/example at batch 32", "the fastest at batch 32 ...")
    rec = replace(rec, variant="int8", label="student int8", path=str(folder / "int8"), score=0.728, data="val.jsonl")
    rec = replace(rec, latency_ms_b32=4.2, probe=0.761 if below else 0.7, below_probe=below, max_drop=1.0, max_ms=5.0)
    (folder / "report.json").write_text(json.dumps({"recommendation": rec.to_json()}))
    (folder / "tradeoff.png").write_bytes(b"png")
    return str(folder)


CHOSEN = Run("finetune-baseline-seed0", 0, hf="p/finetune-baseline-seed0/hf", metrics={"val/f1_macro": 0.80})
CHOICE = Choice("baseline", CHOSEN, "f1_macro", {"baseline": 0.80}, "baseline")


def test_the_answer_is_the_exports_recommendation_and_warns_below_the_probe(tmp_path):
    folder = _export(tmp_path, below=True)
    ship = answer(folder, CHOICE, "best validation", None)
    assert (ship.folder, ship.label, ship.source) == (
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
    assert ship.warning.startswith(warning)
    text = "\n".join(report_lines(folder, tmp_path / "p"))
    assert "![latency against macro-F1](export/tradeoff.png)" in text
    assert "95% paired bootstrap interval against the best over the validation rows" in text


def test_without_a_recommendation_the_chosen_model_ships_and_says_why(tmp_path):
    skipped = answer(None, CHOICE, "best validation", "no test split (task_test)")
    assert skipped.folder == "p/finetune-baseline-seed0/hf" and skipped.latency_ms_b32 is None
    assert ship_line(skipped) == (
        "Ship: p/finetune-baseline-seed0/hf (baseline): validation f1_macro 0.8000: the fine-tuned model chosen on "
        "validation (best validation); no deployment variant was measured (no test split (task_test))."
    )
    folder = tmp_path / "export"
    folder.mkdir()
    none = Recommendation("f1_macro", "validation", "at most 1 ms/example at batch 32", "no variant is ...")
    (folder / "report.json").write_text(json.dumps({"recommendation": none.to_json()}))
    shipped = answer(str(folder), CHOICE, "best validation", None)
    assert shipped.folder == CHOSEN.hf and "no deployment variant meets the rule: no variant is ..." in shipped.why
    assert report_lines(None, tmp_path) == []


def test_the_last_lines_are_read_from_the_pipelines_report_json(tmp_path):
    ship = answer(_export(tmp_path, below=False), CHOICE, "best validation", None)
    (tmp_path / "report.json").write_text(json.dumps({"ship": ship.to_json()}))
    assert final_lines(tmp_path / "report.json") == [ship_line(ship)]
    left = {"ship": ship.to_json(), "left_on_table": ["Left on the table: ..."]}
    (tmp_path / "report.json").write_text(json.dumps(left))
    assert final_lines(tmp_path / "report.json") == ["Left on the table: ...", ship_line(ship)]  # the answer last
    assert final_lines(tmp_path / "missing.json") == []


def test_the_answer_is_a_record_its_file_gives_back(tmp_path):
    for ship in (
        answer(_export(tmp_path, below=True), CHOICE, "best validation", None),
        answer(None, CHOICE, "best validation", "no test split (task_test)"),
    ):
        assert Ship.from_json(json.loads(json.dumps(ship.to_json())), "report.json: ship") == ship


def test_a_recommendation_or_an_answer_of_the_wrong_form_is_refused_in_one_line(tmp_path):
    folder = _export(tmp_path, below=False)
    path = tmp_path / "p" / "export" / "report.json"
    rec = json.loads(path.read_text())["recommendation"]
    path.write_text(json.dumps({"recommendation": {**rec, "score": "high"}}))
    with pytest.raises(DomainBertError, match=r"export/report.json: recommendation.score='high'; expected a float$"):
        answer(folder, CHOICE, "best validation", None)
    path.write_text(json.dumps({"recommendation": {**rec, "best": {"label": "teacher"}}}))
    with pytest.raises(DomainBertError, match=r"recommendation.best: no field 'variant'; expected Best's fields$"):
        answer(folder, CHOICE, "best validation", None)
    (tmp_path / "report.json").write_text(json.dumps({"ship": {"folder": "x", "label": "y", "why": "z"}}))
    with pytest.raises(DomainBertError, match=r"report.json: ship: no field 'source'; expected Ship's fields$"):
        final_lines(tmp_path / "report.json")
    (tmp_path / "report.json").write_text(json.dumps({"ship": {"folder": 1, "label": "y", "why": "z", "source": "x"}}))
    with pytest.raises(DomainBertError, match=r"report.json: ship.folder=1; expected a str$"):
        final_lines(tmp_path / "report.json")
