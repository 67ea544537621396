"""The probe gate and the seed-level stop as pure decisions on hand-computed numbers, the watch's schedule, and what
the choice and the report make of a gated or stopped candidate."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from jsonargparse import Namespace

from domainbert.cli.lightning_cli import ResolvedConfig
from domainbert.pipeline import TaskFiles, strategies
from domainbert.pipeline.recipe import behind_baseline, choose
from domainbert.pipeline.report import choice_why, write_report
from domainbert.pipeline.runner import Runner
from domainbert.pipeline.specs import DaptSpec, WatchSpec
from domainbert.pipeline.stage import StageConfig
from domainbert.pipeline.strategies.base import BASELINE, Candidate, Context, Gate, Run, Stop
from domainbert.pipeline.strategies.pretrain import every_n_steps, gate, gate_open, max_steps, watch_callback
from tests.helpers.pipeline_tiny import bare_context

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "best,base,margin,open_",
    [
        (0.81, 0.80, 0.0, True),  # +0.01 > 0
        (0.80, 0.80, 0.0, False),  # a tie does not open it
        (0.79, 0.80, 0.0, False),
        (0.81, 0.80, 0.02, False),  # +0.01 is not more than the margin 0.02
        (0.70, 0.80, -1.0, True),  # a margin of -1 opens it always (scores lie in [0, 1])
    ],
)
def test_the_gate_opens_only_when_the_best_probe_beats_the_bases_by_more_than_the_margin(best, base, margin, open_):
    assert gate_open(best, base, margin) is open_


def test_a_branch_behind_the_baselines_mean_by_more_than_its_std_stops():
    baseline = [0.80, 0.84, 0.82]  # mean 0.82, sample std 0.02
    assert behind_baseline(0.79, baseline)  # 0.82 - 0.79 = 0.03 > 0.02
    assert not behind_baseline(0.805, baseline)  # 0.015 <= 0.02
    assert not behind_baseline(0.80, baseline)  # exactly one std behind: not more
    assert behind_baseline(0.79, [0.80, 0.80])  # no spread: any shortfall
    assert not behind_baseline(0.10, [0.80])  # one seed: no spread to judge by


def test_the_watch_checks_sixteen_times_per_step_budget_and_reads_the_resolved_max_steps():
    assert [every_n_steps(n) for n in (400, 220, 16, 10, None, -1)] == [25, 13, 1, 1, 100, 100]
    assert max_steps(_resolved(trainer=Namespace(max_steps=400))) == 400
    assert max_steps(_resolved(trainer=Namespace(max_steps=-1, max_epochs=2))) is None  # an epoch budget
    assert max_steps(_resolved(model=Namespace())) is None


def _resolved(**values) -> ResolvedConfig:
    return ResolvedConfig(Namespace(**values), "stage 'dapt'")


def _context(tmp_path, **settings) -> Context:
    task = TaskFiles("t.jsonl", "v.jsonl", None, "body", None, "section")
    return bare_context(Runner(tmp_path / "p"), task, seeds=(0, 1), metric="acc", **settings)


def test_the_watch_is_a_callback_with_the_tasks_files_columns_and_metric(tmp_path):
    """The schedule comes from the stage's resolved max_steps: the config's 400, then the user's override (64)."""
    ctx = _context(tmp_path)
    config = StageConfig(str(ROOT / "domainbert/pipeline/stages/dapt.yaml"))
    entry = watch_callback(ctx, WatchSpec(), max_steps(ctx.runner.resolve("dapt", config)))
    (callback,) = entry["trainer"]["callbacks+"]
    assert callback["class_path"] == "domainbert.adapt.watch.ProbeWatch"
    init = callback["init_args"]
    assert (init["train"], init["val"], init["text_column"], init["label_column"]) == (
        "t.jsonl",
        "v.jsonl",
        "body",
        "section",
    )
    assert (init["every_n_steps"], init["patience"], init["metric"]) == (400 // 16, 3, "acc")
    resolved = ctx.runner.resolve("dapt", config.then(["--trainer.max_steps=64"]))
    shorter = watch_callback(ctx, WatchSpec(), max_steps(resolved))
    assert shorter["trainer"]["callbacks+"][0]["init_args"]["every_n_steps"] == 4


def _watched(scores: list[float]) -> dict:
    history = [{"step": i, "score": s} for i, s in enumerate(scores)]
    best = max(range(len(scores)), key=lambda i: (scores[i], -i))
    return {"history": history, "best_score": scores[best], "best_step": best, "summary": "s"}


def test_the_base_score_is_step_0_from_the_base_and_a_base_started_stages_step_0_otherwise(tmp_path):
    ctx = _context(tmp_path)
    base = ctx.baseline
    shut = gate(ctx, "dapt", _watched([0.80, 0.79, 0.78, 0.80]), base, WatchSpec())
    assert not shut.open and (shut.best, shut.base, shut.base_from) == (0.80, 0.80, "step 0 of dapt")
    dapt = Candidate("dapt", "dapt", model="d")
    tapt = gate(ctx, "tapt", _watched([0.70, 0.82]), dapt, WatchSpec())  # step 0 is DAPT's model, not the base
    assert tapt.open and (tapt.best, tapt.base, tapt.base_from) == (0.82, 0.80, "step 0 of dapt")
    assert not gate(ctx, "tapt", _watched([0.70, 0.82]), dapt, WatchSpec(margin=0.05)).open
    assert gate(ctx, "dapt", _watched([0.80, 0.70]), base, WatchSpec(gate=False)).open


def test_with_no_base_started_stage_the_base_score_is_the_probe_stages_else_the_gate_stays_open(tmp_path):
    ctx = _context(tmp_path)
    vocab = Candidate("vocab", "vocab", model="v", offered=False)
    unknown = gate(ctx, "dapt", _watched([0.70, 0.72]), vocab, WatchSpec())
    assert unknown.open and "no score of the base model" in unknown.why
    ctx.runner.state["probe"] = {"status": "done", "val": {"acc": 0.75}}
    ctx.runner.called.append("probe")
    known = gate(ctx, "dapt", _watched([0.70, 0.72]), vocab, WatchSpec())
    assert not known.open and (known.base, known.base_from) == (0.75, "the probe stage")


def test_a_watch_given_as_a_dict_becomes_its_settings():
    settings = strategies.settings_of(strategies.load(), {"dapt": {"args": [], "watch": {"margin": -1.0}}})
    assert settings["dapt"] == DaptSpec(watch=WatchSpec(margin=-1.0))


def _run(val: float, test: float, seed, stage: str) -> Run:
    return Run(stage, seed, hf="x", metrics={"val/acc": val, "test/acc": test})


def test_the_choice_never_ships_a_stopped_branch_nor_says_a_gated_one_was_off():
    results = {BASELINE: [_run(0.80, 0.8, 0, "b0"), _run(0.82, 0.8, 1, "b1")], "dapt": [_run(0.90, 0.9, 0, "d0")]}
    assert choose(results, "acc").name == "dapt"
    assert choose(results, "acc", exclude=("dapt",)).name == BASELINE
    choice = choose({BASELINE: results[BASELINE]}, "acc", gated=("tapt",))
    assert choice.name == BASELINE and choice.gated == ("tapt",)
    assert "the probe gate kept tapt from fine-tuning" in choice_why(choice)


def test_the_report_says_a_gated_branch_was_not_fine_tuned_with_both_probes_and_the_minutes_saved(tmp_path):
    runner = Runner(tmp_path / "p")
    for stage, seconds in (("b0", 120.0), ("b1", 60.0), ("dapt", 30.0), ("t0", 6.0)):
        runner.state[stage] = {"status": "done", "seconds": seconds}
        runner.called.append(stage)
    baseline = Candidate(BASELINE, BASELINE, runs=[_run(0.8, 0.7, 0, "b0"), _run(0.9, 0.8, 1, "b1")], adapted=False)
    shut = Gate(open=False, best=0.7712, base=0.7800, base_from="step 0 of dapt", margin=0.0)
    dapt = Candidate("dapt", "dapt", model="d", stages=["dapt"], gate=replace(shut, summary="did not improve"))
    stopped = Stop(seed=0, score=0.5, mean=0.85, std=0.07, skipped=[1], minutes_saved=0.1)
    tapt = Candidate("tapt", "tapt", model="t", runs=[_run(0.5, 0.4, 0, "t0")], stopped=stopped)
    choice = choose({BASELINE: baseline.runs}, "acc")
    text = write_report(runner, [baseline, dapt, tapt], None, choice, None, "acc", [0, 1]).read_text()
    assert "| dapt | – | – | – | not fine-tuned: probe 0.7712 against the base's 0.7800 | 0.5 |" in text
    assert "- **dapt**: not fine-tuned: probe 0.7712 against the base's 0.7800 (step 0 of dapt; margin 0.0)" in text
    assert "which saved about 3.0 minutes (the baseline's fine-tuning, summed over its seeds)" in text  # 2 + 1
    assert "| tapt | 0.5000 | 0.4000 |" in text and "(stopped after seed 0) | 0.1 |" in text  # its own 6 s
    assert "- **tapt**: stopped after seed 0: validation acc 0.5000, behind the baseline's mean 0.8500" in text
    assert "seeds 1 skipped, saving about 0.1 minutes" in text
