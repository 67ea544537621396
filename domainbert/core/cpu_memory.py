"""Freed memory kept for reuse while training on a CPU, so the large tensors of every step cost no page faults.

glibc's ``malloc`` serves an allocation above its mmap threshold (which it raises only up to 32 MiB) with a fresh
``mmap`` and returns it with ``munmap`` when freed, so the next allocation of that size faults in every page again.
A training step allocates such tensors every time: the word-embedding gradient of a 30,522-token vocabulary at
width 384 is 47 MB, and zeroing it took 12 ms from fresh pages against 1.3 ms from reused memory on the machine this
project trains on (a VM, where page faults are dear); that was a ninth of an all-MiniLM-L6-v2 step.

PyTorch's CPU performance-tuning guide recommends preloading jemalloc or tcmalloc for this. Where nothing is
preloaded, two ``mallopt`` settings give glibc the same habit: allocations up to :data:`THRESHOLD` come from the
heap, and freed memory up to it stays there for the next step (where nothing is preloaded they take effect;
under a preloaded allocator they are inert). The price is that a training process holds on to its peak memory
(``TrainingGuard`` still hands memory back after validation batches with ``malloc_trim``). Some older glibc
releases refuse a threshold above 32 MiB; there nothing changes. Nothing is computed differently.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys

#: allocations up to this many bytes come from the heap, and up to this much freed memory is kept for reuse
THRESHOLD = 1 << 30
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
_applied = False


def keep_freed_memory(threshold: int = THRESHOLD) -> bool:
    """Make glibc's ``malloc`` reuse freed memory instead of unmapping it, for this process; idempotent.

    ``DOMAINBERT_CPU_MALLOC=0`` leaves ``malloc`` as it is. Other C libraries (macOS, musl) are left alone too.

    Args:
        threshold: the allocation size up to which memory comes from, and goes back to, the heap.

    Returns:
        Whether the settings are in place (now or from an earlier call).
    """
    global _applied
    if _applied:
        return True
    if os.environ.get("DOMAINBERT_CPU_MALLOC", "1") == "0" or not sys.platform.startswith("linux"):
        return False
    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        _applied = bool(libc.mallopt(_M_MMAP_THRESHOLD, threshold)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, threshold))
    except (OSError, AttributeError, ctypes.ArgumentError):
        return False
    return _applied
