"""``domainbert pipeline``: a domain corpus and a labelled task in, the best model that validation supports out.

    domainbert pipeline --config configs/pipeline/minilm_debian.yaml

A new domain needs only its paths (``base_model``, ``corpus``, ``task_train``, ``task_val``, ``task_test`` and
the column names); every stage has a built-in config. Stages, each a real ``domainbert`` run in its own
process with its log in ``<out>/<stage>/log.txt``: the frozen-embedding probe → corpus curation (optional) →
vocabulary extension (optional) → DAPT → TAPT (optional) → fine-tuning from the base model (the baseline) and
from each adapted model over the seeds → self-training on the corpus (optional) → seed soups (each starting model's
seeds averaged into one model) → the choice by validation → distillation → export.
``<out>/state.json`` records the finished stages: a rerun skips them. ``<out>/report.md`` sets out what each
stage bought, with paired bootstrap intervals and the minutes it cost.
"""

from __future__ import annotations

import sys
from pathlib import Path

from domainbert.pipeline.specs import (
    ExportSpec,
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
    seeds: list[int] | None = None,
    metric: str = "f1_macro",
    probe: ProbeSpec | None = None,
    select: SelectSpec | None = None,
    vocab: VocabSpec | None = None,
    dapt: StageSpec | None = None,
    tapt: StageSpec | None = None,
    finetune: StageSpec | None = None,
    self_train: SelfTrainSpec | None = None,
    soup: SoupSpec | None = None,
    distill: StageSpec | None = None,
    export: ExportSpec | None = None,
) -> Path:
    """Run the domain-adaptation recipe and write ``<out>/report.md``.

    Args:
        base_model: the starting encoder (folder, ``pkg:<module>``, or hub name).
        task_train: the task's training rows; also TAPT's text and the anchor of the corpus curation.
        task_val: validation rows: early stopping, the probe's regularisation, and the choice of the shipped model.
        task_test: test rows, read once for the report (the choice never looks at them).
        corpus: the unlabelled domain corpus (DAPT, vocabulary, curation); None when no stage needs it.
        corpus_text_column: the corpus's text column (JSONL/CSV/Parquet; plain text files have ``text``).
        text_column: the text column of the task files.
        text_pair_column: the second text of pair tasks.
        label_column: the label column of the task files.
        out: the pipeline's folder: each stage's runs and logs, ``state.json`` and the report.
        seeds: fine-tuning seeds; starting models are compared as mean ± std over them.
        metric: the metric that chooses (on validation) and that the report compares (``f1_macro`` or ``acc``).
        probe: the frozen-embedding logistic regression (a row of the report).
        select: curated DAPT data: the corpus documents nearest the task's texts.
        vocab: vocabulary extension settings.
        dapt: domain-adaptive pretraining on the corpus (or the curated corpus).
        tapt: task-adaptive pretraining on the task's own text (after DAPT when both run).
        finetune: the fine-tuning stage, run for the baseline and for each adapted model.
        self_train: self-training: the baseline labels corpus documents, and a fresh model learns from them too.
        soup: seed soups: each starting model's seed runs averaged into one model (no training), evaluated and
            compared like the others (needs two or more seeds).
        distill: distillation of the chosen model into a smaller student.
        export: deployment variants of the student.
    """
    from domainbert.adapt.stats import METRICS
    from domainbert.errors import DomainBertError
    from domainbert.pipeline import recipe
    from domainbert.pipeline.report import write_report
    from domainbert.pipeline.runner import Runner

    metric = metric.split("/")[-1]
    if metric not in METRICS:
        raise DomainBertError(f"pipeline: metric={metric!r}; expected one of {sorted(METRICS)}")
    task = TaskFiles(task_train, task_val, task_test, text_column, text_pair_column, label_column)
    runner = Runner(Path(out))
    seeds = seeds or [0]
    stages = {
        "select": select or SelectSpec(),
        "vocab": vocab or VocabSpec(),
        "dapt": dapt or StageSpec(),
        "tapt": tapt or StageSpec(enabled=False),
        "corpus_text_column": corpus_text_column,
    }
    probed = recipe.run_probe(runner, base_model, task, probe or ProbeSpec())
    starts = recipe.adapted_models(runner, base_model, corpus, task, stages)
    finetune = finetune or StageSpec()
    results = recipe.finetune_all(runner, starts, task, finetune, seeds, base_model)
    corpus_spec = {"path": corpus, "column": corpus_text_column, "base": base_model}
    recipe.self_train(runner, results, corpus_spec, task, self_train or SelfTrainSpec(), finetune)
    recipe.soups(runner, results, task, finetune, soup or SoupSpec(), base_model)
    chosen, why = recipe.choose(results, metric)
    teacher = recipe.best_run(results[chosen], metric)["hf"]
    student, deployed = recipe.distill_and_export(runner, teacher, task, distill or StageSpec(), export or ExportSpec())
    report = write_report(runner, results, probed, (chosen, why, teacher), student, deployed, metric, seeds)
    print(f"\nPipeline done. Shipped: {teacher} ({chosen}: {why}). Report: {report}")
    return report


def main(argv: list[str] | None = None) -> None:
    """``domainbert pipeline --config configs/pipeline/<model>_<data>.yaml``; ``--help`` lists every option."""
    from jsonargparse import ActionConfigFile, ArgumentParser, set_parsing_settings

    from domainbert.core.tool_cli import wants_docs

    argv = list(sys.argv[1:] if argv is None else argv)
    set_parsing_settings(docstring_parse_attribute_docstrings=wants_docs(argv))  # the specs' field docstrings
    parser = ArgumentParser(prog="domainbert pipeline", description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--config", action=ActionConfigFile)
    parser.add_function_arguments(pipeline, as_positional=False)
    cfg = parser.parse_args(argv)
    kwargs = parser.instantiate_classes(cfg).as_dict()
    kwargs.pop("config", None)
    pipeline(**kwargs)
