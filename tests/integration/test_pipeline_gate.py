"""The gate and the seed-level stop in the tiny pipeline: a DAPT whose probe cannot beat the base model's stops within
a quarter of its steps and is not fine-tuned (the report says so, with both probes and the minutes saved); an open
gate fine-tunes it; a branch planted to lose skips its remaining seeds, unless ``all_seeds``."""

from __future__ import annotations

import json

import pytest

from domainbert.pipeline import FinetuneSpec, PretrainSpec, SoupSpec, WatchSpec, strategies
from domainbert.pipeline.runner import read_state
from tests.helpers.pipeline_tiny import OPEN_GATE, planted_strategy, tiny_pipeline

#: 16 DAPT steps: the watch checks every 16 // 16 = 1 step, and stops after 3 checks without improvement
DAPT = ["--trainer.max_steps=16", "--trainer.val_check_interval=8", "--trainer.log_every_n_steps=1"]


def test_a_dapt_that_cannot_beat_the_bases_probe_stops_early_and_is_not_fine_tuned_unless_the_gate_opens(
    tiny_bert, tmp_path, capsys
):
    out = tmp_path / "p"
    dapt = PretrainSpec("configs/pretrain/tiny_debug.yaml", DAPT)
    text = tiny_pipeline(tiny_bert, out, [0], dapt=dapt).read_text()
    state = read_state(out / "state.json")
    watched = json.loads((out / "dapt" / "run" / "version_0" / "probe_watch.json").read_text())
    steps = [h["step"] for h in watched["history"]]
    assert steps == [0, 1, 2, 3] and steps[-1] <= 16 // 4  # stopped within a quarter of its 16 steps
    assert watched["best_step"] == 0 and watched["restored"]  # the export is step 0's weights: the base model's
    best, base = watched["best_score"], watched["history"][0]["score"]
    assert "finetune-dapt-seed0" not in state and state["finetune-baseline-seed0"]["status"] == "done"
    assert f"| dapt | – | – | – | not fine-tuned: probe {best:.4f} against the base's {base:.4f} |" in text
    saved = state["finetune-baseline-seed0"]["seconds"] / 60
    assert f"(step 0 of dapt; margin 0.0), which saved about {saved:.1f} minutes" in text
    assert "the probe gate kept dapt from fine-tuning" in capsys.readouterr().out.strip().splitlines()[-1]

    dapt.watch = WatchSpec(**OPEN_GATE)  # the same DAPT (done: skipped), the gate always open
    text = tiny_pipeline(tiny_bert, out, [0], dapt=dapt).read_text()
    state = read_state(out / "state.json")
    assert "[dapt] done earlier: skipped" in capsys.readouterr().out
    assert state["finetune-dapt-seed0"]["status"] == "done"
    opened = f"- **dapt**: fine-tuned: probe {best:.4f} against the base's {base:.4f} (step 0 of dapt; margin -1.0)"
    assert opened in text
    assert "| dapt | – |" not in text and "not fine-tuned" not in text


@pytest.fixture
def planted(monkeypatch):
    """The installed strategies plus ``planted`` (tests/helpers/pipeline_tiny.py), a branch bound to lose."""
    installed = strategies.load(refresh=True)
    starts = {n: s for n, s in installed.items() if s.kind == "start"}
    afters = {n: s for n, s in installed.items() if s.kind == "after"}
    with_planted = {**starts, "planted": planted_strategy(), **afters}
    monkeypatch.setattr(strategies, "load", lambda refresh=False: with_planted)


#: fine-tuning that learns the fixture task in one epoch: a mean-pooled head started from the probe
LEARNS = ["--trainer.max_epochs=1", "--model.pooling=mean", "--model.head_init=probe"]


def test_a_branch_behind_the_baseline_after_its_first_seed_skips_the_others_unless_all_seeds(
    planted, tiny_bert, tmp_path, capsys
):
    out, config = tmp_path / "p", "configs/finetune/tiny_classification.yaml"
    kwargs = {"planted": {"enabled": True}, "soup": SoupSpec(enabled=False)}
    text = tiny_pipeline(tiny_bert, out, [0, 1], finetune=FinetuneSpec(config, LEARNS), **kwargs).read_text()
    state = read_state(out / "state.json")
    base = [state[f"finetune-baseline-seed{s}"]["metrics"]["val/f1_macro"] for s in (0, 1)]
    first = state["finetune-planted-seed0"]["metrics"]["val/f1_macro"]
    assert min(base) > first, (base, first)  # the premise: the blinded model loses
    assert "finetune-planted-seed1" not in state
    assert "stopped after seed 0" in next(line for line in text.splitlines() if line.startswith("| planted |"))
    assert f"- **planted**: stopped after seed 0: validation f1_macro {first:.4f}, behind the baseline's mean" in text
    assert "seeds 1 skipped, saving about" in text and "**baseline**" in text.split("## The chosen fine-tuned model")[1]
    assert "[planted] stopped after seed 0" in capsys.readouterr().out

    spec = FinetuneSpec(config, LEARNS, all_seeds=True)
    text = tiny_pipeline(tiny_bert, out, [0, 1], finetune=spec, **kwargs).read_text()
    state = read_state(out / "state.json")
    assert state["finetune-planted-seed1"]["status"] == "done" and "stopped after seed" not in text
