"""The kept ``--help`` texts: served only for a bare ``<command> --help``, rebuilt whenever an input changes."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from domainbert.cli import help_cache


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


def _width_printing(calls: list):
    """A build that prints the width argparse would format at (``$COLUMNS``), as a help text does."""

    def build(argv):
        calls.append(list(argv))
        print(f"usage: domainbert {argv[0]} ({shutil.get_terminal_size().columns} columns)")
        raise SystemExit(0)

    return build


def test_the_text_is_built_at_a_fixed_width_and_served_on_any_terminal(capsys, monkeypatch):
    calls: list = []
    for columns in ("57", "211"):
        monkeypatch.setenv("COLUMNS", columns)
        with pytest.raises(SystemExit):
            help_cache.serve(["fit", "--help"], _width_printing(calls))
        assert capsys.readouterr().out == f"usage: domainbert fit ({help_cache.WIDTH} columns)\n"
        assert os.environ["COLUMNS"] == columns, "the terminal's width was not restored"
    assert len(calls) == 1, "another terminal width built the text again"


def _keep(command: str, text: str, sources: list[list]) -> None:
    help_cache.store(command, text, sources)
    assert help_cache.cached(command) == text


def test_a_changed_imported_source_file_rebuilds_and_another_file_does_not(monkeypatch, tmp_path):
    package = tmp_path / "pkg"
    (package / "core").mkdir(parents=True)
    used, other = package / "core" / "used.py", package / "core" / "other.py"
    used.write_text("x = 1\n")
    other.write_text("y = 1\n")
    monkeypatch.setattr(help_cache, "PACKAGE", package)
    _keep("fit", "usage: domainbert fit\n", [help_cache._stamp("core/used.py")])
    other.write_text("y = 22\n")  # not imported by the build
    assert help_cache.cached("fit") == "usage: domainbert fit\n"
    stat = used.stat()
    os.utime(used, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert help_cache.cached("fit") is None, "an edited input served the old text"
    _keep("fit", "usage: domainbert fit\n", [help_cache._stamp("core/used.py")])
    used.unlink()
    assert help_cache.cached("fit") is None, "a removed input served the old text"


def test_a_changed_library_version_rebuilds(monkeypatch):
    _keep("fit", "usage: domainbert fit\n", [])
    assert help_cache.key("fit") == help_cache.key("fit") != help_cache.key("validate")
    real = help_cache.metadata.version
    monkeypatch.setattr(help_cache.metadata, "version", lambda n: "0.0.1" if n == "lightning" else real(n))
    assert help_cache.cached("fit") is None


def test_the_sources_are_the_imported_files_of_the_package():
    stamps = {s[0]: s for s in help_cache.sources()}
    assert "cli/help_cache.py" in stamps
    assert "pipeline/__init__.py" not in stamps or "domainbert.pipeline" in sys.modules
    here = Path(help_cache.__file__).stat()
    assert stamps["cli/help_cache.py"] == ["cli/help_cache.py", here.st_size, here.st_mtime_ns]


def test_warm_keeps_every_command_not_kept_yet(monkeypatch):
    calls: list = []
    monkeypatch.setattr(help_cache, "build_lightning", _width_printing(calls))
    _keep("test", "kept\n", [])
    assert help_cache.warm() == ["fit", "validate", "predict"]
    assert help_cache.cached("predict") == f"usage: domainbert predict ({help_cache.WIDTH} columns)\n"
    assert help_cache.warm() == [] and len(calls) == 3


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


@pytest.mark.parametrize("sources", [[[]], [""], [["domainbert/cli.py"]], "x", [[1, 2, 3]], [["", 0, 0]]])
def test_a_malformed_entry_is_built_again_and_replaced(capsys, sources):
    import json

    entry = help_cache._entry("fit")
    entry.parent.mkdir(parents=True, exist_ok=True)
    entry.write_text(json.dumps({"key": help_cache.key("fit"), "sources": sources, "text": "stale\n"}))
    calls: list = []
    for _ in range(2):
        with pytest.raises(SystemExit) as done:
            help_cache.serve(["fit", "--help"], _build_printing("usage: domainbert fit\n", calls))
        assert done.value.code == 0
        assert capsys.readouterr().out == "usage: domainbert fit\n"
    assert len(calls) == 1  # built once, then served from the replaced entry
    assert isinstance(json.loads(entry.read_text())["sources"][0], list)


def test_a_kept_text_is_printed_without_terminal_escape_sequences(capsys):
    import json

    calls: list = []
    with pytest.raises(SystemExit):
        help_cache.serve(["fit", "--help"], _build_printing("usage: domainbert fit\n", calls))
    capsys.readouterr()
    entry = help_cache._entry("fit")
    kept = json.loads(entry.read_text())
    kept["text"] = "usage:\x1b]0;owned\x07 domainbert\x1b[2J\x1b[31m fit\x1b[0m\r\x08\n\ttab\n"
    entry.write_text(json.dumps(kept))
    with pytest.raises(SystemExit):
        help_cache.serve(["fit", "--help"], _build_printing("never built\n", calls))
    assert capsys.readouterr().out == "usage: domainbert fit\n\ttab\n"
    assert len(calls) == 1
