"""A pipeline stage is one resolved config: the stage file, the pipeline's values, the user's overrides in order."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from domainbert.errors import DomainBertError
from domainbert.pipeline.runner import Runner, read_state
from domainbert.pipeline.specs import FinetuneSpec, StageSpec
from domainbert.pipeline.stage import StageConfig, callback, data, merge, model, trainer
from tests.helpers.pipeline_tiny import FIX, tiny_pipeline

ROOT = Path(__file__).resolve().parents[2]
CONFIG = str(ROOT / "configs/finetune/tiny_classification.yaml")
WATCH = "domainbert.adapt.watch.ProbeWatch"


def _resolved(tmp_path, config: StageConfig) -> dict:
    return yaml.safe_load(Runner(tmp_path / "p", isolate="none").resolve("ft", config).text())


def test_values_merge_over_the_file_and_overrides_apply_after_them_in_order(tmp_path):
    values = merge(model(init_from="my/model", pooling="mean"), data(train="t.jsonl"), trainer(max_epochs=5))
    values = merge(values, callback(WATCH, train="t.jsonl", val="v.jsonl"))
    config = StageConfig(CONFIG, values).then({"trainer": {"max_epochs": 3}}, ["--trainer.max_epochs=2"])
    resolved = _resolved(tmp_path, config)
    init = resolved["model"]["init_args"]
    assert (init["init_from"], init["pooling"]) == ("my/model", "mean")
    assert resolved["data"]["init_args"]["train"] == "t.jsonl"
    assert resolved["trainer"]["max_epochs"] == 2  # the last override wins
    classes = [c["class_path"] for c in resolved["trainer"]["callbacks"]]
    assert classes[-1] == WATCH and len(classes) > 1  # appended after the file's own callbacks
    assert resolved["trainer"]["default_root_dir"] == str(tmp_path / "p" / "ft") and resolved["run_name"] == "run"


def test_a_value_set_to_null_stays_null_in_the_resolved_config(tmp_path):
    """A soup is evaluated with ``head_init: null``: the resolved config must not fall back to the default."""
    resolved = _resolved(tmp_path, StageConfig(CONFIG, model(init_from="m")).then(model(head_init=None)))
    assert "head_init" in resolved["model"]["init_args"] and resolved["model"]["init_args"]["head_init"] is None


def test_a_mistyped_override_is_refused_naming_the_stage_and_the_option(tmp_path):
    with pytest.raises(DomainBertError, match=r"stage 'ft': .*learning_ratee"):
        _resolved(tmp_path, StageConfig(CONFIG, model(init_from="m")).then(["--model.learning_ratee=1e-3"]))
    with pytest.raises(DomainBertError, match=r"stage 'ft': .*learning_ratee"):
        _resolved(tmp_path, StageConfig(CONFIG, model(init_from="m")).then({"model": {"learning_ratee": 1e-3}}))


def test_args_that_are_neither_a_config_nor_options_are_refused():
    with pytest.raises(DomainBertError, match=r"args='--trainer.max_epochs=2': expected a config dict"):
        StageConfig(CONFIG).then("--trainer.max_epochs=2")


def test_finetune_args_as_a_config_reach_the_trainer_and_the_worker_runs_the_resolved_config(tiny_bert, tmp_path):
    """``finetune.args`` as a dict is merged as config; the run folder keeps the config the stage resolved."""
    out = tmp_path / "p"
    finetune = FinetuneSpec(CONFIG, {"trainer": {"max_epochs": 1}, "model": {"init_args": {"learning_rate": 2e-3}}})
    tiny_pipeline(tiny_bert, out, [0], finetune=finetune, distill=StageSpec(enabled=False))
    state = read_state(out / "state.json")
    record = state["finetune-baseline-seed0"]
    stage = yaml.safe_load(Path(record["config"]).read_text())
    assert stage["trainer"]["max_epochs"] == 1 and stage["model"]["init_args"]["learning_rate"] == 2e-3
    assert stage["data"]["init_args"]["train"] == str(FIX / "cls_train.jsonl")
    assert record["inputs"] == [record["config"], "--test"]
    ran = yaml.safe_load((Path(record["run"]) / "config.yaml").read_text())
    assert ran["model"] == stage["model"] and ran["data"] == stage["data"]
    assert ran["trainer"]["max_epochs"] == 1


def test_task_files_in_the_working_directory_resolve(tmp_path, monkeypatch):
    """Relative task files without a folder make a long YAML source with no slash: it is a config, not a path."""
    monkeypatch.chdir(tmp_path)
    names = {split: f"{split}_{'x' * 80}.jsonl" for split in ("train", "val", "test")}
    values = merge(model(init_from="bert-base-uncased"), data(**names, predict=names["test"], text_column="text"))
    resolved = _resolved(tmp_path, StageConfig(CONFIG, values))
    assert resolved["data"]["init_args"]["train"] == names["train"]


def test_an_appended_callback_joins_a_list_set_in_the_same_values():
    values = merge({"trainer": {"callbacks": [{"class_path": "A"}]}}, callback(WATCH))
    assert [c["class_path"] for c in values["trainer"]["callbacks"]] == ["A", WATCH]
    assert "callbacks+" not in values["trainer"]
    replaced = merge(callback(WATCH), {"trainer": {"callbacks": [{"class_path": "B"}]}})
    assert replaced["trainer"] == {"callbacks": [{"class_path": "B"}]}
