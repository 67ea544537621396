"""The pipeline's strategies: the registry (built-in ones in order, plugins through entry points), the settings each
reads, declared chains and their names, one check per rule, and the report's minutes from a candidate's own stages."""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass
from pathlib import Path

import pytest

from domainbert.errors import DomainBertError
from domainbert.pipeline import DaptSpec, PretrainSpec, SelfTrainSpec, StageSpec, VocabSpec, main, strategies
from domainbert.pipeline.strategies.base import BASELINE, Candidate, Context, Strategy, chained
from domainbert.pipeline.strategies.contrastive import ContrastiveSpec
from tests.helpers.pipeline_tiny import bare_context, refused_pipeline

FIX = Path(__file__).resolve().parents[1] / "fixtures"


def test_the_built_in_strategies_run_in_declared_order_start_before_after():
    loaded = strategies.load(refresh=True)
    built_in = ["select", "vocab", "dapt", "tapt", "contrastive", "tsdae", "self_train", "larger_teacher", "soup"]
    assert list(loaded)[:9] == built_in
    kinds = [s.kind for s in loaded.values()]
    assert kinds == sorted(kinds, key=lambda k: k != "start")  # every start strategy before every after one
    assert loaded["tapt"].builds_on == ("dapt", "vocab") and loaded["dapt"].builds_on == ("select", "vocab")
    defaults = {n: s.enabled(s.default()) for n, s in loaded.items()}
    assert defaults == {
        "select": False, "vocab": False, "dapt": True, "tapt": False, "contrastive": False, "tsdae": False,
        "self_train": False, "larger_teacher": False, "soup": True,
    }  # fmt: skip


def test_settings_keep_their_old_forms_and_a_wrong_key_or_type_is_one_line():
    loaded = strategies.load()
    given = {
        "dapt": StageSpec(enabled=False),
        "vocab": {"enabled": True, "top_k": 7},
        "contrastive": StageSpec("c.yaml"),
    }
    settings = strategies.settings_of(loaded, given)
    assert settings["dapt"] == DaptSpec(enabled=False)  # a StageSpec given: converted, the watch's defaults
    assert settings["vocab"] == VocabSpec(enabled=True, top_k=7)
    assert settings["contrastive"] == ContrastiveSpec("c.yaml", [], True)  # converted, enabled as StageSpec says
    assert settings["tapt"] == PretrainSpec(enabled=False) and settings["soup"].enabled  # not given: the defaults
    with pytest.raises(DomainBertError, match=r"^pipeline: no strategy named 'dpat'; the installed ones are \["):
        strategies.settings_of(loaded, {"dpat": StageSpec()})
    with pytest.raises(
        DomainBertError, match=r"^pipeline: vocab: expected VocabSpec settings or a dict of its fields, got 3$"
    ):
        strategies.settings_of(loaded, {"vocab": 3})


def _context(**settings) -> Context:
    return bare_context(**settings)


def test_a_chain_starts_from_the_first_upstream_that_ran_and_extends_its_name_and_stages():
    ctx = _context()
    assert ctx.upstream(("dapt", "vocab")) is ctx.baseline and chained(ctx.baseline, "tapt") == "tapt"
    ctx.add("vocab", [Candidate("vocab", "vocab", model="v/hf", stages=["vocab"], offered=False)])
    assert ctx.upstream(("dapt", "vocab")).model == "v/hf"
    ctx.add("dapt", [Candidate("vocab+knn-dapt", "dapt", model="d/hf", stages=["select", "vocab", "dapt"])])
    up = ctx.upstream(("dapt", "vocab"))
    assert up.model == "d/hf" and chained(up, "tapt") == "vocab+knn-dapt+tapt"
    with pytest.raises(DomainBertError, match="returned a second candidate 'vocab'"):
        ctx.add("other", [Candidate("vocab", "other")])
    assert list(ctx.results()) == []  # nothing fine-tuned yet


@pytest.mark.parametrize(
    "settings,message",
    [
        ({"select": {"enabled": True}, "dapt": {"enabled": False}}, "select curates the DAPT data: enable dapt"),
        ({"vocab": {"enabled": True}, "dapt": {"enabled": False}}, "new vocabulary rows need pretraining"),
    ],
)
def test_each_strategy_checks_its_own_rule(settings, message):
    ctx = _context(**settings)
    name = next(n for n, s in settings.items() if s["enabled"])
    with pytest.raises(DomainBertError, match=message):
        ctx.strategies[name].check(ctx, ctx.settings[name])
    ctx.settings["tapt"] = PretrainSpec(enabled=True)  # tapt builds on vocab's output too
    if name == "vocab":
        ctx.strategies[name].check(ctx, ctx.settings[name])


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (
            {"corpus": None, "contrastive": ContrastiveSpec(enabled=True), "self_train": SelfTrainSpec(enabled=True)},
            r"^pipeline: `corpus` is not set, and the enabled strategies contrastive, self_train read the "
            r"domain corpus: set `corpus`$",
        ),
        (
            {"self_train": SelfTrainSpec(enabled=True), "text_pair_column": "second"},
            r"^pipeline: self_train works on single texts; it cannot serve a pair task",
        ),
        ({"contrastive": {"enabled": True, "config": "nowhere/c.yaml"}}, r"^pipeline: contrastive.config nowhere"),
        ({"nope": {"enabled": True}}, r"^pipeline: no strategy named 'nope'"),
    ],
)
def test_the_rules_are_checked_in_one_loop_before_anything_is_written(tmp_path, kwargs, message):
    with pytest.raises(DomainBertError, match=message) as err:
        refused_pipeline(tmp_path, **kwargs)
    assert "\n" not in str(err.value) and not (tmp_path / "p").exists()


def test_help_lists_every_installed_strategy_with_its_one_line_doc(capsys):
    from jsonargparse import set_parsing_settings

    try:
        with pytest.raises(SystemExit):
            main(["--help"])
    finally:
        set_parsing_settings(docstring_parse_attribute_docstrings=False)
    text = " ".join(capsys.readouterr().out.split())
    for name, strategy in strategies.load().items():
        assert f"{name} ({strategy.kind}): {strategy.summary()}" in text
        assert f"--{name}.enabled {{true,false}}" in text or f"--{name}.enabled ENABLED" in text
    assert "--contrastive.config" in text and "entry-point group domainbert.strategies" in text


@dataclass
class _EchoSpec:
    enabled: bool = True


class _Echo(Strategy):
    """Echo: a plugin for this test."""

    name = "echo"
    settings = _EchoSpec


class _Taken(_Echo):
    name = "dapt"


def test_plugins_load_through_their_entry_points_and_a_bad_one_is_named_and_skipped(monkeypatch):
    eps = [
        importlib.metadata.EntryPoint("echo", f"{__name__}:_Echo", strategies.GROUP),
        importlib.metadata.EntryPoint("dapt", f"{__name__}:_Taken", strategies.GROUP),
        importlib.metadata.EntryPoint("renamed", f"{__name__}:_Taken", strategies.GROUP),
        importlib.metadata.EntryPoint("notone", "pathlib:Path", strategies.GROUP),
        importlib.metadata.EntryPoint("broken", "no_such_module_xyz:Thing", strategies.GROUP),
    ]
    installed = importlib.metadata.entry_points
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [*installed(group=group), *eps])
    with pytest.warns(UserWarning) as caught:
        loaded = strategies.load(refresh=True)
    messages = " ".join(str(w.message) for w in caught)
    assert "'broken' (unknown distribution: no_such_module_xyz:Thing) failed to import" in messages
    assert "already taken: 'dapt' (unknown distribution: " in messages
    assert "; kept: domainbert: domainbert.pipeline.strategies.dapt:STRATEGY)" in messages
    assert "'renamed' (unknown distribution: " in messages and "its name 'dapt' is not the name it is" in messages
    assert "'notone' (unknown distribution: pathlib:Path) is skipped" in messages
    assert list(loaded)[-1] == "soup" and list(loaded)[6] == "echo"  # a start plugin runs after the built-in ones
    assert isinstance(loaded["echo"], _Echo) and "echo (start [" in strategies.listing(loaded)
    assert type(loaded["dapt"]).__module__ == "domainbert.pipeline.strategies.dapt"
    monkeypatch.undo()
    assert "echo" not in strategies.load(refresh=True)


class _Runner:
    called = ["vocab", "dapt", "tapt", "finetune-dapt-tapt-seed0"]
    state = {s: {"seconds": 60.0 * (i + 1)} for i, s in enumerate(called)}

    def seconds(self, stage):
        return self.state.get(stage, {}).get("seconds", 0.0)


def test_a_candidates_minutes_are_the_sum_of_its_own_stages():
    from domainbert.pipeline.report import candidate_minutes

    runner = _Runner()
    dapt_tapt = Candidate("vocab+dapt+tapt", "tapt", model="m", stages=["vocab", "dapt", "tapt"])
    assert candidate_minutes(runner, dapt_tapt) == 1 + 2 + 3
    assert candidate_minutes(runner, Candidate("dapt", "dapt", stages=["select", "dapt"])) == 2  # select not run
    assert candidate_minutes(runner, Candidate(BASELINE, BASELINE)) == 0
