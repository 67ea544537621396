"""ONNX: export a classifier's logits, run an ONNX file (onnxruntime, or the ONNX reference evaluator), quantize it.

Nothing here unpickles anything: an ONNX file is a protobuf.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from torch import nn

from domainbert.core.families import max_positions
from domainbert.deploy.onnx_fuse import fuse_for_ort
from domainbert.deploy.quantize import quiet
from domainbert.errors import DomainBertError

#: How ``onnx_int8/`` is quantized, as its ``domainbert_variant.json`` says.
ONNX_INT8 = "onnxruntime quantize_dynamic QInt8"


def _inputs(input_ids, attention_mask, token_type_ids=None) -> dict[str, torch.Tensor]:
    """The keyword arguments of a BERT-family forward (``token_type_ids`` only when given)."""
    batch = {"input_ids": input_ids, "attention_mask": attention_mask}
    if token_type_ids is not None:
        batch["token_type_ids"] = token_type_ids
    return batch


class _LogitsOf(nn.Module):
    """A ``transformers`` model as a function of its input tensors to its logits: what the exporter traces."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, token_type_ids=None):
        return self.model(**_inputs(input_ids, attention_mask, token_type_ids)).logits


def export_onnx(
    model: nn.Module, path: Path, example: dict, opset: int | None = None, fuse: bool = True
) -> dict[str, int]:
    """Export ``model``'s logits to ONNX with ``torch.onnx.export(dynamo=True)``; batch and length are dynamic.

    Args:
        model: a float32 ``transformers`` model in eval mode.
        path: the ``.onnx`` file to write.
        example: an example batch (input tensors only); its keys become the ONNX inputs.
        opset: ONNX opset (default: the exporter's).
        fuse: rewrite attention, residual LayerNorm and GELU into onnxruntime's fused kernels
            (``deploy.onnx_fuse``).

    Returns:
        The fused ops in the graph, by type (``{}`` when ``fuse`` is false or nothing matched).
    """
    names = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in example]
    wrapper = _LogitsOf(model).eval()
    limit = max_positions(model.config, default=512)
    batch_dim = torch.export.Dim("batch", min=1, max=4096)
    seq_dim = torch.export.Dim("sequence", min=1, max=limit)
    args = tuple(example[k] for k in names)
    kw: dict[str, Any] = {"dynamo": True, "input_names": names, "output_names": ["logits"], "verbose": False}
    kw["dynamic_shapes"] = {k: {0: batch_dim, 1: seq_dim} for k in names}
    if opset is not None:
        kw["opset_version"] = opset
    for name in ("onnx_ir", "onnxscript", "torch.onnx"):  # every graph rewrite, and torchvision ops it skips
        logging.getLogger(name).setLevel(logging.ERROR)
    with quiet(), _silence_stdout():
        torch.onnx.export(wrapper, args, str(path), **kw)
        return fuse_for_ort(path) if fuse else {}


@contextlib.contextmanager
def _silence_stdout():
    """The ONNX exporter prints its progress; keep the command's own output readable."""
    with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
        yield


@contextlib.contextmanager
def _root_log_level(level: int):
    """Raise the root logger's level inside the block (onnxruntime's quantizer logs through the root logger)."""
    root = logging.getLogger()
    old = root.level
    root.setLevel(max(level, old))
    try:
        yield
    finally:
        root.setLevel(old)


def check_onnx(path: Path) -> None:
    """Run the ONNX checker on ``path`` (raises on an invalid model)."""
    import onnx

    onnx.checker.check_model(str(path))


def quantize_onnx_int8(source: Path, target: Path, per_channel: bool = True) -> None:
    """Quantize the ONNX file ``source`` to ``target`` with onnxruntime's ``quantize_dynamic`` (int8 weights).

    Args:
        source: the float32 ONNX file.
        target: the int8 ONNX file to write.
        per_channel: one weight scale per output channel of each MatMul/Gemm weight (more accurate); False: one
            scale per weight tensor.
    """
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # onnx's shape inference cannot type the outputs of onnxruntime's fused ops; every float here is fp32
    options = {"DefaultTensorType": onnx.TensorProto.FLOAT}
    with quiet(), _root_log_level(logging.WARNING):  # the quantizer logs a line per fused op's input at INFO
        quantize_dynamic(
            str(source), str(target), per_channel=per_channel, weight_type=QuantType.QInt8, extra_options=options
        )


class OnnxRunner:
    """Logits of an ONNX model through onnxruntime (or the ONNX reference evaluator)."""

    def __init__(self, path: Path, threads: int | None = None) -> None:
        """Open ``path``; raises ImportError when neither onnxruntime nor onnx is installed."""
        self.path = Path(path)
        try:
            import onnxruntime as ort
        except ImportError:
            from onnx.reference import ReferenceEvaluator

            self.engine = "onnx.reference"
            self.session = ReferenceEvaluator(str(path))
            self.inputs = list(self.session.input_names)
            return
        opts = ort.SessionOptions()
        if threads:
            opts.intra_op_num_threads = threads
        opts.log_severity_level = 3
        self.engine = f"onnxruntime {ort.__version__}"
        self.session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]

    def __call__(self, batch: dict) -> torch.Tensor:
        feed = {k: batch[k].numpy() for k in self.inputs}
        return torch.from_numpy(self.session.run(None, feed)[0]).float()


class OnnxModel(nn.Module):
    """An ONNX export behind the call interface of a ``transformers`` model: ``model(**batch).logits``."""

    def __init__(self, path: Path, config, threads: int | None = None) -> None:
        """Open ``path`` with onnxruntime (no pickles: an ONNX file is a protobuf)."""
        super().__init__()
        if not path.is_file():
            raise DomainBertError(f"{path}: no such ONNX file")
        self.config = config
        self.runner = OnnxRunner(path, threads)

    def forward(self, input_ids, attention_mask, token_type_ids=None):
        return SimpleNamespace(logits=self.runner(_inputs(input_ids, attention_mask, token_type_ids)))
