"""``onnx``: ``model.onnx`` from the standard exporter, checked against PyTorch, run by onnxruntime.

Batch and sequence axes are dynamic. Where onnxruntime is installed the graph is rewritten into its fused attention,
residual-LayerNorm and GELU kernels (``onnx_fuse``, :mod:`domainbert.deploy.onnx_fuse`). Nothing in the folder is
a pickle: an ONNX file is a protobuf.
"""

from __future__ import annotations

from pathlib import Path

from torch import nn

from domainbert.deploy.folders import plain_file
from domainbert.deploy.formats.interface import ExportFormat, WriteContext, Written, float32_activations
from domainbert.deploy.onnx_export import OnnxModel, check_onnx, export_onnx
from domainbert.errors import DomainBertError

#: The largest difference between the ONNX and the PyTorch logits that passes the check.
ONNX_TOLERANCE = 1e-3
#: The graph's file in an ONNX variant's folder.
ONNX_FILE = "model.onnx"


def load_onnx(folder: Path, config, info: dict) -> nn.Module:
    """The ONNX graph that ``info["file"]`` names in ``folder``, behind the call interface of a model."""
    return OnnxModel(folder / plain_file(info.get("file", ONNX_FILE), folder), config)


def onnx_runner(model: nn.Module):
    """The onnxruntime (or ONNX reference) runner inside an :class:`OnnxModel`."""
    return model.runner


def checked(model: nn.Module, path: Path, batch: dict, threads: int | None) -> tuple[OnnxModel | None, dict]:
    """The ONNX graph at ``path`` checked against ``model`` on ``batch``: ``(its model or None, report fields)``.

    None (and ``check: skipped``) when neither onnxruntime nor onnx is installed.

    Raises:
        DomainBertError: the logits differ from PyTorch's by :data:`ONNX_TOLERANCE` or more.
    """
    from domainbert.deploy.bench import TorchRunner

    try:
        graph = OnnxModel(path, model.config, threads)
    except ImportError:
        return None, {"check": "skipped: neither onnxruntime nor onnx is installed"}
    diff = float((graph.runner(batch) - TorchRunner(model)(batch)).abs().max())
    if diff >= ONNX_TOLERANCE:
        raise DomainBertError(f"the ONNX model's logits differ from PyTorch's by {diff:.2e}")
    return graph, {"engine": graph.runner.engine, "max_abs_diff_vs_torch": diff, "check": "ok"}


#: onnx's options: the opset (None: the exporter's) and the rewrite into onnxruntime's fused attention,
#: residual-LayerNorm and GELU kernels (needs onnxruntime and onnxscript; the graph then runs only in onnxruntime;
#: False: the exporter's portable graph)
ONNX_OPTIONS = {"onnx_opset": None, "onnx_fuse": True}


class Onnx(ExportFormat, name="onnx", option="onnx", order=30, options=ONNX_OPTIONS):
    """The fp32 ONNX graph (``torch.onnx.export(dynamo=True)``), fused for onnxruntime by default.

    Options (:data:`ONNX_OPTIONS`): ``onnx_opset`` and ``onnx_fuse``.
    """

    def write(self, model: nn.Module, folder: Path, ctx: WriteContext) -> Written:
        path = folder / ONNX_FILE
        opset, fuse = self.option_value(ctx, "onnx_opset"), self.option_value(ctx, "onnx_fuse")
        fused = export_onnx(model, path, ctx.example, opset, fuse)
        float32_activations(model.config).save_pretrained(folder)
        check_onnx(path)
        graph, fields = checked(model, path, ctx.check, ctx.options.get("threads"))
        measure = graph is not None and graph.runner.engine.startswith("onnxruntime")
        info = {"file": ONNX_FILE, "fused": fused}
        return Written(graph, info=info, extra={**fields, "fused": fused}, measure=measure, file=ONNX_FILE)

    def load(self, folder: Path, config, info: dict, trust_pickle: bool = False) -> nn.Module:
        return load_onnx(folder, config, info)

    def runner(self, model: nn.Module):
        return onnx_runner(model)
