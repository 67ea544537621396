"""``domainbert pipeline``: a domain corpus and a labelled task in, the best model that validation supports out.

    domainbert pipeline --config configs/pipeline/minilm_debian.yaml

A new domain needs only its paths (``base_model``, ``corpus``, ``task_train``, ``task_val``, ``task_test`` and
the column names); every stage has a built-in config. Stages, each a real ``domainbert`` run with its log in
``<out>/<stage>/log.txt`` (training stages in a process of their own, tool stages in the pipeline's: ``isolate``):
the frozen-embedding probe → the start strategies, each making a starting model (corpus curation, vocabulary
extension, DAPT, TAPT, contrastive; :mod:`domainbert.pipeline.strategies`) → fine-tuning from the base model (the
baseline) and from each starting model over the seeds → the after strategies, acting on the fine-tuned runs
(self-training, seed soups) → the choice by validation → distillation → export.
``<out>/state.json`` records the finished stages: a rerun skips them. ``<out>/report.md`` sets out what each
candidate bought, with paired bootstrap intervals and the minutes it cost.

``command`` holds the command: its options, :func:`~domainbert.pipeline.command.pipeline` (the recipe, from
Python) and :func:`~domainbert.pipeline.command.main`; this package re-exports them and the stage settings
(:mod:`~domainbert.pipeline.specs`).
"""

from __future__ import annotations

from domainbert.pipeline import strategies
from domainbert.pipeline.command import build_parser, check, main, pipeline
from domainbert.pipeline.specs import (
    DaptSpec,
    DeploySpec,
    DistillSpec,
    ExportSpec,
    FinetuneSpec,
    PretrainSpec,
    ProbeSpec,
    SelectSpec,
    SelfTrainSpec,
    SoupSpec,
    StageSpec,
    TaskFiles,
    VocabSpec,
    WatchSpec,
)

__all__ = [
    "DaptSpec",
    "DeploySpec",
    "ExportSpec",
    "FinetuneSpec",
    "PretrainSpec",
    "ProbeSpec",
    "SelectSpec",
    "SelfTrainSpec",
    "SoupSpec",
    "DistillSpec",
    "StageSpec",
    "TaskFiles",
    "VocabSpec",
    "WatchSpec",
    "build_parser",
    "check",
    "main",
    "pipeline",
]

# Here, not in ``command``: whatever first imports ``strategies`` runs this package first, so the names are reserved
# before any strategy is loaded, and ``strategies`` never imports ``command``.
strategies.reserve_options(pipeline)  # a new option of pipeline() is a name no strategy may take
