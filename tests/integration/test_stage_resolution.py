"""A training stage's config is resolved once: one parse of its sources per stage, a watched pretraining stage's too,
and the config resolved is the one the stage runs. The stages' runs are stubbed: nothing trains here."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import yaml

from domainbert.cli import lightning_cli
from domainbert.pipeline.recipe import finetune_config
from domainbert.pipeline.runner import Runner
from domainbert.pipeline.specs import DaptSpec, PretrainSpec, TaskFiles, WatchSpec
from domainbert.pipeline.stage import StageConfig, data, model
from domainbert.pipeline.strategies.pretrain import pretrain
from tests.helpers.pipeline_tiny import bare_context

ROOT = Path(__file__).resolve().parents[2]
WATCH = "domainbert.adapt.watch.ProbeWatch"


@pytest.fixture
def resolutions(monkeypatch) -> Counter:
    """The calls of ``resolve_config``, by what they resolve (``stage 'dapt'``); each stage's run is stubbed."""
    calls: Counter = Counter()
    resolve = lightning_cli.resolve_config

    def counted(sources, where):
        calls[where] += 1
        return resolve(sources, where)

    def run(self, stage, module, argv, inline=None, shown=None) -> float:  # the worker's record, without training
        folder = self.out / stage
        record = {"run": str(folder / "run" / "version_0"), "hf": str(folder / "hf"), "metrics": {}}
        (folder / "result.json").write_text(json.dumps(record), encoding="utf-8")
        return 0.0

    monkeypatch.setattr(lightning_cli, "resolve_config", counted)
    monkeypatch.setattr(Runner, "_run", run)
    return calls


def _ran(runner: Runner, stage: str) -> dict:
    return yaml.safe_load((runner.out / stage / "config.yaml").read_text(encoding="utf-8"))


def test_each_stage_is_resolved_once_a_watched_pretraining_stage_too(tmp_path, resolutions):
    """Watched DAPT reads its max_steps from the config it runs: the user's 64 steps make a check every 4 steps."""
    task = TaskFiles(str(tmp_path / "t.jsonl"), str(tmp_path / "v.jsonl"))
    ctx = bare_context(Runner(tmp_path / "p", isolate="none"), task)
    dapt = DaptSpec(enabled=True, args=["--trainer.max_steps=64"])
    pretrain(ctx, ctx.strategies["dapt"], dapt, ctx.baseline, data(train="c.txt"), "dapt")
    tapt = PretrainSpec(args={"trainer": {"max_steps": 32}}, watch=WatchSpec(enabled=False))
    pretrain(ctx, ctx.strategies["tapt"], tapt, ctx.baseline, data(train=task.train), "tapt")
    ctx.runner.fit("finetune", finetune_config(ctx, "base", 0, pooled=False), ["--trainer.max_epochs=1"], test=True)
    ctx.runner.evaluate("evaluate", StageConfig(str(ROOT / "configs/finetune/tiny_classification.yaml")))

    stages = ("dapt", "tapt", "finetune", "evaluate")
    assert resolutions == {f"stage {stage!r}": 1 for stage in stages}
    watched = _ran(ctx.runner, "dapt")["trainer"]
    assert watched["max_steps"] == 64
    assert [c["init_args"]["every_n_steps"] for c in watched["callbacks"] if c["class_path"] == WATCH] == [64 // 16]
    assert _ran(ctx.runner, "tapt")["trainer"]["max_steps"] == 32
    assert WATCH not in str(_ran(ctx.runner, "tapt")["trainer"]["callbacks"])
    assert _ran(ctx.runner, "finetune")["model"]["init_args"]["init_from"] == "base"


def test_a_stage_done_earlier_is_resolved_once_to_be_skipped(tmp_path, resolutions):
    ctx = bare_context(Runner(tmp_path / "p", isolate="none"))
    for _ in range(2):
        pretrain(ctx, ctx.strategies["dapt"], DaptSpec(enabled=True), ctx.baseline, data(train="c.txt"), "dapt")
    assert resolutions == {"stage 'dapt'": 2}  # once per call: the second finds it done


def test_the_stage_parser_is_built_once_for_all_stages(tmp_path):
    lightning_cli.fit_parser.cache_clear()
    runner = Runner(tmp_path / "p", isolate="none")
    config = StageConfig(str(ROOT / "configs/finetune/tiny_classification.yaml"), model(init_from="m"))
    first, second = runner.resolve("a", config), runner.resolve("b", config.then({"trainer": {"max_epochs": 1}}))
    assert lightning_cli.fit_parser.cache_info().misses == 1
    assert (first.values.trainer.max_epochs, second.values.trainer.max_epochs) == (3, 1)
    assert first.values.trainer.default_root_dir == str(runner.out / "a")


def test_a_watch_added_to_a_resolved_config_is_checked_naming_the_stage(tmp_path):
    runner = Runner(tmp_path / "p", isolate="none")
    resolved = runner.resolve("dapt", StageConfig(str(ROOT / "domainbert/pipeline/stages/dapt.yaml")))
    bad = {"trainer": {"callbacks+": [{"class_path": WATCH, "init_args": {"train": "t", "every_n_stepz": 4}}]}}
    with pytest.raises(lightning_cli.DomainBertError, match=r"^stage 'dapt': .*every_n_stepz"):
        resolved.but(bad)
