"""Parameter groups and the linear warm-up / decay schedule shared by every stage."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

import torch
from torch import nn

#: Parameters whose name matches are excluded from weight decay: biases and normalisation weights.
NO_DECAY = re.compile(r"(bias$|LayerNorm\.weight$|layer_norm\.weight$|layernorm\.weight$|norm\.weight$)", re.I)

_LAYER_RE = re.compile(r"\.(?:layer|layers|block|blocks)\.(\d+)\.")


def _layer_index(name: str, num_layers: int) -> int:
    """0 for embeddings, i+1 for encoder layer i, num_layers+1 for heads and everything above."""
    if "embeddings" in name:
        return 0
    m = _LAYER_RE.search(name)
    if m:
        return int(m.group(1)) + 1
    return num_layers + 1


def param_groups(
    named_params: Iterable[tuple[str, nn.Parameter]],
    learning_rate: float,
    weight_decay: float,
    layer_decay: float | None = None,
    num_layers: int = 0,
) -> list[dict]:
    """AdamW parameter groups: no decay on biases and LayerNorm; optional layer-wise LR decay.

    Args:
        named_params: ``module.named_parameters()``; frozen parameters are skipped.
        learning_rate: the peak learning rate of the top of the network.
        weight_decay: decoupled weight decay for the decayed group.
        layer_decay: if set, layer ``i`` (of ``num_layers``, embeddings being 0) gets
            ``learning_rate * layer_decay ** (num_layers + 1 - i)``.
        num_layers: the encoder depth, needed with ``layer_decay``.
    """
    groups: dict[tuple[int, bool], dict] = {}
    for name, p in named_params:
        if not p.requires_grad:
            continue
        decay = not NO_DECAY.search(name) and p.ndim > 1
        depth = _layer_index(name, num_layers) if layer_decay else num_layers + 1
        key = (depth, decay)
        if key not in groups:
            scale = layer_decay ** (num_layers + 1 - depth) if layer_decay else 1.0
            groups[key] = {
                "params": [],
                "names": [],
                "lr": learning_rate * scale,
                "weight_decay": weight_decay if decay else 0.0,
            }
        groups[key]["params"].append(p)
        groups[key]["names"].append(name)
    return [groups[k] for k in sorted(groups)]


def warmup_linear(total_steps: int, warmup_steps: int, offset: int = 0) -> Callable[[int], float]:
    """LR multiplier: 0 → 1 over ``warmup_steps``, then linearly to 0 at ``total_steps``.

    ``offset`` delays the schedule: steps before it return 0 (used while only a new head warms up).
    """
    total = max(1, total_steps - offset)

    def fn(step: int) -> float:
        step -= offset
        if step < 0:
            return 0.0
        if step < warmup_steps:
            return (step + 1) / max(1, warmup_steps)
        return max(0.0, (total - step) / max(1, total - warmup_steps))

    return fn


def build_optimizer(
    optimizer: Callable[[Iterable], torch.optim.Optimizer] | None, groups: list[dict], fused: bool = True
) -> torch.optim.Optimizer:
    """Instantiate the injected optimizer (AdamW when None) over ``groups``; per-group lr wins.

    The default AdamW is PyTorch's fused kernel when ``fused`` and every parameter is a float tensor on the CPU or
    a CUDA GPU: one pass over each tensor instead of a dozen ``foreach`` ops (on a 2-core AMD EPYC, 13 ms against
    93 ms per step for all-MiniLM-L6-v2's 22.7 M parameters).
    """
    clean = [{k: v for k, v in g.items() if k != "names"} for g in groups]
    if optimizer is None:
        use_fused = fused and fused_ok(clean)
        opt = torch.optim.AdamW(clean, lr=clean[0]["lr"] if clean else 1e-3, fused=use_fused or None)
        opt.register_load_state_dict_pre_hook(_keep_kernel)
        return opt
    return optimizer(clean)


def _keep_kernel(optimizer: torch.optim.Optimizer, state_dict: dict) -> dict:
    """``load_state_dict`` pre-hook: a checkpoint's groups take this optimizer's kernel (``fused``, ``foreach``).

    A checkpoint saved before the default turned fused would otherwise switch a resumed run back to ``foreach``
    while the optimizer still tells a gradient scaler that it unscales by itself. The checkpoint is not changed.
    """
    kernel = [{k: g[k] for k in ("fused", "foreach") if k in g} for g in optimizer.param_groups]
    saved = state_dict.get("param_groups", [])
    groups = [{**g, **kernel[i]} if i < len(kernel) else g for i, g in enumerate(saved)]
    return {**state_dict, "param_groups": groups}


def fused_ok(groups: list[dict]) -> bool:
    """True when every parameter in ``groups`` is a floating-point tensor, all on the CPU or all on CUDA."""
    params = [p for g in groups for p in g["params"]]
    kinds = {p.device.type for p in params}
    return kinds in ({"cpu"}, {"cuda"}) and all(p.is_floating_point() for p in params)
