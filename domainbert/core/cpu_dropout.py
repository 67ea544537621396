"""Dropout that costs little on a CPU: one 16-bit random draw per element, four to a 64-bit word.

PyTorch draws CPU dropout masks with ``bernoulli_``, which uses MKL's vectorised generator only on Intel CPUs and a
serial loop elsewhere (pytorch/pytorch#38558); on the AMD EPYC this project trains on, the 19 masks of one
all-MiniLM-L6-v2 step took about a fifth of the step. Here a mask is read from random 64-bit words, four 16-bit
fields each, so the generator runs a quarter as often: a drop probability ``p`` is kept to 1/65,536.
Attention probabilities are dropped the same way, by an attention function registered with ``transformers``'
``AttentionInterface`` (:data:`ATTENTION`) that computes attention eagerly while training on the CPU, and hands
everything else (evaluation, other devices) to ``sdpa``. Eagerly even without attention dropout: under bf16
autocast the backward of PyTorch's fused CPU attention kernel costs about five times its forward (a quarter of a
masked-LM step), where two matmuls and a softmax train faster (in fp32 too), while ``sdpa``'s forward is the faster
one to evaluate with (the speed benchmark page).

The masks come from the default CPU generator, so ``seed_everything`` fixes them and activation checkpointing
replays them; they differ from ``bernoulli_``'s, so a run differs from one without this by its dropout noise.
:func:`use_cpu_dropout` puts both into a module's models; nothing changes on other devices or in saved files.
"""

from __future__ import annotations

import torch
from torch import nn

#: the name of the attention function in ``transformers``' ``AttentionInterface`` (never saved in a config)
ATTENTION = "domainbert_cpu_dropout"
_FIELDS = 4  # 16-bit fields in one 64-bit random word


def keep_mask(shape: torch.Size | tuple[int, ...], p: float, device: torch.device | str = "cpu") -> torch.Tensor:
    """A boolean tensor of ``shape``, each element True with probability ``1 - p`` (to 1/65,536)."""
    n = 1
    for size in shape:
        n *= size
    if p >= 1.0:
        return torch.zeros(shape, dtype=torch.bool, device=device)
    words = torch.randint(-(2**63), 2**63 - 1, ((n + _FIELDS - 1) // _FIELDS,), dtype=torch.int64, device=device)
    fields = words.view(torch.int16)[:n]
    return (fields >= -32768 + round(p * 65536)).view(shape)


def cpu_dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """``nn.functional.dropout(x, p, training)``, its mask from :func:`keep_mask` on the CPU."""
    if not training or p == 0.0 or x.device.type != "cpu" or torch.compiler.is_compiling():
        # compiled graphs draw their own random numbers (inductor's randint cannot take the full int64 range)
        return nn.functional.dropout(x, p, training)
    if p == 1.0:
        return x * 0.0
    return x * keep_mask(x.shape, p) * (1.0 / (1.0 - p))


class CpuDropout(nn.Dropout):
    """``nn.Dropout`` whose CPU masks come from :func:`keep_mask`; the same module elsewhere."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.inplace or x.device.type != "cpu":
            return super().forward(x)
        return cpu_dropout(x, self.p, self.training)


def attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """``eager`` attention (:func:`cpu_dropout` for its dropout) while training on the CPU; ``sdpa`` otherwise.

    Causal attention (a decoder's, or a module that does not say), and attention with a position bias, a soft cap
    or a sliding window, always go to ``sdpa``, which knows how to apply them.

    ``attention_mask`` is ``sdpa``'s (boolean, True where a key is attended; None when nothing is padded), as the
    mask function registered under :data:`ATTENTION` is ``sdpa``'s. The weights returned beside the output are the
    kept probabilities, not rescaled by ``1 / (1 - dropout)``: the rescaling is applied to ``value``.
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    causal = kwargs.get("is_causal") or getattr(module, "is_causal", True)  # sdpa's reading of a missing flag
    extras = any(kwargs.get(k) is not None for k in ("position_bias", "softcap", "sliding_window"))
    cpu_training = module.training and query.device.type == "cpu"
    if causal or extras or not cpu_training or torch.compiler.is_compiling():  # see cpu_dropout on compiling
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    scaling = query.size(-1) ** -0.5 if scaling is None else scaling
    # the scales go on the (batch, heads, length, head width) operands, not the length x length scores
    scores = torch.matmul(query * scaling, key.transpose(2, 3))
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
        else:
            scores = scores + attention_mask
    # in the scores' precision: PyTorch's CPU softmax computes a bf16 input in float32 and rounds its output once,
    # the numbers ``eager``'s float32 softmax gives after ``.to(bf16)``, without a float32 copy of the scores (1.4x
    # faster forward and backward at 32 x 12 heads x 84 x 84)
    weights = nn.functional.softmax(scores, dim=-1)
    if dropout == 0.0:
        return torch.matmul(weights, value).transpose(1, 2).contiguous(), weights
    kept = weights * keep_mask(weights.shape, dropout)
    out = torch.matmul(kept, value * (1.0 / (1.0 - dropout) if dropout < 1.0 else 0.0))
    return out.transpose(1, 2).contiguous(), kept


def register() -> None:
    """Register :func:`attention` (with ``sdpa``'s mask) under :data:`ATTENTION` in ``transformers``; idempotent."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(ATTENTION, attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(ATTENTION, sdpa_mask)


register()  # a model switched to ATTENTION finds it in any process that imports this module


def use_cpu_dropout(module: nn.Module) -> int:
    """Put :class:`CpuDropout` and :func:`attention` into every model inside ``module``, in place.

    Every plain ``nn.Dropout`` becomes a :class:`CpuDropout` with the same probability and train/eval mode (a
    frozen teacher in eval mode keeps dropping nothing); every ``transformers``
    model that attends through ``sdpa`` attends through :data:`ATTENTION` (models on ``eager``, which a loss on
    attention maps asks for, keep it). Parameters, state dicts and saved configs are unchanged.

    Returns:
        How many dropout modules were replaced.
    """
    from transformers import PreTrainedModel

    from domainbert.core.compat import attn_implementation, can_set_attn_implementation

    swapped: dict[int, CpuDropout] = {}  # a dropout shared by two parents stays shared
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Dropout:
                if id(child) not in swapped:
                    swapped[id(child)] = CpuDropout(child.p, child.inplace).train(child.training)
                setattr(parent, name, swapped[id(child)])
    for sub in module.modules():
        config = getattr(sub, "config", None)
        if isinstance(sub, PreTrainedModel) and attn_implementation(config) == "sdpa":
            if can_set_attn_implementation(type(sub)):
                sub.set_attn_implementation(ATTENTION)
    return len(swapped)
