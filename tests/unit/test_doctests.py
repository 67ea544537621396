"""The examples in the docstrings of what users call or subclass run, and give what they show."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["domainbert.data.transfer", "domainbert.distill.teacher"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} has no docstring example"
    assert result.failed == 0
