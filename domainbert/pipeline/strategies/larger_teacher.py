"""A larger teacher: a stronger encoder fine-tuned on the task, then distilled into the base model's size.

The accuracy a pipeline can reach is bounded by its base model. A larger encoder (all-mpnet-base-v2, 110M
parameters, against all-MiniLM-L6-v2's 22M) may know the domain better but is slow to serve; distillation is how
its knowledge reaches a model of the base model's size (Hinton et al. 2015; Turc et al. 2019). The teacher may
tokenize differently from the base model: it then reads the student's tokens as text and only its logits are
distilled (:mod:`domainbert.distill.teacher`). Slow or not, it is measured for deployment with its int8 variants
beside the base-size models, and ships when the deployment choice says it is worth its latency.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from domainbert.errors import DomainBertError
from domainbert.pipeline.stage import StageConfig, data, merge, model, trainer
from domainbert.pipeline.strategies.base import (
    Candidate,
    Context,
    Deployable,
    Run,
    Strategy,
    Teaching,
    finetune_stage,
    stage_config,
)

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
    batch_size: int | None = 32
    """Rows per batch of its fine-tuning; None: the fine-tuning stage's (16 in the built-in stage). With short rows a
    step of a 110M-parameter model spends much of its time on work per weight, not per token."""
    epochs: int | None = 3
    """Epochs of its fine-tuning (the learning rate decays over them); None: the fine-tuning stage's (4). Batch 32 over
    3 epochs was chosen on validation against the stage's batch 16 over 4 (docs/benchmarks/distillation.md, "Batch 32
    and 3 epochs for the larger teacher")."""
    args: list[str] | dict[str, Any] = field(default_factory=list)
    """Overrides of its fine-tuning, after the fine-tuning stage's own, ``batch_size`` and ``epochs``: a config dict
    (``{model: {learning_rate: 2.0e-5}}``) or a list of ``domainbert fit`` options."""
    distill_args: list[str] | dict[str, Any] = field(default_factory=list)
    """Overrides of its distillation into the base model's size, applied last: after ``distill.config`` (else the
    built-in ``stages/distill.yaml``), the transfer set of ``distill.transfer`` and ``distill.args``, which reach
    that distillation too (all but its teacher, its student and their layers)."""

    def __post_init__(self) -> None:
        for name in ("batch_size", "epochs"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise DomainBertError(f"pipeline: larger_teacher.{name}={value!r}: expected a positive integer or null")


#: What a larger teacher bought on the bundled domains, quoted from ``docs/benchmarks/larger-teacher.md`` ("Three
#: seeds"; a test keeps the quote and the page the same): the base model's size distilled from all-mpnet-base-v2
#: against MiniLM's own fine-tuned model, test macro-F1 points over 3 seeds each with the 95% paired bootstrap
#: interval.
MEASURED_GAIN = {"python-docs": "+1.93 [−0.26, +4.37]", "Debian": "+3.07 [+0.86, +5.35]"}
#: The page the figures come from.
MEASURED_ON = "docs/benchmarks/larger-teacher.md#three-seeds"
#: A frozen probe below this validation score marks a task the base model finds hard, where a larger encoder has room
#: to help (the bundled domains' probes validate at 0.755 and 0.779: docs/benchmarks/adaptation.md, "The baselines").
HARD_PROBE = 0.85
#: The command that fetches the larger teacher measured there.
FETCH = "python examples/models/get_mpnet.py"

#: The deployment rows of the larger teacher's own fine-tuned model, and of the base-size model it taught.
ROLE, DISTILLED_ROLE = "larger teacher", "base-size student"

#: The folder, under the pipeline's ``out``, that keeps the larger teacher's outputs over the training rows and the
#: transfer set (:mod:`domainbert.distill.teacher_cache`). The larger teacher's forward pass is most of a step when
#: it teaches a model the base model's size; with the cache it runs once per document, and every later epoch, and
#: the small student it also teaches, read its logits (the same values: the cache changes the time, not the
#: training). Its students distil logits only, so the cache is small (a few floats per row).
TEACHER_CACHE = "teacher-cache"


class LargerTeacher(Strategy, name=NAME, kind="after", order=85, settings=LargerTeacherSpec):
    """A larger teacher: fine-tuned on the task, distilled into the base model's size, and teaching the student.

    Off unless larger_teacher.model is set. The larger model is fine-tuned (seed 0 of seeds) with the fine-tuning
    stage; it then teaches a copy of the baseline's best run (the base model's size) in a candidate of its own,
    "distilled from the larger teacher", which competes on validation; that distillation reads the distill settings
    (distill.config, distill.args, distill.transfer) as the small student's does, then larger_teacher.distill_args.
    It teaches the pipeline's small student in place of the chosen model when it validates better, and it and its
    base-size student are measured and offered for deployment beside the chosen model.
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
        from domainbert.pipeline.recipe import best_run

        runner, task, seed = ctx.runner, ctx.task, ctx.seeds[0]
        tuned_stage = finetune_stage(NAME, seed)
        config = tuned_config(ctx, settings, seed)
        tuned = dataclasses.replace(runner.fit(tuned_stage, config, test=bool(task.test)), seed=seed)
        student = best_run(ctx.baseline.runs, ctx.metric)
        stage = f"distill-{NAME}"
        config = distill_config(ctx, settings, teacher=tuned.hf, student=student.hf)
        run = runner.fit(stage, config, test=bool(task.test), after=(tuned_stage,))
        what = (
            f"the base model's size (a copy of the baseline's best run) distilled from the larger teacher "
            f"({settings.model}, fine-tuned; no domain adaptation)"
        )
        return [
            Candidate(
                DISTILLED,
                NAME,
                runs=[dataclasses.replace(run, seed=seed)],
                stages=[tuned_stage, stage],
                adapted=False,
                description=what,
                teacher=tuned,
            )
        ]

    def teaches(self, ctx: Context, settings: LargerTeacherSpec, chosen: Run) -> Teaching | None:
        """The larger teacher teaches the small student when it validates better than ``chosen``.

        The student is then copied from the chosen model's layers (``model.student``), with the default loss
        terms, no hidden-state term (the teacher may read other tokens). None when the strategy did not run, or its
        model validates no better than ``chosen`` (the chosen run teaches, as always).
        """
        tuned = _tuned(ctx)
        if tuned is None or not tuned.hf:
            return None
        key = f"val/{ctx.metric}"
        ours, theirs = tuned.metric(key), chosen.metric(key)
        if ours is None or (theirs is not None and ours <= theirs):
            print(
                f"[{NAME}] the chosen model ({theirs}) validates at least as well as the teacher ({ours}): it teaches"
            )
            return None
        why = f"the larger teacher validates better than the chosen run ({ours:.4f} against {theirs} {key})"
        return Teaching([tuned.hf], model(student=chosen.hf, losses=None, teacher_cache=teacher_cache(ctx)), why=why)

    def untried(self, probe: float | None, metric: str) -> str | None:
        """When the frozen probe finds the task hard (below :data:`HARD_PROBE`): what a larger teacher bought."""
        if probe is None or probe >= HARD_PROBE:
            return None
        gains = " and ".join(f"{gain} on {domain}" for domain, gain in MEASURED_GAIN.items())
        return (
            f"Left on the table: no larger teacher was tried (`larger_teacher.model`), and the frozen probe finds this "
            f"task hard (validation {metric} {probe:.4f}, below {HARD_PROBE}). On the bundled domains "
            f"all-mpnet-base-v2 as larger teacher bought the base model's size, distilled from it, {gains} test "
            f"points over MiniLM fine-tuned ({MEASURED_ON}); "
            f"fetch it with `{FETCH}` and set `larger_teacher: {{model: models/all-mpnet-base-v2}}`."
        )

    def deployables(self, ctx: Context, settings: LargerTeacherSpec, chosen: str) -> list[Deployable]:
        """The larger teacher's fine-tuned model, and its base-size student unless that is the chosen model."""
        tuned = _tuned(ctx)
        if tuned is None or not tuned.hf:
            return []
        made = [Deployable(ROLE, tuned.hf, tuned.predictions, f"{settings.model} fine-tuned on the task")]
        distilled = ctx.output(NAME)
        run = distilled.runs[0] if distilled is not None and distilled.runs else None
        if chosen != DISTILLED and run is not None and run.hf:
            made.append(Deployable(DISTILLED_ROLE, run.hf, run.predictions, distilled.description or DISTILLED))
        return made


def tuned_config(ctx: Context, settings: LargerTeacherSpec, seed: int) -> StageConfig:
    """The larger model's fine-tuning config: the fine-tuning stage's, then ``batch_size`` and ``epochs``, then args."""
    from domainbert.pipeline.recipe import finetune_config

    batch = data(batch_size=settings.batch_size) if settings.batch_size is not None else {}
    epochs = trainer(max_epochs=settings.epochs) if settings.epochs is not None else {}
    return finetune_config(ctx, settings.model, seed, pooled=False).then(merge(batch, epochs), settings.args)


def teacher_cache(ctx: Context) -> str:
    """Where the larger teacher's outputs are kept: :data:`TEACHER_CACHE` under the pipeline's ``out``."""
    return str(Path(ctx.runner.out) / TEACHER_CACHE)


def _tuned(ctx: Context) -> Run | None:
    """The larger model's fine-tuned run, the teacher of this strategy's candidate (None: the strategy did not run)."""
    made = ctx.output(NAME)
    return made.teacher if made is not None else None


def distill_config(ctx: Context, settings: LargerTeacherSpec, teacher: str, student: str) -> StageConfig:
    """The base-size distillation's config: the small student's settings, then this strategy's own.

    ``distill.config`` (else the built-in ``stages/distill.yaml``), the task's files and the transfer set of
    ``distill.transfer``, then ``distill.args``; then what makes it the base-size copy, over anything before: the
    teacher, the student (every layer of it), the default loss terms, no hidden-state term (the teacher may read
    other tokens); last ``larger_teacher.distill_args``. The teacher's outputs are kept in :func:`teacher_cache`
    (shared with the small student's distillation when the larger teacher teaches it), unless ``distill.args`` or
    ``larger_teacher.distill_args`` set ``model.init_args.teacher_cache`` (``null``: no cache).
    """
    from domainbert.pipeline.recipe import transfer_values
    from domainbert.pipeline.specs import DistillSpec

    spec = ctx.distill or DistillSpec()
    taught = model(teacher=teacher, student=student, student_layers=None, losses=None)
    cached = model(teacher_cache=teacher_cache(ctx))
    values = merge(cached, taught, ctx.task.values(), transfer_values(spec, ctx))
    return StageConfig(stage_config(spec, "distill"), values).then(spec.args, taught, settings.distill_args)


STRATEGY = LargerTeacher()
