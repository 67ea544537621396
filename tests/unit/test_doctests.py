"""Every docstring example in the package runs and gives what it shows: one test per module whose source has ``>>>``.

The modules are found by reading the package's files, so an example added anywhere is run without being listed
here. A module whose source has ``>>>`` but none of whose docstrings the finder reaches (an example in a comment or a
``::`` block) fails too: its example would otherwise never run.
"""

from __future__ import annotations

import doctest
import importlib
import sys
from pathlib import Path

import pytest

import domainbert

#: ``...`` in an expected output matches anything; runs of whitespace match each other
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def example_modules(root: Path, package: str) -> list[str]:
    """The dotted names of the modules under ``root`` (the folder of ``package``) whose source has ``>>>``.

    ``__main__`` modules are left out: importing them runs a command.
    """
    names = []
    for path in sorted(root.rglob("*.py")):
        if path.name == "__main__.py" or ">>>" not in path.read_text(encoding="utf-8"):
            continue
        parts = path.relative_to(root).with_suffix("").parts
        names.append(".".join((package, *(parts[:-1] if parts[-1] == "__init__" else parts))))
    return names


def run_examples(module) -> tuple[int, int, str]:
    """Run every docstring example of ``module``: ``(examples run, examples failed, the failures' report)``."""
    report: list[str] = []
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    for test in doctest.DocTestFinder().find(module):
        runner.run(test, out=report.append)
    attempted, failed = runner.tries, runner.failures
    return attempted, failed, "".join(report)


MODULES = example_modules(Path(domainbert.__file__).parent, "domainbert")


@pytest.mark.parametrize("name", MODULES)
def test_the_docstring_examples_run(name):
    attempted, failed, report = run_examples(importlib.import_module(name))
    if not attempted:
        pytest.fail(f"{name}: its source has '>>>' but no docstring example was found to run")
    if failed:
        pytest.fail(f"{name}: {failed} of {attempted} docstring examples failed\n{report}", pytrace=False)


def test_the_modules_users_call_or_subclass_have_examples():
    wanted = {
        "domainbert.deploy.load",
        "domainbert.deploy.classifier",
        "domainbert.deploy.sample",
        "domainbert.deploy.formats",
        "domainbert.deploy.formats.interface",
    }
    assert wanted <= set(MODULES)
    assert "domainbert.deploy.bench" not in MODULES  # no example there: only files with '>>>' are collected


def _package(tmp_path: Path, monkeypatch, **modules: str) -> Path:
    """A package ``dtpkg`` under ``tmp_path`` with ``modules`` (name: source), importable for this test."""
    root = tmp_path / "dtpkg"
    (root / "sub").mkdir(parents=True)
    (root / "__init__.py").write_text('"""A package."""\n')
    (root / "__main__.py").write_text('"""Runs.\n\n>>> 1\n1\n"""\nraise SystemExit(1)\n')
    for name, source in modules.items():
        (root / f"{name.replace('.', '/')}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    for loaded in [m for m in sys.modules if m.split(".")[0] == "dtpkg"]:
        monkeypatch.delitem(sys.modules, loaded)
    return root


GOOD = '''"""Sums.

>>> add(2, 3)
5
"""


def add(a, b):
    """``a + b``.

    >>> add("a", "b")
    'ab'
    """
    return a + b
'''

BAD = '''def half(x):
    """Half of ``x``.

    >>> half(3)
    1.5
    >>> half(4)
    3
    """
    return x / 2
'''

HIDDEN = """# an example only in a comment: >>> 1 + 1
VALUE = 1
"""


def test_the_modules_with_examples_are_found_by_their_source_in_subpackages_too(tmp_path, monkeypatch):
    root = _package(tmp_path, monkeypatch, good=GOOD, plain='"""No example."""\n', **{"sub.__init__": GOOD})
    assert example_modules(root, "dtpkg") == ["dtpkg.good", "dtpkg.sub"]


def test_a_wrong_example_fails_with_the_doctest_report_and_a_right_one_passes(tmp_path, monkeypatch):
    _package(tmp_path, monkeypatch, good=GOOD, bad=BAD, hidden=HIDDEN)
    assert run_examples(importlib.import_module("dtpkg.good")) == (2, 0, "")
    attempted, failed, report = run_examples(importlib.import_module("dtpkg.bad"))
    assert (attempted, failed) == (2, 1)
    assert "Failed example:\n    half(4)\nExpected:\n    3\nGot:\n    2.0" in report and "half(3)" not in report
    assert run_examples(importlib.import_module("dtpkg.hidden"))[0] == 0  # the parametrized test fails on this
