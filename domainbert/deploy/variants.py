"""Writing each variant's folder under ``--out``: its files, its ``domainbert_variant.json``, its checks and its report.

Every folder is written atomically (:func:`domainbert.core.files.atomic_dir`); :mod:`domainbert.deploy.load` reads
them back.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from domainbert.core.files import atomic_dir, atomic_write_text
from domainbert.core.hf import write_modeling_file
from domainbert.core.quiet import quiet_transformers
from domainbert.deploy.bench import EvalSet, TorchRunner, measure, num_params
from domainbert.deploy.load import INT8_WEIGHTS, VARIANT_FILE
from domainbert.deploy.onnx_export import ONNX_INT8, OnnxRunner, check_onnx, export_onnx, quantize_onnx_int8
from domainbert.deploy.onnx_fuse import fused_ops
from domainbert.deploy.quantize import quantize_int8
from domainbert.deploy.report import progress, variant_row, write_report
from domainbert.errors import DomainBertError

#: The largest difference between the ONNX and the PyTorch logits that passes the check.
ONNX_TOLERANCE = 1e-3


@dataclass
class Outputs:
    """What every variant of one export shares, and the report rows written so far.

    Args:
        out: the output folder.
        tokenizer: the model's tokenizer, saved in every folder.
        evalset: what every variant is measured on.
        common: the fields every row carries (examples, data, threads, max_length).
        threads: CPU threads for onnxruntime (None: its default).
        opset: ONNX opset (None: the exporter's).
        fuse: fuse the ONNX graphs into onnxruntime's transformer kernels (``deploy.onnx_fuse``).
    """

    out: Path
    tokenizer: Any
    evalset: EvalSet
    common: dict
    threads: int | None = None
    opset: int | None = None
    fuse: bool = True
    rows: list[dict] = field(default_factory=list)

    def save_files(self, folder: Path, config=None, info: dict | None = None) -> None:
        """The tokenizer, and the config and ``domainbert_variant.json`` when given, into ``folder``."""
        self.tokenizer.save_pretrained(folder)
        if config is not None:
            config.save_pretrained(folder)
        if info is not None:
            atomic_write_text(folder / VARIANT_FILE, json.dumps(info) + "\n")

    def report(self, name: str, folder: Path, params: int, measured: dict, extra: dict | None = None) -> dict:
        """The row of the variant ``name`` being written in ``folder``; its ``report.json``/``report.md`` there."""
        row = variant_row(name, self.out / name, folder, params, measured, self.common, extra)
        write_report(folder, row)
        return row

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


def teacher_variant(outs: Outputs, path: str, model: nn.Module, known: dict | None = None) -> dict:
    """``teacher/``: only the report of the teacher at ``path``, measured like the variants.

    ``known``: its task metric from its own test pass (:func:`~domainbert.deploy.bench.known_metrics` and ``from``,
    the file), which spares a pass over the rows.
    """
    measured = measure(TorchRunner(model), outs.evalset, _known(known))
    row = variant_row("teacher", path, Path(path), num_params(model), measured, outs.common, _metric_from(known))
    with atomic_dir(outs.out / "teacher") as tmp:
        write_report(tmp, row)
    return outs.add(row)


def hf_variant(
    outs: Outputs, name: str, model: nn.Module, bf16: bool = False, extra: dict | None = None, known: dict | None = None
) -> dict:
    """A Hugging Face folder (``student/``, ``pruned/``, ``bf16/``); ``bf16`` runs it under CPU bf16 autocast.

    ``known``: the model's task metric from its own test pass, as in :func:`teacher_variant`.
    """
    with atomic_dir(outs.out / name) as tmp:
        with quiet_transformers():
            model.save_pretrained(tmp)
        write_modeling_file(model, tmp)
        outs.save_files(tmp, info={"variant": "bf16"} if bf16 else None)
        measured = measure(TorchRunner(model, bf16=bf16), outs.evalset, _known(known))
        row = outs.report(name, tmp, num_params(model), measured, {**(extra or {}), **_metric_from(known)})
    return outs.add(row)


def int8_variant(outs: Outputs, model: nn.Module, backend: str, per_channel: bool = True) -> dict:
    """``int8/``: dynamic int8 quantization of ``model``'s Linear layers, as a state dict for PyTorch."""
    q, info = quantize_int8(model, backend, probe=outs.evalset.b32[0], per_channel=per_channel)
    extra = {"int8_backend": info["backend"], "int8_per_channel": info["per_channel"]}
    if "probe_ms" in info:
        extra["int8_backend_probe_ms"] = info["probe_ms"]
    with atomic_dir(outs.out / "int8") as tmp:
        torch.save(q.state_dict(), tmp / INT8_WEIGHTS)
        outs.save_files(tmp, model.config, {"variant": "int8", **info})
        row = outs.report("int8", tmp, num_params(model), measure(TorchRunner(q), outs.evalset), extra)
    return outs.add(row)


def _example(evalset: EvalSet) -> dict:
    """Two rows of the first batch-32 batch: the example input of the ONNX export."""
    return {k: v[:2] for k, v in evalset.b32[0].items() if k != "labels"}


def onnx_variant(outs: Outputs, model: nn.Module) -> dict:
    """``onnx/``: the fp32 ONNX export, checked against PyTorch on a batch shape it was not exported with."""
    check = {k: v[:3, : max(2, v.shape[1] - 1)] for k, v in outs.evalset.b32[-1].items() if k != "labels"}
    with atomic_dir(outs.out / "onnx") as tmp:
        fused = export_onnx(model, tmp / "model.onnx", _example(outs.evalset), outs.opset, outs.fuse)
        outs.save_files(tmp, model.config, {"variant": "onnx", "file": "model.onnx", "fused": fused})
        check_onnx(tmp / "model.onnx")
        fields = {**_checked_and_measured(outs, model, tmp / "model.onnx", check), "fused": fused}
        row = outs.report("onnx", tmp, num_params(model), {}, fields)
    return outs.add(row)


def _checked_and_measured(outs: Outputs, model: nn.Module, path: Path, batch: dict) -> dict:
    """The ONNX check's fields (engine, largest difference from PyTorch) and, under onnxruntime, the measurements."""
    try:
        runner = OnnxRunner(path, outs.threads)
    except ImportError:
        return {"check": "skipped: neither onnxruntime nor onnx is installed"}
    diff = float((runner(batch) - TorchRunner(model)(batch)).abs().max())
    if diff >= ONNX_TOLERANCE:
        raise DomainBertError(f"the ONNX model's logits differ from PyTorch's by {diff:.2e}")
    fields = {"engine": runner.engine, "max_abs_diff_vs_torch": diff, "check": "ok"}
    if runner.engine.startswith("onnxruntime"):
        fields.update(measure(runner, outs.evalset))
    return fields


def onnx_int8_variant(outs: Outputs, model: nn.Module, fp32: Path | None = None, per_channel: bool = True) -> dict:
    """``onnx_int8/``: onnxruntime's dynamic int8 quantization of the fp32 ONNX export ``fp32`` (exported if None)."""
    with contextlib.ExitStack() as stack:
        if fp32 is None:
            scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=".onnx-fp32-", dir=outs.out)))
            fp32 = scratch / "model.onnx"
            export_onnx(model, fp32, _example(outs.evalset), outs.opset, outs.fuse)
        with atomic_dir(outs.out / "onnx_int8", what="the int8 ONNX variant") as tmp:
            quantize_onnx_int8(fp32, tmp / "model.onnx", per_channel=per_channel)
            fused = fused_ops(tmp / "model.onnx")
            meta = {"variant": "onnx_int8", "file": "model.onnx", "quantization": ONNX_INT8, "per_channel": per_channel}
            outs.save_files(tmp, model.config, {**meta, "fused": fused})
            runner = OnnxRunner(tmp / "model.onnx", outs.threads)
            measured = measure(runner, outs.evalset)
            extra = {"engine": runner.engine, "int8_per_channel": per_channel, "fused": fused}
            row = outs.report("onnx_int8", tmp, num_params(model), measured, extra)
    return outs.add(row)
