"""The report's distilled-student section on hand-made records: the student's test points against the chosen model
and the frozen probe, its distillation's minutes and transfer set, and the full recipe's minutes per point gained over
the probe (every stage of this invocation), or that it gained nothing."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import yaml

from domainbert.pipeline.recipe import Choice, Distilled, Probed
from domainbert.pipeline.report import minutes_per_point, student_lines, write_report
from domainbert.pipeline.runner import Runner
from domainbert.pipeline.strategies.base import BASELINE, Candidate, Run

STAGES = {"probe": 60.0, "finetune-baseline-seed0": 120.0, "distill": 300.0}


class _Runner:
    """This invocation's stages (8 minutes in all, the probe's 1), and an older stage it did not call."""

    called = [*STAGES, "probe"]  # a stage called twice counts once
    state = {**{s: {"seconds": v} for s, v in STAGES.items()}, "dapt": {"seconds": 600.0}}

    def seconds(self, stage):
        return self.state.get(stage, {}).get("seconds", 0.0)


def _student(test: float | None, transfer: bool = True) -> Distilled:
    """A distilled student (not exported); its resolved config (beside the test's files) has a transfer set or none."""
    data = {"transfer": {"path": "corpus.jsonl", "documents": 8000, "text_column": "text"} if transfer else None}
    config = Path(tempfile.mkdtemp()) / "config.yaml"
    config.write_text(yaml.safe_dump({"model": {"init_args": {"teacher": "runs/x/hf"}}, "data": {"init_args": data}}))
    metrics = {"val/f1_macro": 0.8} | ({"test/f1_macro": test} if test is not None else {})
    return Distilled(Run("distill", hf="runs/p/distill/hf", metrics=metrics, seconds=300.0, config=str(config)))


def _teacher(*tests: float) -> Candidate:
    runs = [Run(seed=i, hf="runs/x/hf", metrics={"test/f1_macro": t}) for i, t in enumerate(tests)]
    return Candidate(BASELINE, BASELINE, runs=runs)


PROBED = Probed("runs/p/probe", val={"f1_macro": 0.71}, test={"f1_macro": 0.70, "acc": 0.70})


def test_minutes_per_point_are_the_minutes_beyond_the_probe_over_the_test_points_gained():
    extra, gain, per = minutes_per_point(8.0, 1.0, 0.75, 0.70)
    assert extra == 7.0 and gain == pytest.approx(5.0) and per == pytest.approx(1.4)
    assert minutes_per_point(8.0, 1.0, 0.70, 0.70)[2] is None  # nothing gained: no ratio
    extra, gain, per = minutes_per_point(8.0, 1.0, 0.65, 0.70)
    assert gain == pytest.approx(-5.0) and per is None


def test_the_section_gives_points_against_teacher_and_probe_the_distillation_and_the_recipes_minutes_per_point():
    lines = student_lines(_student(0.75), "f1_macro", _Runner(), _teacher(0.76, 0.78), PROBED)
    assert lines == [
        "## Distilled student",
        "",
        "- test f1_macro: 0.7500",
        "- test points against the chosen model (baseline: 0.7700, mean of its 2 runs): -2.00; against the "
        "frozen-embedding probe (0.7000): +5.00",
        "- distillation: 5.0 minutes, with a transfer set of 8000 corpus documents (`data.transfer`)",
        "- export: `runs/p/distill/hf`",
        "- Full recipe: 8.0 minutes of stages; 7.0 minutes beyond the frozen probe's for +5.00 test points of the "
        "student over the probe: 1.40 minutes per point.",
        "- Full recipe: 3.0 minutes of stages; 2.0 minutes beyond the frozen probe's for +7.00 test points of the "
        "chosen model over the probe: 0.29 minutes per point.",  # the distillation is not the teacher's cost
        "",
    ]


def test_a_student_at_or_below_the_probe_gained_nothing_and_no_transfer_set_is_claimed():
    lines = student_lines(_student(0.68, transfer=False), "f1_macro", _Runner(), _teacher(0.70), PROBED)
    assert "- distillation: 5.0 minutes" in lines
    assert "(baseline: 0.7000, its one run): -2.00; against the frozen-embedding probe (0.7000): -2.00" in lines[3]
    assert lines[-3].endswith(
        "-2.00 test points of the student over the probe: the recipe gained nothing over the probe."
    )
    assert lines[-2].endswith(
        "+0.00 test points of the chosen model over the probe: the recipe gained nothing over the probe."
    )
    assert not any("minutes per point" in line for line in lines)


def test_without_a_probe_or_a_test_metric_the_recipe_line_is_left_out():
    no_probe = student_lines(_student(0.75), "f1_macro", _Runner(), _teacher(0.76, 0.78), None)
    assert not any("Full recipe" in line for line in no_probe)
    assert "- test points against the chosen model (baseline: 0.7700, mean of its 2 runs): -2.00" in no_probe
    no_test = student_lines(_student(None), "f1_macro", _Runner(), _teacher(0.76), Probed("p", val={"f1_macro": 0.7}))
    assert "- test f1_macro: – (no test split)" in no_test
    assert not any(line.startswith(("- Full recipe", "- test points")) for line in no_test)
    assert student_lines(Distilled(Run(hf="h")), "f1_macro") == [
        "## Distilled student",
        "",
        "- test f1_macro: – (no test split)",
        "- export: `h`",
        "",
    ]


def test_the_report_states_the_recipes_minutes_per_point_from_this_invocations_stages(tmp_path):
    runner = Runner(tmp_path / "p")
    try:
        runner.called += list(STAGES)
        runner.state.update({s: {"seconds": v} for s, v in STAGES.items()})
        candidates = [_teacher(0.76, 0.78)]
        choice = Choice(BASELINE, candidates[0].runs[0], "f1_macro", {BASELINE: 0.8}, BASELINE)
        text = write_report(runner, candidates, PROBED, choice, _student(0.75), "f1_macro", [0, 1]).read_text()
    finally:
        runner.close()
    section = text.split("## Distilled student")[1].split("## ")[0]
    assert "(baseline: 0.7700, mean of its 2 runs): -2.00" in section
    assert "+5.00 test points of the student over the probe: 1.40 minutes per point." in section
    assert "+7.00 test points of the chosen model over the probe: 0.29 minutes per point." in section
