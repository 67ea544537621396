"""The tiny pipeline the pipeline tests share: tiny model, fixture task, baselines only unless a stage is given."""

from __future__ import annotations

from pathlib import Path

from domainbert.pipeline import ProbeSpec, StageSpec, pipeline

FIX = Path(__file__).resolve().parents[1] / "fixtures"


def tiny_pipeline(tiny_bert, out: Path, seeds: list[int], **stages) -> Path:
    """Run ``pipeline`` on the fixture task with one fine-tuning epoch; probe, DAPT and distillation off.

    Every stage runs in the test's own process (``isolate="none"``): a process start costs 11-15 s a stage, and
    the one test of stages as processes is test_pipeline.py's ``test_stages_in_processes_of_their_own...``.

    Args:
        tiny_bert: the tiny checkpoint's folder.
        out: the pipeline's folder.
        seeds: the fine-tuning seeds.
        **stages: further ``pipeline`` arguments (``self_train=...``, ``soup=...``); they win over the defaults.

    Returns:
        The report's path.
    """
    kwargs = {
        "base_model": str(tiny_bert),
        "corpus": str(FIX / "corpus.txt"),
        "task_train": str(FIX / "cls_train.jsonl"),
        "task_val": str(FIX / "cls_val.jsonl"),
        "task_test": str(FIX / "cls_test.jsonl"),
        "out": str(out),
        "seeds": seeds,
        "isolate": "none",
        "probe": ProbeSpec(enabled=False),
        "dapt": StageSpec(enabled=False),
        "finetune": StageSpec("configs/finetune/tiny_classification.yaml", ["--trainer.max_epochs=1"]),
        "distill": StageSpec(enabled=False),
    }
    return pipeline(**{**kwargs, **stages})
