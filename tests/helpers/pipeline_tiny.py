"""The tiny pipeline the pipeline tests share: tiny model, fixture task, baselines only unless a stage is given."""

from __future__ import annotations

from pathlib import Path

from domainbert.pipeline import FinetuneSpec, ProbeSpec, StageSpec, pipeline

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


#: A gate always open (probe scores lie in [0, 1]): the fixture task's probe scores 1.0 on the tiny base model, so no
#: pretraining can beat it, and a test of a stage's wiring must open the gate to fine-tune its model.
OPEN_GATE = {"margin": -1.0}


def planted_strategy(name: str = "planted"):
    """A start strategy (for tests) that offers a model planted to fine-tune worse than the base model.

    Its model is the base model with every input embedding (word, position, token type) set to zero, so every token
    of every text has the same hidden states: the encoder sees no text, and no head can tell the classes apart.
    """
    from dataclasses import dataclass

    from domainbert.pipeline.strategies.base import Candidate, Strategy

    @dataclass
    class PlantedSpec:
        enabled: bool = True

    class Planted(Strategy):
        """Planted: the base model blinded (zero input embeddings), a branch bound to lose."""

        settings = PlantedSpec

        def run(self, ctx, settings):
            folder = ctx.runner.out / self.name / "hf"
            return [Candidate(self.name, self.name, model=blinded(ctx.base_model, folder))]

    Planted.name = name
    return Planted()


def blinded(model: str, folder: Path) -> str:
    """Copy the checkpoint ``model`` to ``folder`` with its input embeddings zeroed; the folder."""
    import shutil

    from safetensors.torch import load_file, save_file

    shutil.copytree(model, folder, dirs_exist_ok=True)
    weights = load_file(str(folder / "model.safetensors"))
    for key, value in weights.items():
        if ".embeddings." in key and key.endswith("embeddings.weight"):
            value.zero_()
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return str(folder)


def refused_pipeline(tmp_path: Path, **kwargs) -> None:
    """``pipeline`` on the fixture files with a base model that is never loaded: for checks that refuse first.

    Args:
        tmp_path: the test's folder (the pipeline's ``out`` is ``<tmp_path>/p``).
        **kwargs: ``pipeline`` arguments that win over these.
    """
    base = dict(
        base_model="never-loaded",
        corpus=str(FIX / "corpus.txt"),
        task_train=str(FIX / "cls_train.jsonl"),
        task_val=str(FIX / "cls_val.jsonl"),
        task_test=str(FIX / "cls_test.jsonl"),
        out=str(tmp_path / "p"),
    )
    pipeline(**{**base, **kwargs})


def bare_context(runner=None, task=None, seeds=(0,), metric: str = "f1_macro", **settings):
    """A pipeline ``Context`` with every installed strategy, the baseline entered, and nothing run.

    Args:
        runner: its ``Runner`` (None where no stage runs).
        task: its ``TaskFiles`` (default ``t.jsonl``/``v.jsonl``, columns at their defaults).
        seeds: the fine-tuning seeds.
        metric: the choosing metric.
        **settings: strategy settings by name (``dapt=PretrainSpec(...)``); the rest at their defaults.
    """
    from domainbert.pipeline import strategies
    from domainbert.pipeline.specs import TaskFiles
    from domainbert.pipeline.strategies.base import BASELINE, Candidate, Context

    loaded = strategies.load()
    ctx = Context(
        runner=runner,
        base_model="base",
        task=task or TaskFiles("t.jsonl", "v.jsonl"),
        corpus="c.txt",
        corpus_text_column="text",
        seeds=list(seeds),
        metric=metric,
        finetune=FinetuneSpec(),
        strategies=loaded,
        settings=strategies.settings_of(loaded, settings),
    )
    ctx.add(BASELINE, [Candidate(BASELINE, BASELINE, model="base", adapted=False)])
    return ctx
