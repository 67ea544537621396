"""Pytest plugin: the fault-injection suite's closing line.

Registered from tests/conftest.py with ``pytest_plugins = ["faults_summary"]``. At the end of a run that
included tests marked ``faults`` it prints::

    fault-injection: kills survived=K, bad inputs tried=N, tracebacks=T, data lost=D, code executed=C

Counting (every figure comes from markers or from what the tests measured, none is typed in):

- A passed test marked ``@pytest.mark.faults(kills=1)`` adds 1 to the kills survived, one marked
  ``@pytest.mark.faults(bad_inputs=1)`` adds 1 to the bad inputs tried (any counts, any mix).
- A test measures what was lost with :func:`record` (``record("data_lost", n)``, before asserting ``n == 0``),
  so the line shows the measured figure, not an assumption. ``record("code_executed", n)`` counts payloads
  (planted pickles and the like) that did run. Further counters may be recorded the same way.
- :func:`check_one_line` takes the captured stderr of a command that failed on bad input: it records
  ``tracebacks`` +1 when a Python traceback is in it, then asserts that the error is one
  ``domainbert: error: ...`` line.
- Failed ``faults`` tests are listed after the line: their marker counts are not added (recorded counters are:
  a traceback or a lost file is counted even when the test then fails on it).

With ``pytest -n`` (pytest-xdist) each test's counts travel in its reports' ``user_properties`` and the controller
adds them up, so the line counts every worker's tests.
"""

from __future__ import annotations

from collections import Counter

import pytest

#: counters recorded by tests in this process (``data_lost`` and any others).
RECORDED: Counter = Counter()
#: counters from the markers of passed fault tests.
MARKED: Counter = Counter()
FAILED: list[str] = []
#: recorded counters that the closing line shows itself.
SHOWN = ("data_lost", "tracebacks", "code_executed")
_SEEN = {"n": 0}
#: what :func:`record` counted since the last test report left this process (sent on with it under pytest-xdist).
_PENDING: Counter = Counter()
#: the ``user_properties`` key of a report's counts
_KEY = "fault_counts"


def record(name: str, value: int = 1) -> None:
    """Add ``value`` to the counter ``name`` (e.g. ``record("data_lost", lost)``)."""
    RECORDED[name] += int(value)
    _PENDING[name] += int(value)


def check_one_line(stderr: str) -> str:
    """Record a traceback in ``stderr`` (``tracebacks`` +1), then assert one ``domainbert: error:`` line.

    Use it on the captured stderr of any CLI call that is expected to fail on bad input, e.g.
    ``line = check_one_line(capsys.readouterr().err)``.

    Returns:
        The error line.
    """
    if "Traceback" in stderr:
        record("tracebacks")
    assert "Traceback" not in stderr, f"a traceback instead of a one-line error:\n{stderr[-2000:]}"
    errors = [line for line in stderr.splitlines() if line.startswith("domainbert: error:")]
    assert len(errors) == 1, f"expected one 'domainbert: error:' line, got {len(errors)}:\n{stderr[-2000:]}"
    return errors[0]


def pytest_configure(config) -> None:  # noqa: D103
    config.addinivalue_line("markers", "faults(kills=0, bad_inputs=0): a fault-injection test and what it tries")


def _fault_marker(item):
    return item.get_closest_marker("faults")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):  # noqa: D103
    outcome = yield
    report = outcome.get_result()
    counts: dict = {"recorded": dict(_PENDING)}
    _PENDING.clear()
    marker = _fault_marker(item)
    if marker is not None and (report.when == "call" or (report.when == "setup" and report.outcome != "passed")):
        counts["marked"] = {key: int(value) for key, value in marker.kwargs.items()}
    if len(counts) > 1 or counts["recorded"]:
        report.user_properties.append((_KEY, counts))


def pytest_runtest_logreport(report) -> None:
    """Count a report's marker (and, for a report from an xdist worker, what its test recorded)."""
    counts = dict(report.user_properties).get(_KEY)
    if counts is None:
        return
    if getattr(report, "node", None) is not None:  # from a worker: its record() calls counted in its own process
        RECORDED.update(counts["recorded"])
    marked = counts.get("marked")
    if marked is None:
        return
    if report.when == "call":
        _SEEN["n"] += 1
    if report.passed and not hasattr(report, "wasxfail"):
        MARKED.update(marked)
    elif report.failed:
        FAILED.append(report.nodeid)


def summary_line() -> str:
    """The closing line, from the counters so far."""
    return (
        f"fault-injection: kills survived={MARKED['kills']}, bad inputs tried={MARKED['bad_inputs']}, "
        f"tracebacks={RECORDED['tracebacks']}, data lost={RECORDED['data_lost']}, "
        f"code executed={RECORDED['code_executed']}"
    )


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: D103
    if not _SEEN["n"] and not FAILED:
        return
    terminalreporter.write_sep("-", "fault-injection summary")
    terminalreporter.write_line(summary_line())
    extra = {k: v for k, v in RECORDED.items() if k not in SHOWN}
    if extra:
        terminalreporter.write_line("  also recorded: " + ", ".join(f"{k}={v}" for k, v in sorted(extra.items())))
    for nodeid in FAILED:
        terminalreporter.write_line(f"  FAILED fault test (not counted): {nodeid}")
