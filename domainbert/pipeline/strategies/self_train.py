"""Self-training on the domain corpus: the fine-tuned baselines label corpus documents and a fresh model learns."""

from __future__ import annotations

import dataclasses

from domainbert.pipeline.specs import SelfTrainSpec
from domainbert.pipeline.stage import data
from domainbert.pipeline.strategies.base import Candidate, Context, Run, Strategy, finetune_stage

NAME = "self-training"


class SelfTrain(
    Strategy, name="self_train", kind="after", order=60, settings=SelfTrainSpec, needs=("corpus", "single_text")
):
    """Self-training: the baselines label corpus documents; a fresh model learns from the task plus those labels.

    Self-training on the corpus (the baselines label it, a fresh model learns). Off by default.
    """

    def run(self, ctx: Context, settings: SelfTrainSpec) -> list[Candidate]:
        """One run per seed (see :class:`~domainbert.pipeline.specs.SelfTrainSpec`); candidate ``self-training``.

        Its extra minutes: the labelling, the baselines that taught, and the runs on task + pseudo-labelled rows.
        """
        baselines = ctx.baseline.runs
        shared = _pseudolabel(ctx, "pseudo-ensemble", baselines, settings) if settings.teachers == "ensemble" else None
        runs, stages = [], []
        for record in baselines:
            if shared is None:
                labels = f"pseudo-seed{record.seed}"
                train = _pseudolabel(ctx, labels, [record], settings)
            else:
                labels, train = "pseudo-ensemble", shared
            run, made = _student(ctx, record, labels, train, settings)
            runs.append(run)
            stages += [s for s in (labels, record.stage, *made) if s not in stages]
        return [Candidate(NAME, self.name, runs=runs, stages=stages)]


def _student(ctx: Context, teacher: Run, labels: str, train: str, spec: SelfTrainSpec) -> tuple[Run, list[str]]:
    """Seed ``teacher.seed``'s self-trained run; ``(the run, the stages before its last)``."""
    from domainbert.pipeline.recipe import finetune_config

    runner, task, seed = ctx.runner, ctx.task, teacher.seed
    name = finetune_stage(NAME, seed)
    start = ctx.base_model if spec.start == "base" else teacher.hf
    rows = data(train=train, **({"soft_label_column": "probabilities"} if spec.soft else {}))
    first = f"{name}-mixed" if spec.then_task else name
    run = runner.fit(
        first,
        finetune_config(ctx, start, seed).then(rows, spec.args),  # the labelled rows over finetune.args
        test=not spec.then_task and bool(task.test),
        after=(labels,) if spec.start == "base" else (labels, teacher.stage),
    )
    if not spec.then_task:
        return dataclasses.replace(run, seed=seed), []
    run = runner.fit(name, finetune_config(ctx, run.hf, seed), test=bool(task.test), after=(first,))
    return dataclasses.replace(run, seed=seed), [first]


def _pseudolabel(ctx: Context, stage: str, teachers: list[Run], spec: SelfTrainSpec) -> str:
    """Run ``domainbert pseudolabel`` with the teachers' exports; the path of the task + pseudo-labelled rows."""
    task, folder = ctx.task, ctx.runner.out / stage
    options = {"model": [t.hf for t in teachers], "corpus": ctx.corpus, "task": task.train}
    options.update(text_column=task.text_column, label_column=task.label_column, seed=teachers[0].seed)
    options.update(corpus_text_column=ctx.corpus_text_column, ratio=spec.ratio, out=str(folder))
    options.update(max_documents=spec.max_documents or None, **({"soft": True} if spec.soft else {}))
    return ctx.runner.tool(stage, "pseudolabel", options, result=str(folder)).value("train")


STRATEGY = SelfTrain()
