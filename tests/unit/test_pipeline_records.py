"""The pipeline's typed records: a stage's record in ``state.json`` reads into a run through the runner's one reader;
a run, a gate decision and a stop have one form each (dicts are refused); a soup or the probe is a run's kind, never
its seed; ``check`` changes nothing of the plan it checks, and the context always has its runner."""

from __future__ import annotations

import dataclasses
import json

import pytest

from domainbert.errors import DomainBertError
from domainbert.pipeline.command import _plan, check
from domainbert.pipeline.recipe import distill_teachers, finetune_candidates
from domainbert.pipeline.runner import ToolResult, read_state, stage_run
from domainbert.pipeline.specs import DistillSpec, FinetuneSpec, TaskFiles
from domainbert.pipeline.strategies.base import Candidate, Context, Gate, Run, Stop, finetune_stage
from tests.helpers.pipeline_tiny import bare_context

#: A fine-tuning stage's record as ``state.json`` keeps it (what the runner returns for a done stage).
RECORD = {
    "status": "done",
    "seconds": 12.5,
    "inputs": ["stages/finetune.yaml", "--seed_everything", "1"],
    "finished": 1700000000.0,
    "fingerprint": "0123456789abcdef",
    "run": "p/finetune-dapt-seed1/run/version_0",
    "hf": "p/finetune-dapt-seed1/hf",
    "metrics": {"val/f1_macro": 0.8, "test/f1_macro": 0.7},
    "predictions": "p/finetune-dapt-seed1/test_predictions.json",
}


def test_a_stage_record_reads_into_a_run_through_the_runners_one_reader():
    run = stage_run("finetune-dapt-seed1", RECORD)
    assert (run.stage, run.seed, run.kind, run.hf, run.seconds) == (
        "finetune-dapt-seed1",
        None,
        "seed",
        RECORD["hf"],
        12.5,
    )
    assert run.metric("val/f1_macro") == 0.8 and run.metric("val/acc") is None
    seeded = dataclasses.replace(run, seed=1)  # a candidate's run names its seed
    assert (seeded.seed, seeded.predictions, seeded.run) == (1, RECORD["predictions"], RECORD["run"])
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.hf = "elsewhere"  # type: ignore[misc]


def test_a_run_is_read_by_its_fields_not_as_a_dict():
    run = stage_run("finetune-dapt-seed1", RECORD)
    with pytest.raises(TypeError):
        run["hf"]  # no dict access: one form of a run
    assert not hasattr(Run, "from_dict") and not hasattr(Run, "to_dict")


def test_a_stage_record_whose_metrics_are_not_numbers_is_refused_naming_the_file_and_stage():
    with pytest.raises(
        DomainBertError, match=r"^p/state.json: stage 'ft': metrics=\[0.8\]; expected an object of numbers"
    ):
        stage_run("ft", {**RECORD, "metrics": [0.8]}, "p/state.json")
    with pytest.raises(DomainBertError, match=r"stage 'ft': metrics=\{'val/acc': 'high'\}"):
        stage_run("ft", {**RECORD, "metrics": {"val/acc": "high"}}, "p/state.json")


@pytest.mark.parametrize(
    "fields,message",
    [
        ({"seed": "three"}, r"^pipeline: run record: seed='three'; expected an integer seed"),
        ({"seed": "soup"}, r"seed='soup'; expected an integer seed"),  # a soup is a kind, never a seed
        ({"seed": True}, r"seed=True; expected an integer seed"),
        ({"kind": "ensemble"}, r"kind='ensemble'; expected one of \['seed', 'soup', 'probe'\]"),
        ({"metrics": [0.8]}, r"metrics=\[0.8\]; expected a dict of metric values"),
    ],
)
def test_a_run_the_pipeline_cannot_read_is_refused_naming_its_field(fields, message):
    with pytest.raises(DomainBertError, match=message):
        Run(**fields)


@pytest.mark.parametrize(
    "fields,message",
    [
        ({"runs": [{**RECORD, "seed": 0}]}, r"^pipeline: candidate 'x' record: runs=\{.*\}; expected a list of Run"),
        ({"gate": {"open": False}}, r"^pipeline: candidate 'x' record: gate=\{'open': False\}; expected a Gate"),
        ({"stopped": {"seed": 0}}, r"stopped=\{'seed': 0\}; expected a Stop"),
        ({"teacher": "big/hf"}, r"teacher='big/hf'; expected a Run"),
    ],
)
def test_a_candidate_given_dict_records_is_refused_naming_the_field(fields, message):
    """One form of each record: a strategy returns typed runs, gates and stops, never their dicts."""
    with pytest.raises(DomainBertError, match=message):
        Candidate("x", "plugin", **fields)
    assert not Candidate("y", "y", gate=Gate(why="the gate is off")).gated
    assert Candidate("z", "z", gate=Gate(open=False, best=0.7, base=0.8)).gated


def test_a_tool_result_keeps_the_tools_output_and_names_what_it_lacks():
    made = ToolResult.of(
        "select",
        {
            "status": "done",
            "seconds": 3.0,
            "inputs": ["select"],
            "result": "p/select",
            "corpus": "p/select/corpus.jsonl",
            "documents": 12,
        },
    )
    assert (made.stage, made.result, made.seconds) == ("select", "p/select", 3.0)
    assert made.output == {"corpus": "p/select/corpus.jsonl", "documents": 12}
    assert made.value("corpus") == "p/select/corpus.jsonl"
    with pytest.raises(DomainBertError, match=r"^stage 'select': its result \(p/select\) records no 'train'"):
        made.value("train")


def test_a_soups_stage_is_named_by_its_kind_and_a_seeds_by_its_seed():
    assert finetune_stage("vocab+dapt", 2) == "finetune-vocab-dapt-seed2"
    assert finetune_stage("vocab+dapt", None, kind="soup") == "finetune-vocab-dapt-soup"


def test_an_ensemble_teaches_with_the_seed_runs_never_the_soup():
    runs = [Run("a0", 0, hf="a0/hf"), Run("a1", 1, hf="a1/hf"), Run("s", kind="soup", hf="s/hf")]
    ensemble = DistillSpec(teacher="ensemble")
    assert distill_teachers({"a": runs}, "a soup", runs[2], ensemble) == ["a0/hf", "a1/hf"]
    assert distill_teachers({"a": runs}, "a", runs[1], DistillSpec()) == ["a1/hf"]


class _DoneRunner:
    """A runner whose every stage is done already: it returns the records of an older pipeline's ``state.json``."""

    def __init__(self, state: dict) -> None:
        self.state, self.called = state, []

    def fit(self, stage: str, config, args: list[str] | None = None, test: bool = False, after=()) -> Run:
        self.called.append(stage)
        return stage_run(stage, self.state[stage])

    def seconds(self, stage: str) -> float:
        return float(self.state[stage]["seconds"])


def test_an_older_pipelines_state_resumes_into_typed_runs_and_a_typed_stop(tmp_path, monkeypatch):
    """A ``state.json`` as an older domainbert wrote it (plain stage records, no kind) reads back unchanged."""
    monkeypatch.setattr("domainbert.pipeline.recipe.pooling", lambda ctx: "mean")
    state = {
        "finetune-baseline-seed0": {**RECORD, "metrics": {"val/acc": 0.80}},
        "finetune-baseline-seed1": {**RECORD, "metrics": {"val/acc": 0.90}},
        "finetune-dapt-seed0": {**RECORD, "metrics": {"val/acc": 0.50}, "seconds": 60.0},
    }
    (tmp_path / "state.json").write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
    written = (tmp_path / "state.json").read_text()
    ctx = bare_context(_DoneRunner(read_state(tmp_path / "state.json")), seeds=(0, 1), metric="acc")
    ctx.add("dapt", [Candidate("dapt", "dapt", model="d/hf")])
    finetune_candidates(ctx)
    baseline, dapt = ctx.candidates
    assert [(r.stage, r.seed, r.kind, r.metric("val/acc")) for r in baseline.runs] == [
        ("finetune-baseline-seed0", 0, "seed", 0.80),
        ("finetune-baseline-seed1", 1, "seed", 0.90),
    ]
    assert dapt.stopped == Stop(
        seed=0, score=0.5, mean=pytest.approx(0.85), std=pytest.approx(0.0707, abs=1e-4), skipped=[1], minutes_saved=1.0
    )
    assert [(r.stage, r.seconds) for r in dapt.runs] == [("finetune-dapt-seed0", 60.0)]
    assert ctx.runner.called == ["finetune-baseline-seed0", "finetune-baseline-seed1", "finetune-dapt-seed0"]
    assert (tmp_path / "state.json").read_text() == written  # its format is the stage records', as it was


def test_the_plan_holds_the_metrics_short_name_and_the_seeds_and_check_changes_nothing(tmp_path):
    task = TaskFiles(str(tmp_path / "t.jsonl"), str(tmp_path / "v.jsonl"))
    for path in (task.train, task.val):
        (tmp_path / path).write_text('{"text": "a", "label": "x"}\n')
    inputs = dict(base_model="base", corpus=None, corpus_text_column="text", seeds=None, metric="val/acc")
    ctx = _plan(inputs, task, FinetuneSpec(), {"dapt": {"enabled": False}})
    assert (ctx.metric, ctx.seeds) == ("acc", [0]) and not hasattr(ctx, "runner")  # no runner before the checks
    before = (ctx.metric, list(ctx.seeds), ctx.seeds)
    assert check(ctx, DistillSpec(enabled=False)) is None
    assert (ctx.metric, list(ctx.seeds), ctx.seeds) == before and ctx.seeds is before[2]
    ctx = _plan({**inputs, "seeds": (3, 1)}, task, FinetuneSpec(), {"dapt": {"enabled": False}})
    assert ctx.seeds == [3, 1]
    with pytest.raises(DomainBertError, match=r"^pipeline: metric='bleu'; expected one of"):
        check(_plan({**inputs, "metric": "test/bleu"}, task, FinetuneSpec(), {}), DistillSpec(enabled=False))


def test_the_context_is_the_checked_plan_with_its_runner(tmp_path):
    task = TaskFiles("t.jsonl", "v.jsonl")
    inputs = dict(base_model="base", corpus=None, corpus_text_column="text", seeds=[0], metric="acc")
    plan = _plan(inputs, task, FinetuneSpec(), {})
    runner = _DoneRunner({})
    ctx = Context.start(plan, runner)
    assert ctx.runner is runner and (ctx.task, ctx.metric, ctx.strategies) == (plan.task, "acc", plan.strategies)
    assert (ctx.pooling, ctx.base_probe, ctx.candidates) == (None, None, [])  # typed, per run; no untyped cache
    assert not hasattr(ctx, "cache")
