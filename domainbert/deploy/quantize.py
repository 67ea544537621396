"""Lower-precision copies of a model for CPU inference: dynamic int8 (torchao or torch.ao) and bf16."""

from __future__ import annotations

import contextlib
import copy
import time
import warnings
from typing import Any, Literal

import torch
from torch import nn

from domainbert.deploy.bench import TorchRunner
from domainbert.errors import DomainBertError


@contextlib.contextmanager
def quiet():
    """Silence deprecation warnings (and torchao's import-time messages) inside the block."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _torchao_int8():
    """The quantize function and int8 dynamic-quantization config class of torchao; None without torchao."""
    try:
        with quiet():
            from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_
    except Exception:  # noqa: BLE001 - ImportError, or a torchao built for another torch
        return None
    return quantize_, Int8DynamicActivationInt8WeightConfig


def quantize_int8(
    model: nn.Module,
    backend: Literal["auto", "torchao", "torch"] = "auto",
    probe: dict | None = None,
    per_channel: bool = True,
) -> tuple[nn.Module, dict]:
    """A copy of ``model`` with dynamic int8 quantization of every ``nn.Linear`` (weights int8, activations per batch).

    Args:
        model: a float32 model in eval mode.
        backend: ``torchao`` (``Int8DynamicActivationInt8WeightConfig``), ``torch``
            (``torch.ao.quantization.quantize_dynamic``) or ``auto``: when torchao is installed, both are built
            and timed on ``probe`` and the faster one is kept (torchao's int8 kernels are fast on some CPUs and
            much slower than torch.ao's fbgemm kernels on others); without torchao, ``torch``.
        probe: a batch to time the two backends on (``auto`` only).
        per_channel: one weight scale per output channel (row) of each Linear, which keeps the task metric much
            closer to float32 than one scale per weight tensor. torch.ao: ``per_channel_dynamic_qconfig``
            (symmetric per-channel weights) when True, ``default_dynamic_qconfig`` (per-tensor) when False.
            torchao's ``Int8DynamicActivationInt8WeightConfig`` always scales weights per output channel (and
            activations per token), whatever this says.

    Returns:
        ``(quantized model, info)``; ``info["backend"]`` is the backend used, ``info["probe_ms"]`` the timings,
        ``info["per_channel"]`` whether the kept model's weights have per-output-channel scales.
    """
    if backend not in ("auto", "torchao", "torch"):
        raise DomainBertError(f"int8_backend={backend!r}: expected auto, torchao or torch")
    info: dict[str, Any] = {}
    tao = _torchao_int8() if backend in ("auto", "torchao") else None
    if backend == "torchao" and tao is None:
        raise DomainBertError("int8_backend=torchao: torchao is not installed (pip install torchao)")
    built: dict[str, nn.Module] = {}
    if tao is not None:
        quantize_, config_cls = tao
        q = copy.deepcopy(model).eval()
        with quiet():
            quantize_(q, config_cls())
        built["torchao"] = q
    if backend in ("auto", "torch"):
        with quiet():
            built["torch"] = torch.ao.quantization.quantize_dynamic(
                copy.deepcopy(model).eval(), {nn.Linear: _torch_qconfig(per_channel)}, dtype=torch.qint8
            )
    if len(built) > 1 and probe is not None:
        timings = {name: _probe_ms(q, probe) for name, q in built.items()}
        info["probe_ms"] = timings
        chosen = min(timings, key=timings.get)
    else:
        chosen = "torchao" if "torchao" in built else "torch"
    info["backend"] = chosen
    info["per_channel"] = per_channel or chosen == "torchao"
    return built[chosen].eval(), info


def _torch_qconfig(per_channel: bool):
    """torch.ao's dynamic int8 qconfig: per-output-channel symmetric weight scales, or one scale per tensor."""
    qconfigs = torch.ao.quantization
    return qconfigs.per_channel_dynamic_qconfig if per_channel else qconfigs.default_dynamic_qconfig


def _probe_ms(model: nn.Module, batch: dict) -> float:
    """Milliseconds of one pass of ``model`` over ``batch``, after one warm-up pass."""
    runner = TorchRunner(model)
    runner(batch)
    start = time.perf_counter()
    runner(batch)
    return round((time.perf_counter() - start) * 1000, 2)


def to_bf16(model: nn.Module) -> nn.Module:
    """A copy of ``model`` with bf16 weights, in eval mode, run in bf16 as it is (``TorchRunner(bf16=True)``)."""
    return copy.deepcopy(model).to(torch.bfloat16).eval()
