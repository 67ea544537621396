"""The unit tier's rule holds: a test under tests/unit that fits or starts a process fails, naming the rule.

Planted test files run in an inner pytest session (``pytester``, in this process) with the plugin
``tests.helpers.tiers``, which tests/conftest.py registers for the real suite.
"""

from __future__ import annotations

import pytest

from tests.helpers.tiers import RULE

#: a unit test file that breaks the rule once per test, in every way the plugin knows
PLANTED_UNIT = """
import multiprocessing
import os
import subprocess
import sys

import lightning.pytorch as L
import pytest


def test_fit():
    L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False).fit(L.LightningModule())


def test_subprocess_run():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def test_os_system():
    os.system("true")


def test_multiprocessing():
    multiprocessing.get_context("spawn").Process(target=print).start()


def test_a_forkserver():
    from multiprocessing import forkserver

    forkserver.ForkServer().ensure_running()  # a server of its own: the process's may run already


def test_the_pipelines_stage_server_is_off():
    assert os.environ["DOMAINBERT_FORK"] == "0"


@pytest.fixture(scope="module")
def started():
    return subprocess.check_output([sys.executable, "-c", "print(1)"])


def test_a_module_fixture_that_starts_a_process(started):
    pass


def test_a_stand_in_for_popen_is_allowed(monkeypatch):
    class Popen:
        def __init__(self, *args, **kwargs):
            self.returncode = 0

    monkeypatch.setattr(subprocess, "Popen", Popen)
    assert subprocess.Popen(["anything"]).returncode == 0


def test_a_standard_library_helper_may_start_its_own_process():
    import ctypes.util

    ctypes.util.find_library("c")  # on Linux: runs ldconfig -p


def test_plain_code_passes():
    assert sum(range(4)) == 6
"""

#: the same calls outside tests/unit are allowed
PLANTED_INTEGRATION = """
import os
import subprocess
import sys


def test_subprocess_and_system():
    assert subprocess.run([sys.executable, "-c", "print(2)"], capture_output=True, text=True).stdout == "2\\n"
    assert os.system("true") == 0
"""


@pytest.fixture
def planted(pytester: pytest.Pytester) -> pytest.Pytester:
    """A project with tests/unit/test_planted_unit.py and tests/integration/test_planted_integration.py."""
    pytester.mkdir("tests")
    pytester.mkdir("tests/unit")
    pytester.mkdir("tests/integration")
    (pytester.path / "tests/unit/test_planted_unit.py").write_text(PLANTED_UNIT)
    (pytester.path / "tests/integration/test_planted_integration.py").write_text(PLANTED_INTEGRATION)
    return pytester


def test_unit_tests_that_fit_or_start_a_process_fail_and_say_where_they_belong(planted):
    result = planted.runpytest("-v", "-p", "tests.helpers.tiers", "--import-mode=importlib", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=5, failed=5, errors=1)
    out = result.stdout.str()
    refused = {
        "test_fit": "lightning.pytorch.Trainer.fit",
        "test_subprocess_run": "subprocess.Popen (a subprocess)",
        "test_os_system": "os.system",
        "test_multiprocessing": "multiprocessing's Process.start",
        "test_a_forkserver": "multiprocessing's spawnv_passfds (a forkserver or tracker)",
        "test_a_module_fixture_that_starts_a_process": "subprocess.Popen (a subprocess)",
    }
    for test, call in refused.items():
        nodeid = f"tests/unit/test_planted_unit.py::{test}"
        assert f"{RULE}, but {nodeid} called {call}: move this test to tests/integration" in out, (test, out)
    assert RULE == "tests/unit runs no Trainer.fit and starts no subprocess"
    result.stdout.fnmatch_lines_random(
        [
            "*test_planted_unit.py::test_a_stand_in_for_popen_is_allowed PASSED*",
            "*test_planted_unit.py::test_plain_code_passes PASSED*",
            "*test_planted_unit.py::test_the_pipelines_stage_server_is_off PASSED*",
            "*test_planted_unit.py::test_a_standard_library_helper_may_start_its_own_process PASSED*",
            "*test_planted_integration.py::test_subprocess_and_system PASSED*",
        ]
    )
