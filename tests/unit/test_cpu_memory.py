"""keep_freed_memory: large CPU tensors come from, and go back to, the heap instead of fresh mmaps."""

from __future__ import annotations

import pytest

from domainbert.core import cpu_memory


def test_the_environment_variable_leaves_malloc_alone(monkeypatch):
    monkeypatch.setattr(cpu_memory, "_applied", False)
    monkeypatch.setenv("DOMAINBERT_CPU_MALLOC", "0")
    monkeypatch.setattr(cpu_memory.ctypes, "CDLL", lambda *a: pytest.fail("libc was called"))
    assert cpu_memory.keep_freed_memory() is False


def test_other_platforms_are_left_alone(monkeypatch):
    monkeypatch.setattr(cpu_memory, "_applied", False)
    monkeypatch.setattr(cpu_memory.sys, "platform", "darwin")
    assert cpu_memory.keep_freed_memory() is False
