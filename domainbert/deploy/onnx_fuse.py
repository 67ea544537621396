"""Fuse an exported encoder's ONNX graph into onnxruntime's transformer kernels (onnxscript's rewriter).

``torch.onnx.export(dynamo=True)`` writes attention, LayerNorm and GELU as dozens of small ops each. onnxruntime
has one CPU kernel for each: ``MultiHeadAttention``, ``SkipLayerNormalization`` (residual add + LayerNorm) and
``BiasGelu``. The rewrite runs onnxscript's ORT fusion rules, the ones ``onnxscript.rewriter.ort_fusions.
optimize_for_ort`` runs, except the last step that packs Q, K and V into one ``Attention`` op: onnxruntime's
``quantize_dynamic`` cannot quantize a packed op that also takes a mask as an attention bias, so packing would
leave the largest projections in fp32 in ``onnx_int8/``. Kept separate, they are quantized like every other
MatMul, and the fp32 graph runs as fast or faster.

Patterns that do not match (another architecture, another exporter) are left as they are: the graph stays
correct, only slower. The export checks the fused graph's logits against PyTorch's either way.
"""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(__name__)


def _fusions() -> list:
    """The fusion passes, in onnxscript's order (each ``f(model) -> count``); empty without onnxscript."""
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
    except ImportError:
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
        How many of each fused op the graph now holds (``{}``: onnxscript is missing, or nothing matched).
    """
    fusions = _fusions()
    if not fusions:
        log.warning("onnxscript is not installed: the ONNX graph is left unfused (slower, as correct)")
        return {}
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
        return {}
    data = path.with_name(path.name + ".data")
    ir.save(model, str(path), external_data=data.name if data.exists() else None)
    return fused_ops(path)


def fused_ops(path: Path) -> dict[str, int]:
    """How many of each onnxruntime op (domain ``com.microsoft``: fused and quantized kernels) ``path`` holds."""
    import onnx

    counts: dict[str, int] = {}
    for node in onnx.load(str(path), load_external_data=False).graph.node:
        if node.domain == "com.microsoft":
            counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return counts
