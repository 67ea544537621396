"""What the machine can do fast: the default training precision."""

from __future__ import annotations

import functools
import logging

import torch

log = logging.getLogger(__name__)


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as ``/proc/cpuinfo`` lists them (empty where it cannot be read)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


def cpu_has_fast_bf16() -> bool:
    """True on CPUs with native bf16 matrix instructions (Intel AMX or AVX512-BF16).

    Without them (AVX2-only CPUs, many AMD EPYC parts), bf16 autocast on CPU is emulated and runs several times
    slower than fp32.
    """
    return bool(cpu_flags() & {"amx_bf16", "avx512_bf16"})


def cpu_has_amx() -> bool:
    """True on CPUs with Intel AMX bf16 tiles.

    There oneDNN multiplies bf16 matrices several times faster than with AVX512-BF16, so a bf16 step is bound less
    by its matrix products than by the work around them.
    """
    return {"amx_bf16", "amx_tile"} <= cpu_flags()


def auto_precision(accelerator: str | None = "auto") -> str:
    """``bf16-mixed`` where bf16 is native (a CUDA GPU with bf16, or a CPU with AMX/AVX512-BF16), else ``32-true``."""
    acc = (accelerator or "auto") if isinstance(accelerator, str) else "auto"
    if acc in ("auto", "gpu", "cuda") and torch.cuda.is_available():
        return "bf16-mixed" if torch.cuda.is_bf16_supported() else "16-mixed"
    return "bf16-mixed" if cpu_has_fast_bf16() else "32-true"
