"""A pipeline strategy from another package: the example installs into a throwaway folder, registers through the
``domainbert.strategies`` entry-point group, is listed by ``domainbert pipeline --help`` and runs in the pipeline."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from domainbert.pipeline import strategies
from domainbert.pipeline.runner import read_state
from tests.helpers.examples import install_example, run_with_path
from tests.helpers.pipeline_tiny import OPEN_GATE, tiny_pipeline


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The example strategy ``pip install``ed into a throwaway folder (returned), never into the environment."""
    target = install_example("plugin_strategy", tmp_path_factory.mktemp("strategy"))
    assert "mask40" not in strategies.load(refresh=True)  # this environment does not have it
    return target


def test_help_lists_the_installed_strategy_with_its_one_line_doc_and_settings(installed):
    done = run_with_path("-m", "domainbert", "pipeline", "--help", path=installed)
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert "mask40 (start [mask40_strategy]): Mask40: masked-LM pretraining on the task's training text" in text
    assert "--mask40.enabled {true,false}" in text and "--mask40.mlm_probability" in text


def test_the_tiny_pipeline_runs_the_installed_strategy_and_reports_its_candidate(
    installed, tiny_bert, tmp_path, monkeypatch
):
    monkeypatch.syspath_prepend(str(installed))
    try:
        assert "mask40" in strategies.load(refresh=True)
        args = ["--trainer.max_steps=2", "--trainer.val_check_interval=2"]
        settings = {"enabled": True, "config": "configs/pretrain/tiny_debug.yaml", "args": args, "watch": OPEN_GATE}
        report = tiny_pipeline(tiny_bert, tmp_path / "p", [0], mask40=settings).read_text()
    finally:
        monkeypatch.undo()
        strategies.load(refresh=True)
    state = read_state(tmp_path / "p" / "state.json")
    config = yaml.safe_load(Path(state["mask40"]["config"]).read_text())
    assert config["model"]["init_args"]["mlm_probability"] == 0.4
    assert state["finetune-mask40-seed0"]["status"] == "done"
    assert "| mask40 |" in report and "**mask40**: adaptation" in report
