"""Writing each variant's folder under ``--out`` through its format, measuring it, and its report row.

A variant is a model (the one given, the teacher, the probe) in a format (:mod:`domainbert.deploy.formats`).
Every folder is written atomically (:func:`domainbert.core.files.atomic_dir`); :mod:`domainbert.deploy.load` reads
them back. The teacher and the probe are measured where they are: their folders under ``--out`` hold only a report.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn

from domainbert.core.files import atomic_dir, atomic_write_text
from domainbert.deploy.bench import EvalSet, measure, num_params, served_runner, task_metrics
from domainbert.deploy.folders import VARIANT_FILE
from domainbert.deploy.formats import ExportFormat, WriteContext, get
from domainbert.deploy.report import progress, variant_row, write_report


@dataclass
class Outputs:
    """What every variant of one export shares, and the report rows written so far.

    Args:
        out: the output folder.
        tokenizer: the model's tokenizer, saved in every folder.
        evalset: what every variant is measured on.
        common: the fields every row carries (examples, data, threads, max_length).
        options: the formats' options (``int8_backend``, ``int8_per_channel``, ``onnx_opset``, ``onnx_fuse``,
            ``threads``): :attr:`~domainbert.deploy.formats.WriteContext.options`.
        val_batches: labelled validation batches (``--val``): each row's ``val_accuracy`` and ``val_f1_macro``.
        label_names: the labels' names in id order, kept with the rows' validation predictions.
    """

    out: Path
    tokenizer: Any
    evalset: EvalSet
    common: dict
    options: dict = field(default_factory=dict)
    val_batches: list[dict] | None = None
    label_names: list[str] | None = None
    rows: list[dict] = field(default_factory=list)

    def context(self) -> WriteContext:
        """A fresh write context for one model's formats (its ``made`` files start empty)."""
        b32 = self.evalset.b32
        example = {k: v[:2] for k, v in b32[0].items() if k != "labels"}
        check = {k: v[:3, : max(2, v.shape[1] - 1)] for k, v in b32[-1].items() if k != "labels"}
        return WriteContext(example=example, probe=b32[0], check=check, options=self.options)

    def measure(self, runner, known: dict | None = None) -> dict:
        """Latency, the task metric on ``--data`` (or ``known``), and on ``--val`` when given (``val_`` fields)."""
        measured = measure(runner, self.evalset, known)
        if self.val_batches and self.evalset.num_labels:
            scores = task_metrics(runner, self.val_batches, self.evalset.num_labels, self.label_names)
            measured.update({f"val_{k}": v for k, v in scores.items()})
        return measured

    def add(self, row: dict) -> dict:
        """Record a finished variant's row and print its line."""
        self.rows.append(row)
        print(progress(row))
        return row


def _metric_from(known: dict | None) -> dict:
    """The row's note on where its task metric came from, when a training stage's test pass gave it."""
    return {"metric_from": known["from"]} if known else {}


def _known(known: dict | None) -> dict | None:
    """The metrics of ``known`` (``{"from": file, metric: value...}``) without its note."""
    return {k: v for k, v in known.items() if k != "from"} if known else None


def write_variant(
    outs: Outputs,
    fmt: ExportFormat | str,
    model: nn.Module,
    name: str,
    role: str,
    ctx: WriteContext | None = None,
    extra: dict | None = None,
    known: dict | None = None,
) -> dict:
    """Write ``model`` in the format ``fmt`` to ``out/<name>``, measure it and record its row.

    Args:
        outs: the export's shared outputs.
        fmt: the format, or its name in the table.
        model: the float32 model.
        name: the folder's name, and the row's ``variant``.
        role: whose variant it is (the model's role, ``teacher``).
        ctx: the write context of ``model``'s formats (shared, so that a later format finds the files of earlier
            ones); None: a fresh one.
        extra: more report fields.
        known: the model's task metric from its own test pass (``{"from": file, ...}``), sparing a pass.
    """
    fmt = get(fmt) if isinstance(fmt, str) else fmt
    ctx = ctx or outs.context()
    with atomic_dir(outs.out / name, what=f"the {name} variant") as tmp:
        written = fmt.write(model, tmp, ctx)
        outs.tokenizer.save_pretrained(tmp)
        if written.info is not None:
            atomic_write_text(tmp / VARIANT_FILE, json.dumps({"variant": fmt.name, **written.info}) + "\n")
        runner = fmt.runner(written.model) if written.measure else None
        measured = outs.measure(runner, _known(known)) if runner is not None else {}
        fields = {"role": role, "format": fmt.name, **written.extra, **(extra or {}), **_metric_from(known)}
        row = variant_row(name, outs.out / name, tmp, num_params(model), measured, outs.common, fields)
        write_report(tmp, row)
    if written.file:
        ctx.made[fmt.name] = outs.out / name / written.file
    return outs.add(row)


def measured_in_place(
    outs: Outputs, name: str, role: str, path: str, model: nn.Module, known: dict | None = None
) -> dict:
    """``out/<name>/``: only the report of the model at ``path`` (the teacher, the probe), measured like the variants.

    ``known``: its task metric from its own test pass (:func:`~domainbert.deploy.bench.known_metrics` and ``from``,
    the file), which spares a pass over the rows.
    """
    measured = outs.measure(served_runner(model), _known(known))
    fields = {"role": role, "format": "fp32", **_metric_from(known)}
    row = variant_row(name, path, Path(path), num_params(model), measured, outs.common, fields)
    with atomic_dir(outs.out / name) as tmp:
        write_report(tmp, row)
    return outs.add(row)
