"""The fault-injection line counts every test that ran, whether in this process or in pytest-xdist's workers.

Planted test files run in an inner pytest session in a process of its own (``pytester``) with the plugin
``tests.helpers.faults_summary``, which tests/conftest.py registers for the real suite.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: two files of fault tests: marker counts (one test fails: not counted, listed) and measured counts
PLANTED = {
    "test_kills": """
import pytest
from tests.helpers import faults_summary


@pytest.mark.faults(kills=1, bad_inputs=2)
def test_survives():
    faults_summary.record("data_lost", 0)


@pytest.mark.faults(kills=1)
def test_fails():
    faults_summary.record("data_lost", 1)
    assert False
""",
    "test_inputs": """
import pytest
from tests.helpers import faults_summary


@pytest.mark.faults(bad_inputs=3)
def test_refuses():
    faults_summary.record("tracebacks")
    faults_summary.record("code_executed", 2)


def test_unmarked():
    pass
""",
}
LINE = "fault-injection: kills survived=1, bad inputs tried=5, tracebacks=1, data lost=1, code executed=2"


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one process", "two xdist workers"])
def test_the_fault_line_adds_up_every_tests_markers_and_records(pytester, monkeypatch, workers):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makepyfile(**PLANTED)
    result = pytester.runpytest_subprocess("-p", "tests.helpers.faults_summary", "-p", "no:cacheprovider", *workers)
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines([LINE, "*FAILED fault test (not counted): test_kills.py::test_fails"])
