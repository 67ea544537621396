"""The kept ``--help`` texts: served only for a bare ``<command> --help``, rebuilt whenever an input changes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from domainbert.core import help_cache


def _build_printing(text: str, calls: list):
    def build(argv):
        calls.append(list(argv))
        print(text, end="")
        raise SystemExit(0)

    return build


def test_the_first_help_is_built_and_kept_and_the_second_is_served(capsys):
    calls: list = []
    for _ in range(2):
        with pytest.raises(SystemExit) as done:
            help_cache.serve(["fit", "--help"], _build_printing("usage: domainbert fit\n", calls))
        assert done.value.code == 0
        assert capsys.readouterr().out == "usage: domainbert fit\n"
    assert calls == [["fit", "--help"]], "the second call built the parser again"


def test_a_failed_build_is_not_kept(capsys):
    def failing(argv):
        print("half a text")
        raise SystemExit(2)

    with pytest.raises(SystemExit):
        help_cache.serve(["fit", "--help"], failing)
    assert help_cache.cached("fit") is None


def test_a_changed_source_file_or_terminal_width_changes_the_key(monkeypatch, tmp_path):
    before = help_cache.key("fit")
    assert help_cache.key("fit") == before
    assert help_cache.key("validate") != before
    monkeypatch.setenv("COLUMNS", "57")
    assert help_cache.key("fit") != before
    monkeypatch.delenv("COLUMNS")
    source = Path(help_cache.__file__)
    stat = source.stat()
    try:
        os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
        assert help_cache.key("fit") != before
    finally:
        os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns))


@pytest.mark.parametrize(
    ("argv", "bare"),
    [
        (["fit", "--help"], True),
        (["predict", "-h"], True),
        (["fit", "--config", "x.yaml", "--help"], False),
        (["fit", "--model.help", "classification"], False),
        (["sweep", "--help"], False),
    ],
)
def test_only_a_bare_help_is_served_from_the_cache(argv, bare):
    assert help_cache.is_bare_help(argv) is bare
