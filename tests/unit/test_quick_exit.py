"""The console script freezes the garbage collector's objects once a command is over, never before or on an error."""

from __future__ import annotations

import gc
import sys

import pytest

from domainbert import cli
from domainbert.errors import DomainBertError


@pytest.fixture
def command(monkeypatch):
    """``domainbert probe`` run as the console script (``main()`` reading ``sys.argv``), its function replaced."""
    seen = {}

    def run(behaviour):
        def fake(args):
            seen["frozen while running"] = gc.get_freeze_count()
            behaviour()

        monkeypatch.setitem(cli.COMMANDS, "probe", cli.Command("x:y", "a fake"))
        monkeypatch.setattr(cli.Command, "load", lambda self: fake)
        monkeypatch.setattr(sys, "argv", ["domainbert", "probe", "--out", "x"])
        gc.unfreeze()
        try:
            cli.main()
        finally:
            seen["frozen after"] = gc.get_freeze_count()
            gc.unfreeze()
        return seen

    run.seen = seen
    return run


def test_a_finished_command_skips_the_collections_at_exit(command):
    seen = command(lambda: None)
    assert seen["frozen while running"] == 0 and seen["frozen after"] > 0


def test_the_environment_variable_keeps_the_collections(command, monkeypatch):
    monkeypatch.setenv("DOMAINBERT_QUICK_EXIT", "0")
    assert command(lambda: None)["frozen after"] == 0


def test_a_failed_command_does_not_freeze(command):
    def fail():
        raise DomainBertError("bad input")

    with pytest.raises(SystemExit):
        command(fail)
    assert command.seen["frozen while running"] == 0 and command.seen["frozen after"] == 0


def test_a_call_from_python_never_freezes(monkeypatch):
    monkeypatch.setitem(cli.COMMANDS, "probe", cli.Command("x:y", "a fake"))
    monkeypatch.setattr(cli.Command, "load", lambda self: lambda args: None)
    gc.unfreeze()
    cli.main(["probe", "--out", "x"])
    assert gc.get_freeze_count() == 0
