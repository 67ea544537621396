"""The pipeline's ``state.json`` carries its own mark; a folder of the user's is never taken for a pipeline's.

A pipeline folder is one holding ``.domainbert-output`` (every released pipeline wrote it) or a ``state.json`` marked
``{"format": "domainbert-pipeline", "version": 1, ...}``; any other non-empty folder is refused in one line, whatever
``state.json`` it holds. Every reader goes through ``read_state``, which translates the older form (bare records).
"""

import json
import re
from pathlib import Path

import pytest

from domainbert.core.files import MARKER, check_output, claim_folder
from domainbert.errors import DomainBertError
from domainbert.pipeline.runner import STATE_FORMAT, STATE_VERSION, Runner, read_state, write_state

RECORD = {"status": "done", "seconds": 3.0, "result": "x"}


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_a_users_folder_with_an_empty_state_json_is_refused_and_left_untouched(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "state.json").write_text("{}")
    (mine / "report.md").write_text("# my report\n")
    (mine / "config.yaml").write_text("mine: true\n")
    before = _files(mine)
    with pytest.raises(DomainBertError, match=r"^out: .*mine exists and was not written by domainbert") as e:
        Runner(mine)
    assert "\n" not in str(e.value)
    assert _files(mine) == before  # no marker, no lock, nothing rewritten


def test_bare_stage_records_without_the_marker_are_a_users_too(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "state.json").write_text(json.dumps({"probe": {"status": "done"}}))
    with pytest.raises(DomainBertError, match=r"not written by domainbert"):
        Runner(mine)
    assert sorted(p.name for p in mine.iterdir()) == ["state.json"]


def test_the_pipeline_writes_its_mark_and_reads_it_back(tmp_path):
    runner = Runner(tmp_path / "p")
    runner.state["probe"] = RECORD
    runner._save()
    data = json.loads((tmp_path / "p" / "state.json").read_text())
    assert data == {"format": STATE_FORMAT, "version": STATE_VERSION, "stages": {"probe": RECORD}}
    runner.close()
    assert Runner(tmp_path / "p").state == {"probe": RECORD}


def test_a_marked_state_whose_marker_file_was_lost_is_still_the_pipelines(tmp_path):
    folder = tmp_path / "p"
    folder.mkdir()
    write_state(folder / "state.json", {"probe": RECORD})
    (folder / "report.md").write_text("# report\n")
    assert Runner(folder).state == {"probe": RECORD} and (folder / MARKER).is_file()


def test_an_older_pipelines_folder_reads_through_the_one_reader_and_is_saved_marked(tmp_path):
    folder = tmp_path / "old"
    folder.mkdir()
    (folder / MARKER).write_text("")
    (folder / "state.json").write_text(json.dumps({"probe": RECORD}))
    assert read_state(folder / "state.json") == {"probe": RECORD}
    runner = Runner(folder)
    runner._save()
    assert json.loads((folder / "state.json").read_text())["format"] == STATE_FORMAT
    assert read_state(folder / "state.json") == {"probe": RECORD}


@pytest.mark.parametrize(
    "data,message",
    [
        ({"format": "someone-else", "version": 1, "stages": {}}, r"format 'someone-else', not 'domainbert-pipeline'"),
        ({"format": STATE_FORMAT, "version": STATE_VERSION + 1, "stages": {}}, r"version 2; this domainbert reads"),
        ({"format": STATE_FORMAT, "version": "1", "stages": {}}, r"version '1'; this domainbert reads"),
        ({"format": STATE_FORMAT, "version": 1, "stages": [1]}, r"expected a JSON object of stage records"),
        ({"format": STATE_FORMAT, "version": 1}, r"expected a JSON object of stage records"),
    ],
)
def test_a_state_of_another_format_or_a_newer_version_is_one_line_naming_the_file(tmp_path, data, message):
    path = tmp_path / "state.json"
    path.write_text(json.dumps(data))
    with pytest.raises(DomainBertError, match=rf"^{re.escape(str(path))}: {message}"):
        read_state(path)


def test_a_pipeline_marked_home_is_still_refused_as_a_home_and_left_unmarked(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    write_state(home / "state.json", {})
    with pytest.raises(DomainBertError, match=r"home folder"):
        Runner(home)
    assert sorted(p.name for p in home.iterdir()) == ["state.json"]


@pytest.mark.parametrize("check", [check_output, claim_folder])
def test_a_null_output_is_one_line_not_a_type_error(tmp_path, check, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DomainBertError, match=r"^out is null \(in YAML, `~` and `null` mean no value"):
        check(None, what="out")
    assert list(tmp_path.iterdir()) == []


def test_out_null_in_a_pipeline_config_is_one_line(tmp_path, capsys, monkeypatch):
    from domainbert.cli import main as domainbert

    fix = Path(__file__).resolve().parents[1] / "fixtures"
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "p.yaml"
    config.write_text(
        f"base_model: never-loaded\ntask_train: {fix / 'cls_train.jsonl'}\ntask_val: {fix / 'cls_val.jsonl'}\nout: ~\n"
    )
    with pytest.raises(SystemExit) as done:
        domainbert(["pipeline", "--config", str(config)])
    assert done.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("domainbert: error: out is null") and "\n" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.yaml"]
