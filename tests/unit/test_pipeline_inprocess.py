"""Pipeline stages in the pipeline's own process: their output goes to the stage's log, a failure is recorded and
reported as a failing process's would be, and the process's global state comes back as it was."""

import logging
import os
import sys
import warnings

import pytest
import torch

from domainbert import cli
from domainbert.errors import DomainBertError
from domainbert.pipeline.runner import Runner, read_state


@pytest.fixture
def mess(monkeypatch):
    """``domainbert mess ...``: the stand-in tool of tests/helpers/pipeline_mess.py."""
    monkeypatch.setitem(cli.COMMANDS, "mess", cli.Command("tests.helpers.pipeline_mess:main", "a test's stand-in tool"))


def _global_state() -> dict:
    return {
        "cwd": os.getcwd(),
        "argv": sys.argv[:],
        "env": dict(os.environ),
        "threads": torch.get_num_threads(),
        "root": (logging.getLogger().handlers[:], logging.getLogger().level),
        "streams": (sys.stdout, sys.stderr),
        "filters": warnings.filters[:],
    }


def test_a_tool_stage_in_the_pipelines_process_logs_to_its_file_and_leaves_the_process_as_it_was(
    mess, tmp_path, capsys
):
    runner = Runner(tmp_path / "p", isolate="none")
    before = _global_state()
    made = runner.tool("tool", ["mess", "ok", str(tmp_path)], result="made")
    assert runner.state["tool"]["status"] == "done" and (made.stage, made.result) == ("tool", "made")
    assert _global_state() == before
    log = (tmp_path / "p" / "tool" / "log.txt").read_text()
    assert "mess: to stdout" in log and "mess: to stderr" in log and "ERROR tests.mess: mess: logged" in log
    printed = capsys.readouterr()
    assert "mess:" not in printed.out + printed.err  # the console shows the stage's lines only
    assert "[tool] running: domainbert mess ok" in printed.out and "in the pipeline's process" in printed.out


@pytest.mark.parametrize(
    "how,code,line",
    [
        ("user", 2, "domainbert: error: mess: a user error"),
        ("bug", 1, "KeyError: 'mess: a bug'"),
        ("exit", 3, "mess: to stderr"),
        ("message", 1, "mess: exit with a message"),
    ],
)
def test_a_failing_stage_in_the_pipelines_process_is_recorded_and_named_like_a_failing_process(
    mess, tmp_path, how, code, line
):
    runner = Runner(tmp_path / "p")  # the default: tool stages in the pipeline's process
    before = _global_state()
    with pytest.raises(DomainBertError) as err:
        runner.tool("tool", ["mess", how, str(tmp_path)], result="made")
    assert _global_state() == before
    log = tmp_path / "p" / "tool" / "log.txt"
    assert f"stage 'tool' failed (exit {code}); its log is {log}" in str(err.value)
    assert line in str(err.value) and line in log.read_text()  # the log's last lines, in the message
    state = read_state(tmp_path / "p" / "state.json")
    assert state["tool"]["status"] == "failed" and state["tool"]["log"] == str(log)


def test_isolate_names_its_choices(tmp_path):
    with pytest.raises(DomainBertError, match=r"isolate='some'; expected one of \['training', 'all', 'none'\]"):
        Runner(tmp_path, isolate="some")
