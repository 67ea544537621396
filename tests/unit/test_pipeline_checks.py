"""``domainbert pipeline`` refuses, before any stage runs, what cannot work, each with one line; ``--help`` says what
runs by default."""

import json
import re
from pathlib import Path

import pytest

from domainbert.core.files import MARKER
from domainbert.errors import DomainBertError
from domainbert.pipeline import DistillSpec, FinetuneSpec, ProbeSpec, SelfTrainSpec, StageSpec, main
from domainbert.pipeline.runner import Runner
from domainbert.pipeline.specs import TransferSpec
from tests.helpers.pipeline_tiny import refused_pipeline

FIX = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"seeds": []}, r"seeds is empty; give at least one seed \(e.g. \[0, 1, 2\]\) or leave it out \(seed 0\)"),
        ({"seeds": [1, 1]}, r"seeds \[1, 1\] repeats a seed"),
        ({"dapt": StageSpec("nowhere/dapt.yaml")}, r"dapt.config nowhere/dapt.yaml: no such file; .*leave dapt.config"),
        ({"finetune": FinetuneSpec("nowhere/ft.yaml")}, r"finetune.config nowhere/ft.yaml: no such file"),
        ({"task_train": "nowhere/train.jsonl"}, r"^pipeline: task_train: nowhere/train.jsonl: no such file"),
        ({"task_test": "nowhere/t*.jsonl"}, r"^pipeline: task_test: nowhere/t\*.jsonl: the pattern matches no file"),
        ({"corpus": "nowhere/corpus.txt"}, r"^pipeline: corpus: nowhere/corpus.txt: no such file"),
        ({"finetune": StageSpec(enabled=False)}, r"finetune.enabled is not an option .* `dapt: \{enabled: false\}`"),
        ({"self_train": SelfTrainSpec(enabled=True), "corpus": None, "dapt": StageSpec(enabled=False)}, "set `corpus`"),
    ],
)
def test_a_pipeline_that_cannot_work_is_refused_in_one_line_before_any_stage(tmp_path, kwargs, message):
    with pytest.raises(DomainBertError, match=message) as err:
        refused_pipeline(tmp_path, **kwargs)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "p").exists()  # nothing ran, nothing was written


def test_a_corpus_no_stage_reads_is_not_checked(tmp_path, monkeypatch):
    """With DAPT and the distillation's transfer set off, a corpus path that names nothing is no error."""
    monkeypatch.setattr("domainbert.pipeline.recipe.run_probe", _stop)
    off = DistillSpec(transfer=TransferSpec(enabled=False))
    with pytest.raises(_Stopped):
        refused_pipeline(tmp_path, corpus="nowhere/corpus.txt", dapt=StageSpec(enabled=False), distill=off)


def test_the_distillations_transfer_set_reads_the_corpus_so_it_is_checked_first(tmp_path, monkeypatch):
    monkeypatch.setattr("domainbert.pipeline.recipe.run_probe", _stop)
    with pytest.raises(DomainBertError, match="pipeline: corpus: .*nowhere"):
        refused_pipeline(tmp_path, corpus="nowhere/corpus.txt", dapt=StageSpec(enabled=False))


def test_a_transfer_set_asked_for_without_a_corpus_is_refused(tmp_path):
    on = DistillSpec(transfer=TransferSpec(enabled=True))
    with pytest.raises(DomainBertError, match="distill.transfer.enabled: true .* no corpus is given"):
        refused_pipeline(tmp_path, corpus=None, dapt=StageSpec(enabled=False), distill=on)


@pytest.mark.parametrize("documents", [0, -1, True])
def test_transfer_documents_must_be_positive(documents):
    with pytest.raises(DomainBertError, match=r"distill\.transfer\.documents="):
        TransferSpec(documents=documents)


@pytest.mark.parametrize("epochs", [0, -2, 1.5, False])
def test_transfer_epochs_must_be_positive(epochs):
    with pytest.raises(DomainBertError, match=r"distill\.transfer\.epochs="):
        TransferSpec(epochs=epochs)


class _Stopped(Exception):
    pass


def _stop(*args, **kwargs):
    raise _Stopped


@pytest.mark.parametrize("out", ["", " ", "/"])
def test_out_is_never_empty_nor_the_root(tmp_path, out):
    with pytest.raises(DomainBertError, match=r"^out"):
        refused_pipeline(tmp_path, out=out, probe=ProbeSpec(enabled=False))


def test_out_is_never_a_folder_of_the_users_nor_one_holding_an_input(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine\n")
    with pytest.raises(DomainBertError, match=r"^out: .*mine exists and was not written by domainbert"):
        refused_pipeline(tmp_path, out=str(mine))
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    with pytest.raises(DomainBertError, match=r"^out .*fixtures would overwrite the input .*fixtures/"):
        refused_pipeline(tmp_path, out=str(FIX))


def test_a_resumed_pipeline_reuses_its_own_folder_and_an_older_pipelines_folder(tmp_path):
    Runner(tmp_path / "p")
    assert (tmp_path / "p" / MARKER).is_file()
    Runner(tmp_path / "p")  # its own folder: reused
    old = tmp_path / "old"  # as every released pipeline wrote it: the marker, and state.json of bare stage records
    old.mkdir()
    (old / MARKER).write_text("")
    (old / "state.json").write_text(json.dumps({"probe": {"status": "done"}}))
    assert Runner(old).state == {"probe": {"status": "done"}}


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"probe": 3}'])
def test_a_state_file_that_is_not_the_pipelines_is_named(tmp_path, text):
    Runner(tmp_path / "p")
    (tmp_path / "p" / "state.json").write_text(text)
    state = re.escape(str(tmp_path / "p" / "state.json"))
    with pytest.raises(DomainBertError, match=rf"^{state}: .*delete it to run every stage"):
        Runner(tmp_path / "p")


def test_a_config_that_sets_finetune_enabled_gets_one_line_saying_what_to_write(tmp_path, capsys):
    from domainbert.cli import main as domainbert

    config = tmp_path / "p.yaml"
    config.write_text("base_model: m\ntask_train: t\ntask_val: v\nfinetune:\n  enabled: true\n  args: []\n")
    with pytest.raises(SystemExit) as done:
        domainbert(["pipeline", "--config", str(config)])
    assert done.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("domainbert: error: pipeline: finetune.enabled is not an option") and "\n" not in err
    assert "remove `enabled` from `finetune`" in err


def test_other_bad_options_are_one_line_naming_them_not_the_whole_usage():
    with pytest.raises(DomainBertError) as err:
        main(["--base_model", "m", "--task_train", "t", "--task_val", "v", "--sedes", "[1]"])
    said = str(err.value)
    assert said == "pipeline: unrecognized arguments: --sedes [1] (`domainbert pipeline --help` lists every option)"
    assert "\n" not in said and "usage:" not in said


def test_help_says_what_runs_by_default(capsys):
    from jsonargparse import set_parsing_settings

    try:
        with pytest.raises(SystemExit) as done:
            main(["--help"])
    finally:
        set_parsing_settings(docstring_parse_attribute_docstrings=False)  # as the other tests expect it
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # unwrapped
    assert "What runs when the config gives only the paths: the probe; DAPT on the corpus when the base model" in text
    assert "(dapt.enabled: auto; a sentence embedder without one" in text
    assert "distillation of the chosen model into a 3-layer student" in text and "its int8 export" in text
    assert "--seeds" in text and "default: [0]" in text and "Default: seed 0 alone" in text
    assert "Runs by default (`enabled: auto`) when the base model ships a trained masked-LM head" in text
    options = text.split("Run the domain-adaptation recipe", 1)[1]  # past the usage lines
    stages = {"probe": True, "dapt": "auto", "tapt": False, "select": False, "vocab": False, "self_train": False}
    for stage, default in {**stages, "soup": True, "distill": True, "export": True}.items():
        choices = "ENABLED" if default == "auto" else "{true,false}"
        shown = options.split(f"--{stage}.enabled {choices}", 1)[1].split("--", 1)[0]
        assert f"default: {default})" in shown, (stage, shown)
    assert "--finetune.enabled" not in text and "Always runs" in text
    assert "--isolate {training,all,none}" in text and "default: training" in text
    assert not re.search(r"type: \w+Spec \| null, default: null", text)  # no stage's default is null any more


@pytest.mark.parametrize(
    "option,value,said",
    [
        ("--dapt.watch.every_n_steps", "0", "dapt.watch.every_n_steps=0: expected a whole number >= 1, or null"),
        ("--dapt.watch.every_n_steps", "-4", "dapt.watch.every_n_steps=-4: expected a whole number >= 1, or null"),
        ("--tapt.watch.patience", "0", "tapt.watch.patience=0: expected a whole number >= 1, or null (never stop"),
        ("--dapt.watch.margin", ".nan", "dapt.watch.margin=nan: expected a finite number"),
    ],
)
def test_watch_values_that_cannot_work_are_refused_up_front_naming_the_pipeline_option(
    tmp_path, monkeypatch, option, value, said
):
    """Unchecked, 0 became the default, and the others failed inside the stage naming the callback (or, a NaN
    margin, closed the gate for good)."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DomainBertError) as err:
        main(["--base_model", "m", "--task_train", "t", "--task_val", "v", "--out", "p", option, value])
    assert str(err.value).startswith(f"pipeline: {said}")
    assert "\n" not in str(err.value) and not (tmp_path / "p").exists()


def test_watch_values_from_python_are_named_as_the_option_they_were_given_as(tmp_path):
    from domainbert.pipeline import WatchSpec

    with pytest.raises(DomainBertError, match=r"^pipeline: dapt\.watch\.patience=0: expected a whole number >= 1"):
        refused_pipeline(tmp_path, dapt={"enabled": True, "watch": {"patience": 0}})
    with pytest.raises(DomainBertError, match=r"^watch\.margin=inf: expected a finite number$"):
        WatchSpec(margin=float("inf"))
    assert not (tmp_path / "p").exists()
