"""The pipeline's typed records: a run, a gate decision and a stop convert to and from the dicts of ``state.json``
and of strategies written before them; a soup or the probe is a run's kind, never its seed; ``check`` changes
nothing of the context it checks."""

from __future__ import annotations

import json

import pytest

from domainbert.errors import DomainBertError
from domainbert.pipeline.command import _context, check
from domainbert.pipeline.recipe import distill_teachers, finetune_candidates
from domainbert.pipeline.runner import read_state
from domainbert.pipeline.specs import DistillSpec, FinetuneSpec, TaskFiles
from domainbert.pipeline.strategies.base import Candidate, Gate, Run, Stop, finetune_stage
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


def test_a_run_made_from_a_stage_record_round_trips_through_its_dict():
    run = Run.of(RECORD, "finetune-dapt-seed1", 1)
    assert (run.stage, run.seed, run.kind, run.hf) == ("finetune-dapt-seed1", 1, "seed", RECORD["hf"])
    assert run.metric("val/f1_macro") == 0.8 and run.metric("val/acc") is None
    assert run.extra == {k: RECORD[k] for k in ("status", "seconds", "inputs", "finished", "fingerprint")}
    as_dict = run.to_dict()
    assert as_dict == {**RECORD, "seed": 1, "stage": "finetune-dapt-seed1", "kind": "seed"}
    assert Run.from_dict(as_dict) == run
    assert Run.from_dict(json.loads(json.dumps(as_dict))) == run  # through a JSON file too
    soup = Run.of(RECORD, "finetune-dapt-soup", kind="soup")
    assert Run.from_dict(soup.to_dict()) == soup and soup.to_dict()["seed"] is None


@pytest.mark.parametrize("kind", ["soup", "probe"])
def test_an_old_record_whose_seed_named_a_soup_or_the_probe_reads_as_that_kind(kind):
    run = Run.from_dict({**RECORD, "seed": kind, "stage": "s"})
    assert (run.kind, run.seed) == (kind, None)
    assert run.to_dict()["kind"] == kind and run.to_dict()["seed"] is None


def test_a_runs_values_are_items_too_for_strategies_that_read_dict_records():
    run = Run.of(RECORD, "finetune-dapt-seed1", 1)
    assert (run["seed"], run["stage"], run["hf"], run["status"]) == (1, "finetune-dapt-seed1", RECORD["hf"], "done")
    with pytest.raises(KeyError):
        run["nothing"]


@pytest.mark.parametrize(
    "record,message",
    [
        ({"seed": "three"}, r"^pipeline: run record: seed='three'; expected an integer seed"),
        ({"seed": True}, r"seed=True; expected an integer seed"),
        ({"kind": "ensemble"}, r"kind='ensemble'; expected one of \['seed', 'soup', 'probe'\]"),
        ({"metrics": [0.8]}, r"metrics=\[0.8\]; expected a dict of metric values"),
    ],
)
def test_a_record_the_pipeline_cannot_read_is_refused_naming_its_field(record, message):
    with pytest.raises(DomainBertError, match=message):
        Run.from_dict(record)


def test_a_gate_and_a_stop_round_trip_and_refuse_fields_they_do_not_have():
    gate = Gate(open=False, stage="dapt", best=0.77, base=0.78, base_from="step 0 of dapt", margin=0.0, steps=[0, 4])
    assert gate.to_dict() == {
        "open": False,
        "stage": "dapt",
        "best": 0.77,
        "base": 0.78,
        "base_from": "step 0 of dapt",
        "margin": 0.0,
        "steps": [0, 4],
    }
    assert Gate.from_dict(gate.to_dict()) == gate
    stop = Stop(seed=0, score=0.5, mean=0.85, std=0.07, skipped=[1, 2], minutes_saved=1.5)
    assert Stop.from_dict(json.loads(json.dumps(stop.to_dict()))) == stop
    with pytest.raises(DomainBertError, match=r"^pipeline: gate record: opened=False; expected only the fields"):
        Gate.from_dict({"opened": False})
    with pytest.raises(DomainBertError, match=r"^pipeline: stop record \{'seed': 0\}: .*expected the fields"):
        Stop.from_dict({"seed": 0})


def test_a_candidate_given_dict_records_holds_them_as_records():
    """A strategy written for dict records (a plugin's ``runs=[{**record, "seed": ...}]``) still works."""
    made = Candidate(
        "x soup",
        "plugin",
        runs=[{**RECORD, "seed": "soup", "stage": "finetune-x-soup"}],
        gate={"open": False, "best": 0.7, "base": 0.8},
        stopped={"seed": 0, "score": 0.5, "mean": 0.8, "std": 0.1, "skipped": [1], "minutes_saved": 0.2},
    )
    assert made.runs == [Run.of(RECORD, "finetune-x-soup", kind="soup")]
    assert made.gate == Gate(open=False, best=0.7, base=0.8) and made.gated
    assert made.stopped == Stop(0, 0.5, 0.8, 0.1, [1], 0.2)
    assert not Candidate("y", "y", gate=Gate(why="the gate is off")).gated


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

    def fit(self, stage: str, config, args: list[str] | None = None, test: bool = False, after=()) -> dict:
        self.called.append(stage)
        return self.state[stage]

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
    assert [r.to_dict()["status"] for r in dapt.runs] == ["done"]
    assert ctx.runner.called == ["finetune-baseline-seed0", "finetune-baseline-seed1", "finetune-dapt-seed0"]
    assert (tmp_path / "state.json").read_text() == written  # its format is the stage records', as it was


def test_the_context_holds_the_metrics_short_name_and_the_seeds_and_check_changes_nothing(tmp_path):
    task = TaskFiles(str(tmp_path / "t.jsonl"), str(tmp_path / "v.jsonl"))
    for path in (task.train, task.val):
        (tmp_path / path).write_text('{"text": "a", "label": "x"}\n')
    inputs = dict(base_model="base", corpus=None, corpus_text_column="text", seeds=None, metric="val/acc")
    ctx = _context(inputs, task, FinetuneSpec(), {"dapt": {"enabled": False}})
    assert (ctx.metric, ctx.seeds) == ("acc", [0])
    before = (ctx.metric, list(ctx.seeds), ctx.seeds)
    assert check(ctx, DistillSpec(enabled=False)) is None
    assert (ctx.metric, list(ctx.seeds), ctx.seeds) == before and ctx.seeds is before[2]
    ctx = _context({**inputs, "seeds": (3, 1)}, task, FinetuneSpec(), {"dapt": {"enabled": False}})
    assert ctx.seeds == [3, 1]
    with pytest.raises(DomainBertError, match=r"^pipeline: metric='bleu'; expected one of"):
        check(_context({**inputs, "metric": "test/bleu"}, task, FinetuneSpec(), {}), DistillSpec(enabled=False))
