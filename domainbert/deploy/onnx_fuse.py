"""Fuse an exported encoder's ONNX graph into onnxruntime's transformer kernels (onnxscript's rewriter).

``torch.onnx.export(dynamo=True)`` writes attention, LayerNorm and GELU as dozens of small ops each. onnxruntime
has one CPU kernel for each: ``MultiHeadAttention``, ``SkipLayerNormalization`` (residual add + LayerNorm) and
``BiasGelu``. The rewrite runs the transformer fusions of onnxscript's ``ort_fusions.fuse_xformers`` that an
encoder's graph can match (no rotary embeddings, RMSNorm or grouped-query attention), in its order, except
``fuse_attention``, which packs Q, K and V into one ``Attention`` op: onnxruntime's ``quantize_dynamic`` cannot
quantize a packed op that also takes a mask as an attention bias, so packing would leave the largest projections
in fp32 in ``onnx_int8/``. Kept separate, they are quantized like every other MatMul, and the fp32 graph runs as
fast or faster (docs/benchmarks/deployment.md). ``optimize_for_ort``'s other rewrites (Gemm to MatMul,
FusedMatMul, softmax) are left to onnxruntime's own graph optimizer, which runs when a session opens.

The fused ops exist only in onnxruntime (domain ``com.microsoft``), so nothing is fused without onnxruntime.
Patterns that do not match (another architecture, another exporter) are left as they are, and a rewrite that
fails or leaves a half-fused op keeps the exporter's graph: slower, as correct. The export checks the logits of
whatever graph it keeps against PyTorch's.
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

log = logging.getLogger(__name__)


def _fusions() -> list:
    """The fusion passes, in onnxscript's order (each ``f(model) -> count``); empty where they cannot run."""
    if importlib.util.find_spec("onnxruntime") is None:
        log.warning("onnxruntime is not installed: the ONNX graph is left unfused (its fused ops need onnxruntime)")
        return []
    if importlib.util.find_spec("onnxscript") is None:
        log.warning("onnxscript is not installed: the ONNX graph is left unfused (slower, as correct)")
        return []
    try:
        from onnxscript.rewriter.ort_fusions.bias_gelu import fuse_bias_gelu
        from onnxscript.rewriter.ort_fusions.erfgelu import fuse_erfgelu
        from onnxscript.rewriter.ort_fusions.gelu import fuse_gelu
        from onnxscript.rewriter.ort_fusions.mha import fuse_mha1, fuse_mha2
        from onnxscript.rewriter.ort_fusions.mha_bias import fuse_mha_bias
        from onnxscript.rewriter.ort_fusions.mha_scale import fuse_mha_scale
        from onnxscript.rewriter.ort_fusions.sdpa import fuse_sdpa
        from onnxscript.rewriter.ort_fusions.sdpa_via_mha import replace_sdpa_by_mha
        from onnxscript.rewriter.ort_fusions.skip_normalization import fuse_skip_layer_normalization
    except ImportError as err:  # a version of onnxscript whose fusion rules live elsewhere
        log.warning("onnxscript's ORT fusions could not be imported (%s): the ONNX graph is left unfused", err)
        return []
    return [
        fuse_erfgelu,
        fuse_skip_layer_normalization,
        lambda model: fuse_sdpa(model, apply_shape_inference=True),
        fuse_mha1,
        fuse_mha2,
        fuse_mha_scale,
        fuse_mha_bias,
        fuse_gelu,
        fuse_bias_gelu,
        replace_sdpa_by_mha,  # attention that matched no MHA pattern: onnxruntime's kernel all the same
    ]


def fuse_for_ort(path: Path) -> dict[str, int]:
    """Rewrite the ONNX file ``path`` in place with onnxruntime's fused transformer ops.

    Args:
        path: an ONNX file (its weights inline or in ``<name>.data`` beside it, as the exporter wrote them).

    Returns:
        How many of each fused op the graph now holds (``{}``: onnxruntime or onnxscript is missing, the
        rewrite failed, or nothing matched; the file is then the exporter's, untouched).
    """
    fusions = _fusions()
    if not fusions:
        return {}
    try:
        model = _fused(path, fusions)
    except Exception as err:  # noqa: BLE001 - any failure of the rewriter keeps the exporter's (valid) graph
        log.warning(
            "ONNX fusion failed (%s: %s): the graph is left unfused (slower, as correct)", type(err).__name__, err
        )
        return {}
    if model is None:
        return {}
    import onnx_ir as ir

    data = path.with_name(path.name + ".data")
    ir.save(model, str(path), external_data=data.name if data.exists() else None)
    return fused_ops(path)


def _fused(path: Path, fusions: list):
    """The graph of ``path`` with ``fusions`` applied (an ``onnx_ir`` model).

    None when a fusion left a half-fused op that no runtime has.
    """
    import onnx_ir as ir
    from onnx_ir.passes import common as passes
    from onnxscript.optimizer import optimize
    from onnxscript.rewriter.ort_fusions import shape_optimization

    model = ir.external_data.load_to_model(ir.load(str(path)))
    passes.ShapeInferencePass()(model)
    optimize(model)
    shape_optimization.rules.apply_to_model(model)  # lets the attention patterns see through shape arithmetic
    optimize(model)
    passes.CommonSubexpressionEliminationPass()(model)
    for fuse in fusions:
        fuse(model)
    optimize(model)  # inline what no later fusion consumed, drop dead nodes
    passes.ShapeInferencePass()(model)
    leftover = sorted({n.op_type for n in model.graph if n.domain.startswith("ai.onnxruntime._fusion")})
    if leftover:  # a rule matched part of a pattern and left an op no runtime has: keep the exporter's graph
        log.warning("ONNX fusion left %s unresolved: the graph is left unfused (slower, as correct)", leftover)
        return None
    return model


def fused_ops(path: Path) -> dict[str, int]:
    """How many of each onnxruntime op (domain ``com.microsoft``: fused and quantized kernels) ``path`` holds."""
    import onnx

    counts: dict[str, int] = {}
    for node in onnx.load(str(path), load_external_data=False).graph.node:
        if node.domain == "com.microsoft":
            counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return counts
