"""A larger teacher: a stronger encoder fine-tuned on the task, then distilled into the base model's size.

The accuracy a pipeline can reach is bounded by its base model. A larger encoder (all-mpnet-base-v2, 110M
parameters, against all-MiniLM-L6-v2's 22M) may know the domain better but is slow to serve; distillation is how
its knowledge reaches a model of the base model's size (Hinton et al. 2015; Turc et al. 2019). The teacher may
tokenize differently from the base model: it then reads the student's tokens as text and only its logits are
distilled (:mod:`domainbert.distill.teacher`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from domainbert.errors import DomainBertError
from domainbert.pipeline.stage import StageConfig, merge, model
from domainbert.pipeline.strategies.base import Candidate, Context, Run, Strategy, finetune_stage, stage_config

NAME = "larger_teacher"
"""The strategy's name and its config key: ``larger_teacher: {model: <folder>}``."""

DISTILLED = "distilled from the larger teacher"
"""The report's row of the base-size student the larger teacher taught."""


@dataclass
class LargerTeacherSpec:
    """A larger model, fine-tuned on the task, that teaches the base model's size and the small student."""

    enabled: bool | Literal["auto"] = "auto"
    """Run it: true, false, or auto (when ``model`` is given)."""
    model: str | None = None
    """The larger encoder (a local folder, an installed package's ``pkg:`` name, or a hub name); None: off."""
    args: list[str] | dict[str, Any] = field(default_factory=list)
    """Overrides of its fine-tuning, after the fine-tuning stage's own: a config dict
    (``{model: {learning_rate: 2.0e-5}}``) or a list of ``domainbert fit`` options."""
    distill_args: list[str] | dict[str, Any] = field(default_factory=list)
    """Overrides of its distillation into the base model's size (after the built-in ``stages/distill.yaml``)."""


class LargerTeacher(Strategy, name=NAME, kind="after", order=85, settings=LargerTeacherSpec):
    """A larger teacher: fine-tuned on the task, distilled into the base model's size, and teaching the student.

    Off unless larger_teacher.model is set. The larger model is fine-tuned (seed 0 of seeds) with the fine-tuning stage;
    it then teaches a copy of the baseline's best run (the base model's size, with the corpus as transfer set) in a
    candidate of its own, "distilled from teacher", which competes on validation; and it teaches the pipeline's
    small student in place of the chosen model.
    """

    def enabled(self, settings: LargerTeacherSpec) -> bool:
        return settings.enabled is True or (settings.enabled == "auto" and bool(settings.model))

    def check(self, ctx: Context, settings: LargerTeacherSpec) -> None:
        if not settings.model:
            raise DomainBertError("pipeline: larger_teacher.enabled: true needs larger_teacher.model (its folder)")
        if ctx.task.text_pair_column:
            raise DomainBertError(
                "pipeline: larger_teacher.model reads single texts (a teacher with another tokenizer reads the "
                "student's tokens as text); unset text_pair_column or larger_teacher.model"
            )

    def run(self, ctx: Context, settings: LargerTeacherSpec) -> list[Candidate]:
        """Fine-tune the larger model, then distil it into the baseline's size; the distilled candidate."""
        from domainbert.pipeline.recipe import best_run, finetune_config, transfer_values
        from domainbert.pipeline.specs import DistillSpec

        runner, task, seed = ctx.runner, ctx.task, ctx.seeds[0]
        tuned_stage = finetune_stage(NAME, seed)
        config = finetune_config(ctx, settings.model, seed, pooled=False).then(settings.args)
        tuned = Run.of(runner.fit(tuned_stage, config, test=bool(task.test)), tuned_stage, seed)
        ctx.cache[NAME] = tuned
        student = best_run(ctx.baseline.runs, ctx.metric)
        stage = f"distill-{NAME}"
        taught = model(teacher=tuned.hf, student=student.hf, student_layers=None, gamma=0)
        values = merge(taught, task.values(), transfer_values(DistillSpec(), ctx))
        config = StageConfig(stage_config(None, "distill"), values).then(settings.distill_args)
        run = runner.fit(stage, config, test=bool(task.test), after=(tuned_stage,))
        return [
            Candidate(
                DISTILLED,
                NAME,
                runs=[Run.of(run, stage, seed)],
                stages=[tuned_stage, stage],
                adapted=False,
                one_model=True,
                data={"teacher": tuned},
            )
        ]


def small_student(ctx: Context, chosen: Run) -> tuple[list[str], dict[str, Any]] | None:
    """``(teachers, distillation config values)`` when the larger teacher validates better than the chosen run.

    The larger teacher then teaches the small student, copied from the chosen model's layers
    (``model.student``), with the hidden-state term off (the teacher may read other tokens). None when the
    strategy did not run, or its model validates no better than ``chosen`` (the chosen run teaches, as always).
    """
    tuned: Run | None = ctx.cache.get(NAME)
    if tuned is None or not tuned.hf:
        return None
    key = f"val/{ctx.metric}"
    ours, theirs = tuned.metric(key), chosen.metric(key)
    if ours is None or (theirs is not None and ours <= theirs):
        print(f"[{NAME}] the chosen model ({theirs}) validates at least as well as the teacher ({ours}): it teaches")
        return None
    return [tuned.hf], model(student=chosen.hf, gamma=0)


STRATEGY = LargerTeacher()
