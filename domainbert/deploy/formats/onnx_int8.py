"""``onnx_int8``: onnxruntime's dynamic int8 quantization of the fp32 ONNX graph, loaded without pickles.

It quantizes the ``onnx`` variant's graph when that was written for the same model in the same export, else an
fp32 export of its own made in a scratch folder.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from torch import nn

from domainbert.deploy.formats.int8 import INT8_OPTIONS
from domainbert.deploy.formats.interface import ExportFormat, WriteContext, Written, float32_activations
from domainbert.deploy.formats.onnx import ONNX_FILE, ONNX_OPTIONS, load_onnx, onnx_runner
from domainbert.deploy.onnx_export import ONNX_INT8, OnnxModel, export_onnx, quantize_onnx_int8
from domainbert.deploy.onnx_fuse import fused_ops


class OnnxInt8(
    ExportFormat,
    name="onnx_int8",
    option="int8",
    order=40,
    needs=("onnxruntime",),
    teacher=True,
    options={"int8_per_channel": INT8_OPTIONS["int8_per_channel"], **ONNX_OPTIONS},
):
    """Int8 weights (per output channel by default) in an ONNX graph, for onnxruntime.

    Options: int8's ``int8_per_channel`` and onnx's ``onnx_opset`` and ``onnx_fuse`` (its own fp32 graph's, made when
    no ``onnx`` variant was written for the model).
    """

    def write(self, model: nn.Module, folder: Path, ctx: WriteContext) -> Written:
        per_channel = self.option_value(ctx, "int8_per_channel")
        target = folder / ONNX_FILE
        if "onnx" in ctx.made:
            quantize_onnx_int8(ctx.made["onnx"], target, per_channel=per_channel)
        else:
            with tempfile.TemporaryDirectory(prefix=".onnx-fp32-", dir=folder.parent) as scratch:
                fp32 = Path(scratch) / ONNX_FILE
                opset, fuse = self.option_value(ctx, "onnx_opset"), self.option_value(ctx, "onnx_fuse")
                export_onnx(model, fp32, ctx.example, opset, fuse)
                quantize_onnx_int8(fp32, target, per_channel=per_channel)
        fused = fused_ops(target)
        float32_activations(model.config).save_pretrained(folder)
        graph = OnnxModel(target, model.config, ctx.options.get("threads"))
        info = {"file": ONNX_FILE, "quantization": ONNX_INT8, "per_channel": per_channel, "fused": fused}
        extra = {"engine": graph.runner.engine, "int8_per_channel": per_channel, "fused": fused}
        return Written(graph, info=info, extra=extra, file=ONNX_FILE)

    def load(self, folder: Path, config, info: dict, trust_pickle: bool = False) -> nn.Module:
        return load_onnx(folder, config, info)

    def runner(self, model: nn.Module):
        return onnx_runner(model)
