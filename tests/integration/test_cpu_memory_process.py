"""keep_freed_memory in a fresh process: a large CPU tensor comes from the heap instead of a fresh mmap."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's"
)

# Allocates a 64 MiB tensor before and after keep_freed_memory() and prints the bytes glibc had mmapped while each
# was alive (mallinfo2's hblkhd): a fresh process, since the settings hold for the rest of a process.
_PROBE = textwrap.dedent(
    """
    import ctypes, os, sys
    import torch
    from domainbert.core.cpu_memory import keep_freed_memory

    class Info(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in
                    ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                     "keepcost")]

    libc = ctypes.CDLL("libc.so.6")
    if not hasattr(libc, "mallinfo2"):  # glibc < 2.33
        print(0, 0, "False", "False"); sys.exit()
    libc.mallinfo2.restype = Info

    def mapped_while_alive():
        x = torch.empty(64 << 20, dtype=torch.uint8)
        mapped = libc.mallinfo2().hblkhd
        del x
        return mapped

    before = mapped_while_alive()
    applied = keep_freed_memory()
    print(before, mapped_while_alive(), applied, keep_freed_memory())
    """
)


def _probe(env_extra: dict[str, str]) -> list[str]:
    env = {**os.environ, **env_extra}
    done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, env=env, check=True)
    return done.stdout.split()


def test_large_tensors_come_from_the_heap_once_applied():
    before, after, applied, again = _probe({"DOMAINBERT_CPU_MALLOC": "1"})
    if applied != "True":
        pytest.skip("this glibc refuses a 1 GiB mmap threshold (older releases cap it at 32 MiB)")
    assert int(before) >= 64 << 20  # glibc's default: a fresh mmap for the 64 MiB tensor
    assert int(after) < 64 << 20  # now the heap's
    assert applied == again == "True"  # idempotent


def test_with_the_environment_variable_large_tensors_stay_mmapped():
    before, after, applied, _ = _probe({"DOMAINBERT_CPU_MALLOC": "0"})
    assert applied == "False"
    if int(before) == 0:
        pytest.skip("no mallinfo2 in this glibc")
    assert int(before) >= 64 << 20 and int(after) >= 64 << 20


# The resident memory (MiB) inside a pass that filled a 256 MiB tensor and freed it, and after leaving the pass.
_PASS = textwrap.dedent(
    """
    import os
    import torch
    from domainbert.core.cpu_memory import reusing_freed_memory

    def resident_mib():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") >> 20

    with reusing_freed_memory("cpu"):
        x = torch.ones(256 << 20, dtype=torch.uint8)
        del x
        inside = resident_mib()
    print(inside, resident_mib())
    """
)


def test_a_pass_keeps_freed_memory_while_it_runs_and_hands_it_back_after():
    env = {**os.environ, "DOMAINBERT_CPU_MALLOC": "1"}
    done = subprocess.run([sys.executable, "-c", _PASS], capture_output=True, text=True, env=env, check=True)
    inside, after = (int(v) for v in done.stdout.split())
    assert inside - after >= 200  # the freed 256 MiB stayed in the heap for the next batch, then went back
