"""A stage's parts from its timestamps: the interval arithmetic, the rounding, the report's table, the worker's clock
and a tool stage's marks."""

import json

import pytest

from domainbert.pipeline import timing
from domainbert.pipeline.runner import Runner, read_state
from domainbert.pipeline.timing import PARTS, part_lines, record_parts, rounded, stage_parts

#: A fine-tuning stage launched at 100 s and done at 203 s: start-up to 110, a sanity validation, training from the
#: first batch at 125 to 190 with a validation inside, the export to 192, a validation and a test pass, the record
#: written at 201, the process gone at 203.
FIT_MARKS = {
    "ready": 110.0,
    "work": "data",
    "train": [[125.0, 190.0]],
    "eval": [[120.0, 122.0], [150.0, 155.0], [193.0, 195.0], [197.0, 200.0]],
    "export": [[190.0, 192.0]],
    "end": 201.0,
}


def test_a_fit_stage_splits_into_its_parts_with_evaluation_taken_out_of_training():
    parts = stage_parts(FIT_MARKS, 100.0, 203.0)
    # data: 110-120, 122-125 (before the first batch), 192-193, 195-197, 200-201 (the passes' set-up, the record)
    assert parts == {"startup": 10.0, "data": 17.0, "train": 60.0, "eval": 12.0, "export": 2.0, "other": 2.0}
    assert sum(parts.values()) == 103.0


def test_overlapping_intervals_count_once_evaluation_first_then_export_then_training():
    marks = {"ready": 1.0, "end": 10.0, "train": [[2.0, 8.0]], "export": [[7.0, 9.0]], "eval": [[6.0, 7.5]]}
    parts = stage_parts(marks, 0.0, 10.0)
    assert parts == {"startup": 1.0, "data": 2.0, "train": 4.0, "eval": 1.5, "export": 1.5, "other": 0.0}


def test_marks_outside_the_stage_are_cut_to_it_and_missing_marks_mean_no_start_up_and_work_to_the_end():
    marks = {"ready": 95.0, "work": "export", "eval": [[90.0, 101.0], [108.0, 130.0]]}
    assert stage_parts(marks, 100.0, 110.0) == {
        "startup": 0.0,
        "data": 0.0,
        "train": 0.0,
        "eval": 3.0,
        "export": 7.0,
        "other": 0.0,
    }
    assert stage_parts({"work": "nonsense"}, 0.0, 4.0)["other"] == 4.0  # an unknown part is "other"


def test_a_tool_stage_is_start_up_then_its_work():
    marks = {"ready": 1.25, "end": 5.5, "work": timing.TOOL_PARTS["probe"]}
    assert stage_parts(marks, 0.0, 6.0) == {
        "startup": 1.25,
        "data": 4.25,
        "train": 0.0,
        "eval": 0.0,
        "export": 0.0,
        "other": 0.5,
    }


def test_rounding_keeps_the_sum_and_gives_left_over_tenths_to_the_largest_remainders():
    # 12.5 + 42.5 + 5 tenths: rounding each down loses one tenth, which goes to the first of the two .5 remainders
    parts = {"startup": 1.25, "data": 4.25, "train": 0.0, "eval": 0.0, "export": 0.0, "other": 0.5}
    assert rounded(parts) == {"startup": 1.3, "data": 4.2, "train": 0.0, "eval": 0.0, "export": 0.0, "other": 0.5}
    three = rounded({"startup": 0.04, "data": 0.04, "train": 0.04})
    assert three == {"startup": 0.1, "data": 0.0, "train": 0.0} and sum(three.values()) == pytest.approx(0.1)
    assert record_parts({}, 0.0, 1.0) is None and record_parts(None, 0.0, 1.0) is None
    assert record_parts(FIT_MARKS, 100.0, 203.04)["other"] == 2.0


def test_part_lines_render_each_stage_in_minutes_its_parts_and_the_totals():
    state = {
        "finetune": {
            "seconds": 360.0,
            "finished": 2.0,
            "hf": "/o/ft/hf",
            "parts": {"startup": 12.0, "data": 30.0, "train": 240.0, "eval": 60.0, "export": 12.0, "other": 6.0},
        },
        "probe": {
            "seconds": 138.0,
            "finished": 1.0,
            "result": "/o/probe",
            "parts": {"startup": 0.0, "data": 132.0, "train": 0.0, "eval": 0.0, "export": 0.0, "other": 6.0},
        },
        "old": {"seconds": 60.0, "finished": 0.5, "result": "x"},  # recorded by a domainbert without parts
    }
    lines = part_lines(state, ["probe", "finetune", "probe", "missing"])
    table = lines[lines.index(next(line for line in lines if line.startswith("| stage |"))) :]
    assert table == [
        "| stage | minutes | start-up | data | training | evaluation | export | other | output |",
        "|---|---|---|---|---|---|---|---|---|",
        "| probe | 2.3 | 0.0 | 2.2 | 0.0 | 0.0 | 0.0 | 0.1 | `/o/probe` |",
        "| finetune | 6.0 | 0.2 | 0.5 | 4.0 | 1.0 | 0.2 | 0.1 | `/o/ft/hf` |",
        "| **total** | **8.3** | **0.2** | **2.7** | **4.0** | **1.0** | **0.2** | **0.2** | |",
        "",
    ]
    assert lines[0] == "## Stages and their cost"
    every = part_lines(state)  # no order given: every stage, by when it finished
    rows = [line.split(" | ")[0] for line in every if line.startswith("| ")][1:]
    assert rows == ["| old", "| probe", "| finetune", "| **total**"]
    assert "| old | 1.0 | – | – | – | – | – | – | `x` |" in every


class FakeClock:
    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def time(self) -> float:
        return self.now


def test_the_worker_clock_times_training_from_the_first_batch_every_pass_and_the_export(monkeypatch, tmp_path):
    from domainbert.pipeline import worker

    clock = FakeClock(10.0)
    monkeypatch.setattr(worker.time, "time", clock.time)
    stage = worker.StageClock()
    for now, hook in [
        (12.0, "on_validation_start"),  # the sanity check
        (13.0, "on_validation_end"),
        (14.0, "on_train_start"),
        (15.0, "on_train_batch_start"),
        (20.0, "on_train_batch_start"),
        (21.0, "on_validation_start"),
        (23.0, "on_validation_end"),
        (30.0, "on_train_end"),
    ]:
        clock.now = now
        args = (None, None, None, 0) if hook == "on_train_batch_start" else (None, None)
        getattr(stage, hook)(*args)
    clock.now = 33.0
    stage.fit_returned()
    clock.now = 34.0
    stage.on_test_start(None, None)
    clock.now = 36.0
    stage.on_test_end(None, None)
    clock.now = 37.0
    stage.write(tmp_path / "marks.json")
    marks = json.loads((tmp_path / "marks.json").read_text())
    assert marks == {
        "ready": 10.0,
        "work": "data",
        "train": [[15.0, 30.0]],
        "eval": [[12.0, 13.0], [21.0, 23.0], [34.0, 36.0]],
        "export": [[30.0, 33.0]],
        "end": 37.0,
    }
    assert stage_parts(marks, 5.0, 38.0) == {
        "startup": 5.0,
        "data": 6.0,  # 10-12, 13-15: before the first batch, the sanity check apart; 33-34, 36-37
        "train": 13.0,
        "eval": 5.0,
        "export": 3.0,
        "other": 1.0,
    }


def test_a_tool_stage_in_the_pipelines_process_records_start_up_and_work_summing_to_its_seconds(monkeypatch, tmp_path):
    monkeypatch.setitem(timing.TOOL_PARTS, "datamodules", "train")
    runner = Runner(tmp_path / "p", isolate="none")
    runner.tool("tool", ["datamodules"], result="listed")
    record = runner.state["tool"]
    parts = record["parts"]
    assert list(parts) == list(PARTS) and all(v >= 0 for v in parts.values())
    assert sum(parts.values()) == pytest.approx(record["seconds"], abs=1e-6)
    assert parts["data"] == parts["eval"] == parts["export"] == 0.0  # a tool's work is one part: "train" here
    state = read_state(tmp_path / "p" / "state.json")
    assert state["tool"]["parts"] == parts
    marks = json.loads((tmp_path / "p" / "tool" / "marks.json").read_text())
    assert marks["work"] == "train" and marks["ready"] <= marks["end"]
