"""The after strategy of docs/guides/strategies.md, run as the page writes it, in a tiny pipeline."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

from domainbert.pipeline import strategies
from domainbert.pipeline.runner import read_state
from domainbert.pipeline.specs import FinetuneSpec, SoupSpec
from tests.helpers.pipeline_tiny import tiny_pipeline

from .test_pipeline_strategies import _config, _row

PAGE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "strategies.md"


@pytest.fixture
def longer(monkeypatch):
    """The page's ```python block as a module (``longer_strategy``), its strategy registered as a plugin would be."""
    code = re.search(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S).group(1)
    module = types.ModuleType("longer_strategy")
    monkeypatch.setitem(sys.modules, "longer_strategy", module)
    exec(compile(code, str(PAGE), "exec"), module.__dict__)  # noqa: S102 - the documented code itself
    installed = strategies.load(refresh=True)
    with_longer = {**installed, "longer": module.Longer()}
    monkeypatch.setattr(strategies, "load", lambda refresh=False: with_longer)
    return module


def test_the_documented_after_strategy_continues_the_baseline_and_is_compared(longer, tiny_bert, tmp_path):
    out = tmp_path / "p"
    finetune = FinetuneSpec("configs/finetune/tiny_classification.yaml", ["--trainer.max_epochs=1"])
    report = tiny_pipeline(
        tiny_bert, out, [0], finetune=finetune, soup=SoupSpec(enabled=False), longer={"enabled": True, "epochs": 2}
    ).read_text()
    state = read_state(out / "state.json")
    for seed in (0,):
        config = _config(state, f"finetune-longer-seed{seed}")
        assert config["model"]["init_args"]["init_from"] == state[f"finetune-baseline-seed{seed}"]["hf"]
        assert config["trainer"]["max_epochs"] == 2 and config["seed_everything"] == seed
        assert "test/f1_macro" in state[f"finetune-longer-seed{seed}"]["metrics"]
    # its extra minutes: the baseline run it continued and its own run
    minutes = (state["finetune-baseline-seed0"]["seconds"] + state["finetune-longer-seed0"]["seconds"]) / 60
    assert _row(report, "longer")[-1] == f"{minutes:.1f}"
