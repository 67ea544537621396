"""Who teaches and what may ship are points of the strategy interface; the larger teacher acts on both, and its own
distillation reads the distill settings (config, args, transfer) as the small student's does."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from domainbert.errors import DomainBertError
from domainbert.pipeline import recipe
from domainbert.pipeline.deployment import offered_options
from domainbert.pipeline.specs import DeploySpec, DistillSpec, TaskFiles, TransferSpec
from domainbert.pipeline.stage import merge
from domainbert.pipeline.strategies.base import Candidate, Deployable, Run, Strategy, Teaching
from domainbert.pipeline.strategies.larger_teacher import (
    DISTILLED,
    FETCH,
    MEASURED_GAIN,
    NAME,
    STRATEGY,
    TEACHER_CACHE,
    LargerTeacherSpec,
    distill_config,
    tuned_config,
)
from tests.helpers.pipeline_tiny import bare_context

DOCS = Path(__file__).resolve().parents[2] / "docs" / "benchmarks" / "larger-teacher.md"


OUT = Path("runs/p")
CACHE = str(OUT / TEACHER_CACHE)


def _ctx(**settings):
    runner = SimpleNamespace(out=OUT)
    ctx = bare_context(runner=runner, larger_teacher=LargerTeacherSpec(model="big"), **settings)
    tuned = Run(
        "finetune-larger_teacher-seed0", 0, hf="big/hf", predictions="big/test.json", metrics={"val/f1_macro": 0.85}
    )
    copy = Run("distill-larger_teacher", 0, hf="copy/hf", predictions="copy/test.json", metrics={"val/f1_macro": 0.8})
    made = Candidate(DISTILLED, NAME, runs=[copy], adapted=False, description="the base-size copy", teacher=tuned)
    ctx.add(NAME, [made])  # the strategy's candidate carries its teacher: no untyped cache between the methods
    return ctx


def test_the_larger_teachers_distillation_reads_distill_config_args_and_transfer():
    ctx = _ctx()
    ctx.distill = DistillSpec("my_distill.yaml", ["--trainer.max_epochs=1"], transfer=TransferSpec(documents=2000))
    settings = LargerTeacherSpec(model="big", distill_args=["--trainer.max_steps=9"])
    config = distill_config(ctx, settings, teacher="big/hf", student="base/hf")
    assert config.file == "my_distill.yaml"
    transfer = config.values["data"]["init_args"]["transfer"]
    assert (transfer["path"], transfer["documents"]) == ("c.txt", 2000)  # the user's documents, not the default 8000
    assert config.values["trainer"]["max_epochs"] == 2  # distill.transfer.epochs, then distill.args win
    taught = {"teacher": "big/hf", "student": "base/hf", "student_layers": None, "losses": None}
    assert config.overrides == [["--trainer.max_epochs=1"], {"model": {"init_args": taught}}, ["--trainer.max_steps=9"]]
    assert config.values["model"]["init_args"]["teacher_cache"] == CACHE  # before distill.args: theirs win


def test_both_distillations_of_the_larger_teacher_share_one_teacher_cache_under_out():
    ctx = _ctx()
    copy = distill_config(ctx, LargerTeacherSpec(model="big"), teacher="big/hf", student="base/hf")
    taught = recipe.teaching(ctx, Run(hf="chosen/hf", metrics={"val/f1_macro": 0.80}))
    assert copy.values["model"]["init_args"]["teacher_cache"] == CACHE
    assert taught.values["model"]["init_args"]["teacher_cache"] == CACHE
    off = LargerTeacherSpec(model="big", distill_args={"model": {"init_args": {"teacher_cache": None}}})
    config = distill_config(ctx, off, "big/hf", "base/hf")
    resolved = merge(config.values, *(o for o in config.overrides if isinstance(o, dict)))
    assert resolved["model"]["init_args"]["teacher_cache"] is None  # the user's null wins over the pipeline's folder
    ctx.distill = DistillSpec(args={"model": {"init_args": {"teacher_cache": None}}})  # distill.args reach it too
    config = distill_config(ctx, LargerTeacherSpec(model="big"), "big/hf", "base/hf")
    resolved = merge(config.values, *(o for o in config.overrides if isinstance(o, dict)))
    assert resolved["model"]["init_args"]["teacher_cache"] is None


def test_without_distill_settings_it_reads_the_defaults():
    config = distill_config(_ctx(), LargerTeacherSpec(model="big"), teacher="big/hf", student="base/hf")
    assert config.file.endswith("stages/distill.yaml")
    assert config.values["data"]["init_args"]["transfer"]["documents"] == 8000


def test_the_larger_teacher_teaches_through_the_interface_when_it_validates_better():
    ctx = _ctx()
    worse = Run(hf="chosen/hf", metrics={"val/f1_macro": 0.80})
    taught = recipe.teaching(ctx, worse)
    assert taught.teachers == ["big/hf"] and taught.values == {
        "model": {"init_args": {"student": "chosen/hf", "losses": None, "teacher_cache": CACHE}}
    }
    assert recipe.teaching(ctx, Run(hf="chosen/hf", metrics={"val/f1_macro": 0.9})) is None  # the chosen run teaches


def test_a_plugin_strategy_can_choose_the_teacher_and_offer_a_model_to_ship():
    class Oracle(Strategy, name="oracle", kind="after"):
        """Oracle: teaches from a folder of its own and offers it for deployment."""

        def teaches(self, ctx, settings, chosen):
            return Teaching(["oracle/hf"], why="it knows")

        def deployables(self, ctx, settings, chosen):
            return [Deployable("oracle", "oracle/hf")]

    ctx = bare_context()
    ctx.strategies = {"oracle": Oracle(), **ctx.strategies}
    ctx.settings["oracle"] = None
    assert recipe.teaching(ctx, Run(hf="chosen/hf")).teachers == ["oracle/hf"]
    assert [d.role for d in recipe.deployables(ctx, "baseline")] == ["oracle"]


@pytest.mark.parametrize(
    ("chosen", "roles"), [("baseline", ["larger teacher", "base-size student"]), (DISTILLED, ["larger teacher"])]
)
def test_the_larger_teacher_and_its_base_size_student_are_offered_unless_chosen(chosen, roles):
    offered = recipe.deployables(_ctx(), chosen)
    assert [d.role for d in offered] == roles
    assert (offered[0].hf, offered[0].predictions) == ("big/hf", "big/test.json")


def test_an_offered_model_is_exported_by_its_role_on_the_same_rows():
    task = TaskFiles("t.jsonl", "v.jsonl", "te.jsonl")
    stage, options = offered_options(Deployable("larger teacher", "big/hf", "big/test.json"), task, DeploySpec())
    assert stage == "export-larger_teacher"
    assert (options["model"], options["role"], options["data"], options["val"]) == (
        "big/hf",
        "larger teacher",
        "te.jsonl",
        "v.jsonl",
    )
    assert options["predictions"] == "big/test.json" and options["max_drop"] == 1.0 and "teacher" not in options


def test_an_untried_larger_teacher_is_named_where_the_probe_finds_the_task_hard_with_the_pages_figures():
    line = STRATEGY.untried(0.7554, "f1_macro")
    assert "validation f1_macro 0.7554, below 0.85" in line and f"`{FETCH}`" in line
    assert "+1.93 [−0.26, +4.37] on python-docs and +3.07 [+0.86, +5.35] on Debian" in line
    assert STRATEGY.untried(0.9, "f1_macro") is None and STRATEGY.untried(None, "f1_macro") is None
    page = DOCS.read_text(encoding="utf-8")
    for gain in MEASURED_GAIN.values():  # quoted from the benchmark page, not made up here
        assert gain in page


def test_the_larger_teacher_fine_tunes_at_its_own_batch_size_and_epochs_unless_its_args_say_otherwise():
    ctx = _ctx()
    config = tuned_config(ctx, LargerTeacherSpec(model="big"), seed=0)
    own = {"data": {"init_args": {"batch_size": 32}}, "trainer": {"max_epochs": 3}}
    assert config.overrides == [own]  # after the fine-tuning stage's own
    assert config.values["model"]["init_args"]["init_from"] == "big"
    mine = LargerTeacherSpec(model="big", args=["--data.init_args.batch_size=8"])
    assert tuned_config(ctx, mine, seed=0).overrides[-1] == ["--data.init_args.batch_size=8"]  # the user's win
    stage = LargerTeacherSpec(model="big", batch_size=None, epochs=None)  # the fine-tuning stage's own
    assert tuned_config(ctx, stage, seed=0).overrides == []
    with pytest.raises(DomainBertError, match=r"larger_teacher.batch_size=0: expected a positive integer or null"):
        LargerTeacherSpec(model="big", batch_size=0)
    with pytest.raises(DomainBertError, match=r"larger_teacher.epochs=2.5: expected a positive integer or null"):
        LargerTeacherSpec(model="big", epochs=2.5)
