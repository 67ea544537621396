"""Pytest plugin: the unit tier's rule, enforced. A test under ``tests/unit`` runs no ``Trainer.fit`` and starts no
process.

Registered from tests/conftest.py (``pytest_plugins``). While a test whose file lies in a ``unit`` folder of a
``tests`` folder sets up, runs and tears down (its fixtures included, whatever their scope),
``lightning.pytorch.Trainer.fit`` and every way to start a process (``subprocess.Popen`` and so
``subprocess.run``, ``os.system``, ``os.fork``, ``os.posix_spawn``, ``multiprocessing``'s ``Process.start`` and its
helpers' ``spawnv_passfds``) are replaced by a call that fails the test, naming the rule and where the test belongs;
``DOMAINBERT_FORK=0`` keeps the pipeline from starting its stage server (:mod:`domainbert.pipeline.forks`). Tests
anywhere else are left alone. A process that a standard-library helper starts for itself
(``ctypes.util.find_library`` runs ``ldconfig``, ``platform`` runs ``uname``) is not the test's doing and is allowed.
tests/integration/test_tiers.py checks this plugin.
"""

from __future__ import annotations

import contextlib
import ctypes.util
import multiprocessing.process
import multiprocessing.util
import os
import platform
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

#: the rule, as the failure states it
RULE = "tests/unit runs no Trainer.fit and starts no subprocess"

#: the real classes, held here: a test may replace ``subprocess.Popen`` itself with a stand-in
_POPEN = subprocess.Popen
_PROCESS = multiprocessing.process.BaseProcess
_OS_CALLS = ("system", "fork", "forkpty", "posix_spawn", "posix_spawnp", "execv", "execve")
#: the standard-library modules whose own helper processes are allowed
_HELPERS = {os.path.abspath(m.__file__) for m in (ctypes.util, platform)}


def in_unit_tier(path: Path) -> bool:
    """Whether the test file ``path`` lies in a ``tests/unit`` folder (at any depth below it)."""
    return any(p.name == "unit" and p.parent.name == "tests" for p in Path(path).resolve().parents)


def _from_a_helper() -> bool:
    """Whether the current call comes from one of the standard-library helpers in :data:`_HELPERS`."""
    frame = sys._getframe(2)
    while frame is not None:
        if os.path.abspath(frame.f_code.co_filename) in _HELPERS:
            return True
        frame = frame.f_back
    return False


def _refuse(what: str, nodeid: str, original):
    """A stand-in for ``what`` (``original``) that fails the test ``nodeid`` with the rule."""

    def refused(*args, **kwargs):
        if _from_a_helper():
            return original(*args, **kwargs)
        pytest.fail(f"{RULE}, but {nodeid} called {what}: move this test to tests/integration")

    return refused


def _refused_calls() -> dict[tuple[object, str], str]:
    """``{(owner, attribute): what}`` for every call the unit tier refuses."""
    import lightning.pytorch as L

    calls = {
        (L.Trainer, "fit"): "lightning.pytorch.Trainer.fit",
        (_POPEN, "_execute_child"): "subprocess.Popen (a subprocess)",
        (_PROCESS, "start"): "multiprocessing's Process.start",
        (multiprocessing.util, "spawnv_passfds"): "multiprocessing's spawnv_passfds (a forkserver or tracker)",
    }
    calls.update({(os, name): f"os.{name}" for name in _OS_CALLS if hasattr(os, name)})
    return calls


@contextlib.contextmanager
def _rule(item: pytest.Item) -> Iterator[None]:
    """Within: under tests/unit, ``Trainer.fit`` and starting a process fail ``item``."""
    if not in_unit_tier(item.path):
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DOMAINBERT_FORK", "0")
        for (owner, attribute), what in _refused_calls().items():
            patch.setattr(owner, attribute, _refuse(what, item.nodeid, getattr(owner, attribute)))
        yield


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    """Fixtures of a unit test set up under the rule."""
    with _rule(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """A unit test runs under the rule."""
    with _rule(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    """Fixtures of a unit test tear down under the rule."""
    with _rule(item):
        return (yield)
