"""The recipe's own stages, around the strategies: the probe, fine-tuning over the seeds, the choice, distillation.

The pipeline (:func:`domainbert.pipeline.command.pipeline`) runs: the frozen-embedding probe (the cheapest baseline)
→ the start strategies (curation, vocabulary, DAPT, TAPT, contrastive...: :mod:`domainbert.pipeline.strategies`) →
fine-tuning of the base model and of every starting model they offer, over the seeds → the after strategies
(self-training, seed soups) → the choice, by validation only → distillation of the chosen model → export → report.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from domainbert.core.stats import mean_std
from domainbert.errors import DomainBertError
from domainbert.pipeline.records import Choice, Distilled, ProbeClassifier, Probed, ToolResult
from domainbert.pipeline.runner import Runner
from domainbert.pipeline.specs import DeploySpec, DistillSpec, ExportSpec, ProbeSpec, TaskFiles
from domainbert.pipeline.stage import StageConfig, data, merge, model, seed, trainer
from domainbert.pipeline.strategies.base import (
    BASELINE,
    PROBE,
    Candidate,
    Context,
    Deployable,
    Run,
    Stop,
    Teaching,
    finetune_stage,
    stage_config,
)

__all__ = [
    "BASELINE",
    "PROBE",
    "Choice",
    "Distilled",
    "ProbeClassifier",
    "Probed",
    "choose",
    "deployables",
    "export_skipped",
    "run_probe",
    "teaching",
]


def run_probe(runner: Runner, base_model: str, task: TaskFiles, spec: ProbeSpec) -> Probed | None:
    """Logistic regression on the base model's frozen mean-pooled embeddings (a row of the report, and a candidate).

    A probe stage done by an older domainbert, which kept no weights (``probe.safetensors``), runs again: the
    probe competes with the fine-tuned models (:func:`add_probe`) and ships as a classifier when it wins.
    """
    if not spec.enabled:
        return None
    folder = runner.out / "probe"
    options = {"model": base_model, "train": task.train, "val": task.val, "test": task.test}
    options.update(text_column=task.text_column, label_column=task.label_column)
    options.update(text_pair_column=task.text_pair_column, max_length=spec.max_length, out=str(folder))
    probed = Probed.of(runner.tool("probe", "probe", options, result=str(folder)))
    if not probed.weights and isinstance(runner.state.get("probe"), dict):  # done by an older domainbert
        runner.state["probe"]["status"] = "outdated"
        probed = Probed.of(runner.tool("probe", "probe", options, result=str(folder)))
    return probed


def probe_export(base_model: str, probed: Probed) -> ProbeClassifier:
    """The probe as a classifier in ``<probe folder>/hf`` (written once per probe run).

    The base encoder with the probe's linear layer as a mean-pooling head; it loads like any fine-tuned
    classifier (``domainbert predict``, ``export``, distillation). When it cannot be built, its ``error`` says why:
    the pipeline then cannot ship the probe, and says so if the probe wins. What the export says goes to the probe
    stage's log (``<probe folder>/log.txt``).
    """
    from domainbert.modules.probe_init import export_probe_classifier
    from domainbert.pipeline.inprocess import output_to

    folder = Path(probed.folder)
    out, weights = folder / "hf", Path(probed.weights or folder / "probe.safetensors")
    if (out / "config.json").is_file() and weights.is_file():
        if (out / "config.json").stat().st_mtime >= weights.stat().st_mtime:
            return ProbeClassifier(hf=str(out))
    try:
        with output_to(folder / "log.txt"):  # the probe stage's log, not between the pipeline's stage lines
            return ProbeClassifier(hf=export_probe_classifier(base_model, str(folder), str(out)))
    except DomainBertError as err:
        print(f"[probe] the probe could not be exported as a classifier: {err}", flush=True)
        return ProbeClassifier(error=str(err))


def pooling(ctx: Context) -> str:
    """``mean`` or ``cls``: the pooling of every fine-tuning run, decided once from the base model.

    Mean when the base model was trained mean-pooled. Adapted models (MLM exports) no longer carry the
    sentence-transformers files that say so, so the baseline and the adapted runs use the same head (a stage's
    own ``finetune.args`` are applied last and can still override it).
    """
    if ctx.pooling is None:
        from domainbert.core.embed import native_pooling
        from domainbert.core.models_local import resolve_local_alias

        ctx.pooling = "mean" if native_pooling(resolve_local_alias(ctx.base_model)) == "mean" else "cls"
    return ctx.pooling


def finetune_config(ctx: Context, init_from: str, seed_value: int | None, pooled: bool = True) -> StageConfig:
    """The fine-tuning stage's config for a run from ``init_from``: the task's data, ``finetune.args`` last.

    Args:
        ctx: the run.
        init_from: the starting model's folder.
        seed_value: ``seed_everything`` (None: the config's own, for an evaluation).
        pooled: set the pooling every fine-tuning run of this pipeline uses (:func:`pooling`); False leaves the
            config's (a larger teacher's own ``auto``).
    """
    values = [model(init_from=init_from), ctx.task.values()]
    values += [model(pooling=pooling(ctx))] if pooled else []
    values += [seed(seed_value)] if seed_value is not None else []
    return StageConfig(stage_config(ctx.finetune, "finetune"), merge(*values)).then(ctx.finetune.args)


def finetune_run(ctx: Context, candidate: Candidate, seed_value: int) -> Run:
    """Fine-tune ``candidate``'s starting model with ``seed_value``; its run."""
    stage = finetune_stage(candidate.name, seed_value)
    run = ctx.runner.fit(stage, finetune_config(ctx, candidate.model, seed_value), test=bool(ctx.task.test))
    return dataclasses.replace(run, seed=seed_value)


def finetune_candidates(ctx: Context) -> None:
    """Fine-tune the baseline over the seeds, then every offered, ungated starting model; each candidate's ``runs``.

    A starting model whose probe gate closed is not fine-tuned. With two or more seeds (and ``finetune.all_seeds``
    off), a starting model whose first seed validates behind the baseline by more than the baseline seeds' spread
    (:func:`behind_baseline`) skips its other seeds; its ``stopped`` says so, and the choice never ships it.
    """
    baseline = ctx.baseline
    baseline.runs = [finetune_run(ctx, baseline, seed) for seed in ctx.seeds]
    key = f"val/{ctx.metric}"
    scores = [score for r in baseline.runs if (score := r.metric(key)) is not None]
    for candidate in ctx.candidates:
        if candidate is baseline or candidate.runs or candidate.gated or not (candidate.model and candidate.offered):
            continue
        first = finetune_run(ctx, candidate, ctx.seeds[0])
        candidate.runs = [first]
        score = first.metric(key)
        if not ctx.finetune.all_seeds and score is not None and behind_baseline(score, scores):
            mean, std = mean_std(scores)
            saved = ctx.runner.seconds(first.stage) * (len(ctx.seeds) - 1) / 60
            candidate.stopped = Stop(ctx.seeds[0], score, mean, std, skipped=ctx.seeds[1:], minutes_saved=saved)
            print(f"[{candidate.name}] {stopped_line(candidate.name, candidate.stopped, ctx.metric)}", flush=True)
            continue
        candidate.runs += [finetune_run(ctx, candidate, seed) for seed in ctx.seeds[1:]]


def behind_baseline(first: float, baseline: list[float]) -> bool:
    """Whether a first seed's validation score is behind the baseline seeds' mean by more than their spread.

    That is ``mean(baseline) - first > std(baseline)``, the sample standard deviation (as the report shows it).
    False with fewer than two baseline seeds: one seed has no spread to judge by.
    """
    if len(baseline) < 2:
        return False
    mean, std = mean_std(baseline)
    return mean - first > std


def stopped_line(name: str, stopped: Stop, metric: str) -> str:
    """What the pipeline's output and the report say of a candidate whose remaining seeds were skipped."""
    skipped = ", ".join(map(str, stopped.skipped))
    return (
        f"stopped after seed {stopped.seed}: validation {metric} {stopped.score:.4f}, behind the baseline's "
        f"mean {stopped.mean:.4f} by more than its seeds' std {stopped.std:.4f}; seeds {skipped} skipped, "
        f"saving about {stopped.minutes_saved:.1f} minutes (finetune.all_seeds: true runs them)"
    )


def add_probe(ctx: Context, probed: Probed | None) -> None:
    """Enter this run's frozen-embedding probe (``probed``) among the candidates, as candidate ``frozen probe``.

    Its one run (kind ``probe``) looks like a fine-tuning run: ``metrics`` (``val/<metric>``, ``test/<metric>``),
    ``predictions`` and ``hf`` (the probe as a classifier, or ``hf_error``). Nothing is added when the probe did not
    run (``probed`` None).
    """
    if probed is None:
        return
    metrics = {
        f"{split}/{m}": v for split, scores in (("val", probed.val), ("test", probed.test)) for m, v in scores.items()
    }
    made = probe_export(ctx.base_model, probed)
    run = Run("probe", kind="probe", metrics=metrics, hf=made.hf, predictions=probed.predictions, hf_error=made.error)
    ctx.add("probe", [Candidate(PROBE, "probe", runs=[run], adapted=False)])


def choose(
    results: dict[str, list[Run]], metric: str, exclude: tuple[str, ...] = (), gated: tuple[str, ...] = ()
) -> Choice:
    """The model to ship: the starting model whose fine-tuned runs score best on **validation**, and why.

    Scores are the mean over seeds. An adapted model (or a seed soup) is chosen only when it beats the baseline on
    validation; on a tie the baseline stays, so the pipeline never ships a model that validated worse than plain
    fine-tuning. The frozen-embedding probe (``results["frozen probe"]``, see :func:`add_probe`) ships instead
    when it validates strictly better than that choice: fine-tuning that lost to a linear probe on frozen
    embeddings failed; a fine-tuned model below the probe ships only when the probe cannot (it could not be
    exported: ``probe_error``). The test split is not read. A soup, one model, is compared with the seeds' mean,
    not with the best seed: the best of several seeds' validation scores is biased upwards by the choice itself.
    Candidates named in ``exclude`` (stopped before their last seed) are never chosen; ``gated`` names those the
    probe gate kept from fine-tuning (they have no runs), for the report.

    Raises:
        DomainBertError: the baseline's runs recorded no validation ``metric``.
    """
    scores = {n: s for n, s in validation_scores(results, metric).items() if n not in exclude}
    probe = scores.pop(PROBE, None)
    if scores.get(BASELINE) is None:
        raise DomainBertError(f"pipeline: the baseline runs recorded no val/{metric}; give the task a validation split")
    best = max((n for n in scores if scores[n] is not None), key=lambda n: (scores[n], n == BASELINE))
    above = probe is not None and probe > scores[best]
    probe_run = results[PROBE][0] if above else None
    name = PROBE if probe_run is not None and probe_run.hf else best
    error = (probe_run.hf_error or "no export") if probe_run is not None and not probe_run.hf else None
    run = best_run(results[name], metric)
    return Choice(name, run, metric, scores, best, probe=probe, probe_error=error, gated=tuple(gated))


def validation_scores(results: dict[str, list[Run]], metric: str) -> dict[str, float | None]:
    """``{name: mean validation metric over its runs}`` (None where no run recorded it)."""
    key = f"val/{metric}"
    scores = {}
    for name, runs in results.items():
        vals = [score for r in runs if (score := r.metric(key)) is not None]
        scores[name] = mean_std(vals)[0] if vals else None
    return scores


def below_probe(results: dict[str, list[Run]], metric: str) -> tuple[str, float, float] | None:
    """``(best fine-tuned candidate, its validation score, the probe's)`` when that best is below the probe.

    None when the probe did not run or a fine-tuned model validates at least as well.
    """
    scores = validation_scores(results, metric)
    probe = scores.pop(PROBE, None)
    tuned = {n: v for n, v in scores.items() if v is not None}
    if probe is None or not tuned:
        return None
    best = max(tuned, key=lambda n: (tuned[n], n == BASELINE))
    return (best, tuned[best], probe) if tuned[best] < probe else None


def best_run(runs: list[Run], metric: str) -> Run:
    """The seed whose run scored best on validation."""
    return max(runs, key=lambda r: r.metric(f"val/{metric}") or float("-inf"))


def distill_teachers(results: dict[str, list[Run]], chosen: str, best: Run, spec: DistillSpec) -> list[str]:
    """The distillation's teacher folders: the chosen run, or (``teacher: ensemble``) every seed run it came from.

    A soup's seeds are those of its starting model; the probe and a single run teach alone.
    """
    if spec.teacher != "ensemble":
        return [best.hf]
    name = chosen[: -len(" soup")] if chosen.endswith(" soup") else chosen
    folders = [r.hf for r in results.get(name, []) if r.hf and r.kind == "seed"]
    return folders if len(folders) > 1 else [best.hf]


def teaching(ctx: Context, chosen: Run) -> Teaching | None:
    """Who teaches the small student instead of ``chosen``: the first enabled strategy that says (registry order).

    None: ``chosen`` teaches (:meth:`~domainbert.pipeline.strategies.base.Strategy.teaches`).
    """
    for name, strategy in ctx.strategies.items():
        if ctx.enabled(name) and (taught := strategy.teaches(ctx, ctx.settings[name], chosen)) is not None:
            return taught
    return None


def deployables(ctx: Context, chosen: str) -> list[Deployable]:
    """The models the enabled strategies offer for deployment beside the chosen candidate ``chosen``, in order."""
    offered: list[Deployable] = []
    for name, strategy in ctx.strategies.items():
        if ctx.enabled(name):
            offered += strategy.deployables(ctx, ctx.settings[name], chosen)
    return offered


def transfer_values(spec: DistillSpec, ctx: Context) -> dict[str, Any]:
    """The distillation's ``data.transfer`` (the corpus as its transfer set) and epochs, when it is on; else ``{}``.

    With ``source: nearest`` the documents are first chosen by ``domainbert select`` (stage ``select-transfer``):
    ``ceil(documents / training texts)`` neighbours per training text.
    """
    transfer, corpus, column = spec.transfer, ctx.corpus, ctx.corpus_text_column
    if transfer.enabled is False or (transfer.enabled == "auto" and not corpus):
        return {}
    if not corpus:
        raise DomainBertError("pipeline: distill.transfer.enabled: true needs corpus (the documents to add)")
    if transfer.source == "nearest":
        corpus, column = nearest_transfer(ctx, transfer.documents), "text"
    settings = {"path": corpus, "documents": transfer.documents, "text_column": column}
    return merge(data(transfer=settings), trainer(max_epochs=transfer.epochs))


def nearest_transfer(ctx: Context, documents: int | None) -> str:
    """The corpus documents nearest the task's training texts (``domainbert select``): the file's path."""
    import math

    from domainbert.data.corpus import documents as read_documents

    texts = sum(1 for _ in read_documents(ctx.task.train, ctx.task.text_column))
    k = 20 if documents is None else max(1, math.ceil(documents / max(1, texts)))
    folder, task = ctx.runner.out / "select-transfer", ctx.task
    options = {"model": ctx.base_model, "corpus": ctx.corpus, "task": task.train, "k": k}
    options.update(text_column=task.text_column, corpus_text_column=ctx.corpus_text_column, out=str(folder))
    return ctx.runner.tool("select-transfer", "select", options, result=str(folder)).value("corpus")


def distill_and_export(
    runner: Runner,
    teacher: str,
    task: TaskFiles,
    distill: DistillSpec,
    export: ExportSpec,
    teacher_predictions: str | None = None,
    teachers: list[str] | None = None,
    extra: dict[str, Any] | None = None,
    deploy: DeploySpec | None = None,
    probe: Run | None = None,
    offered: list[Deployable] | None = None,
) -> Distilled | None:
    """Distil ``teacher`` into a student and export its deployment variants (None: distillation is off).

    ``teachers`` (default: ``[teacher]``) teach the student, their probabilities averaged; ``teacher``, the chosen
    model, is the export's teacher row. ``extra``: config values before ``distill.args`` (the transfer set's).
    When the export does not run, the pipeline's output says why, and so does the result's ``skipped`` (for the
    report). The export's teacher and student rows take their test metrics from the test passes their stages made
    (``teacher_predictions``, the student's ``predictions``): each model reads the test split once. ``deploy``:
    the deployment choice's settings; ``probe``: the frozen probe's run (its classifier is measured beside the
    variants), both passed on by :func:`~domainbert.pipeline.deployment.export_options`. ``offered``: the models
    strategies offer for deployment (:func:`deployables`): each is exported first (stage ``export-<role>``) and its
    rows join the export's table, plot and recommendation.
    """
    from domainbert.pipeline.deployment import export_options, offered_options

    if not distill.enabled:
        return None
    teachers = teachers or [teacher]
    named = teachers[0] if len(teachers) == 1 else teachers
    values = merge(model(teacher=named), task.values(), extra or {})
    config = StageConfig(stage_config(distill, "distill"), values).then(distill.args)
    student = runner.fit("distill", config, test=bool(task.test))
    skipped = export_skipped(export, student, task)
    if skipped:
        print(f"[export] skipped: {skipped}", flush=True)
        return Distilled(student, skipped=skipped)
    joined: dict[str, ToolResult] = {}
    for made in offered or []:
        stage, options = offered_options(made, task, deploy)
        folder = str(runner.out / stage)
        joined[stage] = runner.tool(stage, "export", {"out": folder, **options}, result=folder, args=export.args)
    folder = runner.out / "export"
    options = export_options(student, teacher, task, deploy, teacher_predictions, probe)
    if joined:
        options["join"] = [made.result for made in joined.values()]
    after = tuple(joined)
    runner.tool("export", "export", {"out": str(folder), **options}, result=str(folder), args=export.args, after=after)
    return Distilled(student, export=str(folder))


def export_skipped(export: ExportSpec, student: Run, task: TaskFiles) -> str | None:
    """Why the export stage does not run for ``student``; None when it runs."""
    if not export.enabled:
        return "export is disabled (export: {enabled: false})"
    if not student.hf:
        return "the distillation run exported no model (no hf/ folder) to export"
    if not task.test:
        return (
            "no test split (task_test), which the export measures its variants' metric on; give task_test, or "
            f"run `domainbert export --model {student.hf} --data <labelled file> --out <folder>` yourself"
        )
    return None
