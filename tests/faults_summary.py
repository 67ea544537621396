"""Pytest plugin: the fault-injection suite's closing line.

Registered from tests/conftest.py with ``pytest_plugins = ["faults_summary"]``. At the end of a run that
included tests marked ``faults`` it prints::

    fault-injection: kills survived=N, bad inputs tried=M, data lost=0

Counting:

- A passed test marked ``@pytest.mark.faults(kills=1)`` adds 1 to the kills survived, one marked
  ``@pytest.mark.faults(bad_inputs=1)`` adds 1 to the bad inputs tried (any counts, any mix).
- A test measures what was lost with :func:`record` (``record("data_lost", n)``, before asserting ``n == 0``),
  so the line shows the measured figure, not an assumption. Further counters may be recorded the same way.
- Failed ``faults`` tests are listed after the line: their counts are not added.
"""

from __future__ import annotations

from collections import Counter

import pytest

#: counters recorded by tests in this process (``data_lost`` and any others).
RECORDED: Counter = Counter()
#: counters from the markers of passed fault tests.
MARKED: Counter = Counter()
FAILED: list[str] = []
_SEEN = {"n": 0}


def record(name: str, value: int = 1) -> None:
    """Add ``value`` to the counter ``name`` (e.g. ``record("data_lost", lost)``)."""
    RECORDED[name] += int(value)


def pytest_configure(config) -> None:  # noqa: D103
    config.addinivalue_line("markers", "faults(kills=0, bad_inputs=0): a fault-injection test and what it tries")


def _fault_marker(item):
    return item.get_closest_marker("faults")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):  # noqa: D103
    outcome = yield
    report = outcome.get_result()
    marker = _fault_marker(item)
    if marker is None:
        return
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        if report.when == "call":
            _SEEN["n"] += 1
        if report.passed and not hasattr(report, "wasxfail"):
            for key, value in marker.kwargs.items():
                MARKED[key] += int(value)
        elif report.failed:
            FAILED.append(item.nodeid)


def summary_line() -> str:
    """The closing line, from the counters so far."""
    return (
        f"fault-injection: kills survived={MARKED['kills']}, bad inputs tried={MARKED['bad_inputs']}, "
        f"data lost={RECORDED['data_lost']}"
    )


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: D103
    if not _SEEN["n"] and not FAILED:
        return
    terminalreporter.write_sep("-", "fault-injection summary")
    terminalreporter.write_line(summary_line())
    extra = {k: v for k, v in RECORDED.items() if k != "data_lost"}
    if extra:
        terminalreporter.write_line("  also recorded: " + ", ".join(f"{k}={v}" for k, v in sorted(extra.items())))
    for nodeid in FAILED:
        terminalreporter.write_line(f"  FAILED fault test (not counted): {nodeid}")
