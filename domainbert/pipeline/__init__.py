"""``domainbert pipeline``: a domain corpus and a labelled task in, the best model that validation supports out.

    domainbert pipeline --config configs/pipeline/minilm_debian.yaml

A new domain needs only its paths (``base_model``, ``corpus``, ``task_train``, ``task_val``, ``task_test`` and
the column names); every stage has a built-in config. Stages, each a real ``domainbert`` run with its log in
``<out>/<stage>/log.txt`` (training stages in a process of their own, tool stages in the pipeline's: ``isolate``):
the frozen-embedding probe → corpus curation (optional) → vocabulary extension (optional) → DAPT → TAPT (optional)
→ fine-tuning from the base model (the baseline) and from each adapted model over the seeds → self-training on the
corpus (optional) → seed soups (each starting model's seeds averaged into one model) → the choice by validation →
distillation → export.
``<out>/state.json`` records the finished stages: a rerun skips them. ``<out>/report.md`` sets out what each
stage bought, with paired bootstrap intervals and the minutes it cost.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Literal

from domainbert.pipeline.specs import (
    ExportSpec,
    FinetuneSpec,
    ProbeSpec,
    SelectSpec,
    SelfTrainSpec,
    SoupSpec,
    StageSpec,
    TaskFiles,
    VocabSpec,
)

__all__ = [
    "ExportSpec",
    "FinetuneSpec",
    "ProbeSpec",
    "SelectSpec",
    "SelfTrainSpec",
    "SoupSpec",
    "StageSpec",
    "TaskFiles",
    "VocabSpec",
    "main",
    "pipeline",
]

#: What ``domainbert pipeline --help`` says runs when a config names only the paths.
RUNS_BY_DEFAULT = (
    "What runs when the config gives only the paths: the probe; DAPT on the corpus (400 masked-LM steps, "
    "domainbert/pipeline/stages/dapt.yaml); fine-tuning of the base model and of the DAPT model (up to 4 epochs, "
    "stages/finetune.yaml) with seed 0 alone; the choice by validation; distillation of the chosen model into a "
    "3-layer student (4 epochs, stages/distill.yaml); its int8 export (with task_test). Off unless enabled: select, "
    "vocab, tapt, self_train; seed soups need two or more seeds. Each stage's `enabled` below shows its default."
)

# The defaults, shared by every call: the pipeline reads them and never changes them.
_ONE_SEED = [0]
_PROBE, _SELECT, _VOCAB = ProbeSpec(), SelectSpec(), VocabSpec()
_DAPT, _TAPT, _FINETUNE = StageSpec(), StageSpec(enabled=False), FinetuneSpec()
_SELF_TRAIN, _SOUP, _DISTILL, _EXPORT = SelfTrainSpec(), SoupSpec(), StageSpec(), ExportSpec()


def pipeline(
    base_model: str,
    task_train: str,
    task_val: str,
    task_test: str | None = None,
    corpus: str | None = None,
    corpus_text_column: str = "text",
    text_column: str = "text",
    text_pair_column: str | None = None,
    label_column: str = "label",
    out: str = "runs/pipeline",
    seeds: list[int] = _ONE_SEED,
    metric: str = "f1_macro",
    isolate: Literal["training", "all", "none"] = "training",
    probe: ProbeSpec = _PROBE,
    select: SelectSpec = _SELECT,
    vocab: VocabSpec = _VOCAB,
    dapt: StageSpec = _DAPT,
    tapt: StageSpec = _TAPT,
    finetune: FinetuneSpec = _FINETUNE,
    self_train: SelfTrainSpec = _SELF_TRAIN,
    soup: SoupSpec = _SOUP,
    distill: StageSpec = _DISTILL,
    export: ExportSpec = _EXPORT,
) -> Path:
    """Run the domain-adaptation recipe and write ``<out>/report.md``.

    Args:
        base_model: the starting encoder (folder, ``pkg:<module>``, or hub name).
        task_train: the task's training rows; also TAPT's text and the anchor of the corpus curation.
        task_val: validation rows: early stopping, the probe's regularisation, and the choice of the shipped model.
        task_test: test rows, read once for the report (the choice never looks at them).
        corpus: the unlabelled domain corpus (DAPT, vocabulary, curation, self-training); None when no stage needs it.
        corpus_text_column: the corpus's text column (JSONL/CSV/Parquet; plain text files have ``text``).
        text_column: the text column of the task files.
        text_pair_column: the second text of pair tasks.
        label_column: the label column of the task files.
        out: the pipeline's folder: each stage's runs and logs, ``state.json`` and the report. A new or empty folder,
            or one this pipeline wrote (a rerun resumes it); never a folder of your own.
        seeds: fine-tuning seeds; starting models are compared as mean ± std over them. Default: seed 0 alone (no
            ± std, no seed soups); give at least one.
        metric: the metric that chooses (on validation) and that the report compares (``f1_macro`` or ``acc``).
        isolate: which stages run in a process of their own: ``training`` (fine-tuning, DAPT/TAPT, distillation
            and the soups' evaluations; the tool stages, probe, select, vocab, pseudolabel, soup and export, run in
            the pipeline's process, sparing a process start of 11-15 s each), ``all``, or ``none`` (tests and small
            data; single-device training only). Every stage's log is ``<out>/<stage>/log.txt`` either way.
        probe: the frozen-embedding logistic regression, a row of the report. Runs by default (``enabled: true``).
        select: curated DAPT data: the corpus documents nearest the task's texts. Off by default.
        vocab: vocabulary extension before DAPT. Off by default.
        dapt: domain-adaptive pretraining on the corpus (or the curated corpus). Runs by default: 400 masked-LM
            steps with the built-in ``stages/dapt.yaml``; ``enabled: false`` to skip it.
        tapt: task-adaptive pretraining on the task's own text (after DAPT when both run). Off by default.
        finetune: the fine-tuning stage, run for the baseline and for each adapted model, once per seed. Always runs
            (built-in ``stages/finetune.yaml``: up to 4 epochs, early stopping on validation macro-F1).
        self_train: self-training: the baseline labels corpus documents, and a fresh model learns from them too.
            Off by default.
        soup: seed soups: each starting model's seed runs averaged into one model (no training), evaluated and
            compared like the others. On by default, but made only with two or more seeds.
        distill: distillation of the chosen model into a smaller student. Runs by default: a 3-layer student,
            4 epochs with the built-in ``stages/distill.yaml``; ``enabled: false`` to ship the chosen model as is.
        export: deployment variants of the student (int8 by default). Runs by default after distillation when
            ``task_test`` is given.
    """
    from domainbert.pipeline import recipe
    from domainbert.pipeline.report import write_report
    from domainbert.pipeline.runner import Runner

    # None (from Python) is the default, as before the defaults were written out
    probe, select, vocab, dapt, tapt = probe or _PROBE, select or _SELECT, vocab or _VOCAB, dapt or _DAPT, tapt or _TAPT
    finetune, self_train, soup = finetune or _FINETUNE, self_train or _SELF_TRAIN, soup or _SOUP
    distill, export = distill or _DISTILL, export or _EXPORT
    task = TaskFiles(task_train, task_val, task_test, text_column, text_pair_column, label_column)
    stages = {"select": select, "vocab": vocab, "dapt": dapt, "tapt": tapt, "corpus_text_column": corpus_text_column}
    metric, seeds = check(task, corpus, metric, seeds, {**stages, "finetune": finetune, "distill": distill}, self_train)
    inputs = [corpus, task_train, task_val, task_test, base_model if Path(base_model).exists() else None]
    runner = Runner(Path(out), isolate=isolate, inputs=inputs)
    probed = recipe.run_probe(runner, base_model, task, probe)
    starts = recipe.adapted_models(runner, base_model, corpus, task, stages)
    results = recipe.finetune_all(runner, starts, task, finetune, seeds, base_model)
    corpus_spec = {"path": corpus, "column": corpus_text_column, "base": base_model}
    recipe.self_train(runner, results, corpus_spec, task, self_train, finetune)
    recipe.soups(runner, results, task, finetune, soup, base_model)
    chosen, why = recipe.choose(results, metric)
    teacher = recipe.best_run(results[chosen], metric)["hf"]
    student, deployed = recipe.distill_and_export(runner, teacher, task, distill, export)
    report = write_report(runner, results, probed, (chosen, why, teacher), student, deployed, metric, seeds)
    print(f"\nPipeline done. Shipped: {teacher} ({chosen}: {why}). Report: {report}")
    return report


def check(task: TaskFiles, corpus: str | None, metric: str, seeds, stages: dict, self_train: SelfTrainSpec):
    """Refuse, before any stage runs, a pipeline that cannot work; the metric's short name and the seeds (a list).

    Checked: the metric, the seeds, the stage combinations, every stage config a stage would read, and every data
    path a stage would read (the task's files; the corpus when a stage reads it). Each refusal is one line naming
    the field and what was expected.

    Raises:
        DomainBertError: the first problem found.
    """
    from domainbert.adapt.stats import METRICS
    from domainbert.errors import DomainBertError
    from domainbert.pipeline import recipe

    metric = metric.split("/")[-1]
    if metric not in METRICS:
        raise DomainBertError(f"pipeline: metric={metric!r}; expected one of {sorted(METRICS)}")
    seeds = list(_ONE_SEED if seeds is None else seeds)
    if not seeds:
        raise DomainBertError(
            "pipeline: seeds is empty; give at least one seed (e.g. [0, 1, 2]) or leave it out (seed 0)"
        )
    if len(set(seeds)) != len(seeds):
        raise DomainBertError(f"pipeline: seeds {seeds} repeats a seed; give each seed once")
    if getattr(stages["finetune"], "enabled", True) is not True:
        raise DomainBertError(FINETUNE_ENABLED)
    recipe.check_stages(corpus, stages)
    if self_train.enabled and not corpus:
        raise DomainBertError("pipeline: self_train labels the domain corpus: set `corpus`")
    if self_train.enabled and task.text_pair_column:
        raise DomainBertError("pipeline: self_train labels single corpus documents; it cannot serve a pair task")
    for name in ("dapt", "tapt", "finetune", "distill"):
        spec = stages[name]
        if getattr(spec, "enabled", True) and spec.config and not Path(spec.config).is_file():
            raise DomainBertError(
                f"pipeline: {name}.config {spec.config}: no such file; name the stage's fit config (a path from the "
                f"working directory), or leave {name}.config out for the built-in one"
            )
    reads_corpus = any(stages[s].enabled for s in ("select", "vocab", "dapt")) or self_train.enabled
    paths = {"task_train": task.train, "task_val": task.val, "task_test": task.test}
    _check_paths({**paths, "corpus": corpus if reads_corpus else None})
    return metric, seeds


def _check_paths(paths: dict[str, str | None]) -> None:
    """Refuse a data path (file, folder or glob) that names nothing: ``{field: path}``; None entries are skipped."""
    from domainbert.data.readers import expand
    from domainbert.errors import DomainBertError

    for name, path in paths.items():
        if path is None:
            continue
        try:
            expand(path)
        except DomainBertError as err:
            raise DomainBertError(f"pipeline: {name}: {err}") from None


#: The one line for a config that still sets ``finetune.enabled`` (a field that was never read).
FINETUNE_ENABLED = (
    "pipeline: finetune.enabled is not an option (fine-tuning always runs: every model is compared with the "
    "fine-tuned baseline); remove `enabled` from `finetune`. To fine-tune the baseline alone, write "
    "`dapt: {enabled: false}` (tapt, select, vocab and self_train are off unless enabled)"
)


def main(argv: list[str] | None = None) -> None:
    """``domainbert pipeline --config configs/pipeline/<model>_<data>.yaml``; ``--help`` lists every option."""
    from argparse import ArgumentError

    from jsonargparse import ActionConfigFile, ArgumentParser, set_parsing_settings

    from domainbert.core.tool_cli import wants_docs
    from domainbert.errors import DomainBertError

    argv = list(sys.argv[1:] if argv is None else argv)
    set_parsing_settings(docstring_parse_attribute_docstrings=wants_docs(argv))  # the specs' field docstrings
    description = f"{__doc__.split(chr(10) * 2)[0]}\n\n{RUNS_BY_DEFAULT}"
    parser = ArgumentParser(prog="domainbert pipeline", description=description, allow_abbrev=False)
    parser.add_argument("--config", action=ActionConfigFile)
    parser.add_function_arguments(pipeline, as_positional=False)
    parser.exit_on_error = False
    try:
        cfg = parser.parse_args(argv)
    except ArgumentError as err:
        message = str(err)
        if "finetune" in message and "enabled" in message:
            raise DomainBertError(FINETUNE_ENABLED) from None
        parser.exit_on_error = True
        parser.error(message)
    kwargs = parser.instantiate_classes(cfg).as_dict()
    kwargs.pop("config", None)
    pipeline(**kwargs)
