"""A pipeline stage records its parts: start-up, data, training, evaluation and export, summing to its seconds, in
the pipeline's process and in a process of its own."""

import json
from pathlib import Path

import pytest

from domainbert.pipeline import forks
from domainbert.pipeline.runner import Runner, read_state
from domainbert.pipeline.specs import TaskFiles
from domainbert.pipeline.stage import StageConfig, merge, model
from domainbert.pipeline.timing import PARTS, part_lines

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"


def _fit(runner: Runner, stage: str, tiny_bert) -> dict:
    """A one-epoch fine-tuning of the tiny model on the fixture task, tested; its record in ``state.json``."""
    task = TaskFiles(str(FIX / "cls_train.jsonl"), str(FIX / "cls_val.jsonl"), str(FIX / "cls_test.jsonl"))
    config = str(ROOT / "configs/finetune/tiny_classification.yaml")
    values = merge(model(init_from=str(tiny_bert)), task.values())
    runner.fit(stage, StageConfig(config, values), ["--trainer.max_epochs=1"], test=True)
    return runner.state[stage]


def _check(record: dict, out: Path, stage: str) -> dict:
    """The record's parts: every part, none negative, summing to its seconds; the same in state.json."""
    parts = record["parts"]
    assert list(parts) == list(PARTS) and all(value >= 0 for value in parts.values()), parts
    assert sum(parts.values()) == pytest.approx(record["seconds"], abs=1e-6)
    assert read_state(out / "state.json")[stage]["parts"] == parts
    return parts


@pytest.mark.parametrize(("isolate", "fork"), [("none", "1"), ("all", "1"), ("all", "0")])
def test_a_fine_tuning_stage_records_each_part_summing_to_its_seconds(isolate, fork, tiny_bert, tmp_path, monkeypatch):
    monkeypatch.setenv("DOMAINBERT_FORK", fork)
    forked, real = [], forks.run
    monkeypatch.setattr(forks, "run", lambda argv, log: forked.append(argv) or real(argv, log))
    runner = Runner(tmp_path / "p", isolate=isolate)
    parts = _check(_fit(runner, "ft", tiny_bert), tmp_path / "p", "ft")
    # data, training and evaluation can each round to 0.0 s on the tiny task: their marks are checked below
    assert parts["startup"] > 0, parts
    if fork == "0":  # a new interpreter: its start and imports, and its exit
        assert parts["startup"] >= 1.0 and parts["other"] > 0, parts
    assert len(forked) == (isolate == "all" and fork == "1")  # a process forked from the pipeline's server
    if isolate == "all":
        runner.tool("list", ["datamodules"], result="listed")  # a tool stage as a process too (never forked)
        tool = _check(runner.state["list"], tmp_path / "p", "list")
        assert tool["startup"] > 0 and tool["train"] == tool["eval"] == tool["export"] == 0.0, tool
    marks = json.loads((tmp_path / "p" / "ft" / "marks.json").read_text())
    assert marks["ready"] <= marks["train"][0][0] < marks["train"][0][1] <= marks["end"]
    # the sanity check, the epoch's validation and the test pass (the best weights are not validated again)
    assert len(marks["eval"]) == 3 and all(start < end for start, end in marks["eval"]), marks["eval"]
    exports = marks["export"]  # after training (the best weights, the Hugging Face folder), then the model card
    assert len(exports) == 2 and marks["train"][0][1] <= exports[0][0] < exports[0][1] <= exports[1][0]
    table = part_lines(runner.state, runner.called)
    assert any(line.startswith("| ft | ") for line in table) and table[-2].startswith("| **total** |")
