"""Attention for bf16 training on a CPU: the eager kernels while a model trains, PyTorch's SDPA while it evaluates.

On a CPU under bf16 autocast, the backward pass of PyTorch's fused attention kernel
(``_scaled_dot_product_flash_attention_for_cpu_backward``) costs about five times its forward and a quarter of a
masked-LM step; transformers' eager attention (two batched matmuls and a softmax) trains faster there, while SDPA's
forward stays the faster one to evaluate and serve with. In fp32 the two train at the same speed. The figures are
on the speed benchmark page (``docs/benchmarks/speed.md``).

:class:`domainbert.modules.base.HFModule` asks :func:`switchable` at the start of a fit and then calls
:func:`attention_for` from ``train(mode)``: while the trainer runs bf16-mixed on the CPU, a model that uses ``sdpa``
switches to ``eager`` for training and back for evaluation, and ends the fit on ``sdpa``; any other model, precision
or device is left alone (a model put on ``eager`` to return attention maps stays on it).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from domainbert.core.compat import attn_implementation

#: the implementation each side uses where the switch applies
TRAIN, EVAL = "eager", "sdpa"


def bf16_on_cpu(trainer: Any) -> bool:
    """Whether ``trainer`` runs bf16-mixed autocast on the CPU (where the switch pays)."""
    from lightning.pytorch.plugins.precision import MixedPrecision

    plugin = trainer.precision_plugin
    return (
        trainer.strategy.root_device.type == "cpu"
        and isinstance(plugin, MixedPrecision)
        and str(plugin.precision).startswith("bf16")
    )


def switchable(model: nn.Module, trainer: Any) -> bool:
    """Whether ``model`` should switch: ``trainer`` runs bf16-mixed on the CPU and the model attends through SDPA.

    A model on any other implementation (``eager`` to return attention maps, a family without SDPA) is left alone.
    """
    return bf16_on_cpu(trainer) and attn_implementation(_base(model).config) == EVAL


def attention_for(model: nn.Module, training: bool) -> None:
    """Put ``model`` (a ``transformers`` model, or a peft wrapper of one) on the faster attention for the phase.

    Call it only for a model that :func:`switchable` accepted.

    Example:
        >>> from transformers import BertConfig, BertModel
        >>> model = BertModel(BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        ...                              intermediate_size=64, vocab_size=99))
        >>> attention_for(model, training=True); model.config._attn_implementation
        'eager'
        >>> attention_for(model, training=False); model.config._attn_implementation
        'sdpa'
    """
    base = _base(model)
    wanted = TRAIN if training else EVAL
    if attn_implementation(base.config) != wanted:
        base.set_attn_implementation(wanted)


def _base(model: nn.Module) -> nn.Module:
    """The ``transformers`` model inside a peft wrapper, else ``model``."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model
