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

A frozen forward pass over many batches gains as much (about 15% of the probe's embedding time, the same numbers):
:func:`reusing_freed_memory` keeps freed memory for the batches of one such pass and hands it back at its end.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import platform
import sys
from collections.abc import Callable, Iterator

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
        libc = _glibc()
        _applied = bool(libc.mallopt(_M_MMAP_THRESHOLD, threshold)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, threshold))
    except (OSError, AttributeError, ctypes.ArgumentError):
        return False
    return _applied


@functools.cache
def _glibc() -> ctypes.CDLL:
    """glibc, loaded once per process.

    Raises:
        OSError: there is no ``libc.so.6`` (macOS, Windows, musl).
    """
    return ctypes.CDLL("libc.so.6")


def malloc_trim() -> Callable[[int], int] | None:
    """The C library's ``malloc_trim`` (glibc), which hands the heap's free memory back; None where there is none."""
    try:
        return _glibc().malloc_trim
    except (OSError, AttributeError):
        return None


@contextlib.contextmanager
def reusing_freed_memory(device: str = "cpu") -> Iterator[None]:
    """A pass of many CPU forward passes that reuses freed memory from batch to batch, and hands it back at its end.

    For such passes outside a training process (the probe's embeddings, the export's measurements): on entering,
    :func:`keep_freed_memory` (its settings stay for the rest of the process), so the batches stop faulting fresh
    pages in; on leaving, ``malloc_trim``, so the process does not hold the pass's peak memory afterwards. On another
    ``device``, or where the settings do not apply, nothing changes.
    """
    applied = device == "cpu" and keep_freed_memory()
    try:
        yield
    finally:
        trim = malloc_trim() if applied else None
        if trim is not None:
            trim(0)
