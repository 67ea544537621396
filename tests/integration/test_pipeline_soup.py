"""Seed soups in ``domainbert pipeline``: the baseline's seeds averaged into one model, evaluated without training,
compared in the report like any starting model, and skipped on a rerun."""

import json
import re
from pathlib import Path

import yaml

from domainbert.pipeline import SoupSpec
from domainbert.pipeline.runner import read_state
from tests.helpers.pipeline_tiny import tiny_pipeline


def _pipeline(tiny_bert, out: Path, seeds: list[int], soup: SoupSpec | None = None) -> Path:
    """The tiny pipeline with only the baselines (and the soups) enabled, writing to ``out``."""
    return tiny_pipeline(tiny_bert, out, seeds, soup=soup)


def test_the_baselines_seeds_are_averaged_evaluated_reported_and_skipped_on_a_rerun(
    tiny_bert, tmp_path, capsys, monkeypatch
):
    from domainbert.data.classification import ClassificationDataModule

    tested = []  # the test split is read once per tested model: its predictions come from the test pass itself
    read = ClassificationDataModule.test_dataloader
    monkeypatch.setattr(ClassificationDataModule, "test_dataloader", lambda dm: tested.append(dm) or read(dm))
    out = tmp_path / "p"
    report = _pipeline(tiny_bert, out, [0, 1])
    assert len(tested) == 3  # seed 0, seed 1, the soup
    state = read_state(out / "state.json")
    stages = ["finetune-baseline-seed0", "finetune-baseline-seed1", "soup-baseline", "finetune-baseline-soup"]
    assert [state[s]["status"] for s in stages] == ["done"] * 4
    made = json.loads((out / "soup-baseline" / "hf" / "soup.json").read_text())
    assert made["models"] == [state[f"finetune-baseline-seed{s}"]["hf"] for s in (0, 1)]

    record = state["finetune-baseline-soup"]
    assert record["hf"] == str(out / "soup-baseline" / "hf")  # the evaluated folder itself, no new export
    assert {"val/f1_macro", "test/f1_macro", "test/acc"} <= set(record["metrics"])
    preds = json.loads(Path(record["predictions"]).read_text())
    assert len(preds["gold"]) == len(preds["pred"]) > 0 and preds["labels"] == ["api", "graphics", "network"]
    config = yaml.safe_load((Path(record["run"]) / "config.yaml").read_text())["model"]["init_args"]
    assert config["init_from"] == str(out / "soup-baseline" / "hf") and config["head_init"] is None
    assert not list(Path(record["run"]).rglob("*.ckpt")) and not (Path(record["run"]) / "hf").exists()  # no training

    text = report.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| baseline soup |"))
    assert re.search(r"\| baseline soup \| \d\.\d{4} \| \d\.\d{4} \|", row), row  # one model: no ± std
    assert re.search(r"[+-]\d+\.\d{2} \[[+-]\d+\.\d{2}, [+-]\d+\.\d{2}\]", row), row  # paired, in points
    assert "**baseline soup**: the weight average of the baseline's seeds" in text
    assert "**baseline soup**: adaptation" not in text
    assert "(one model: its seeds' run-to-run noise is not in the interval)" in text

    capsys.readouterr()
    _pipeline(tiny_bert, out, [0, 1])
    printed = capsys.readouterr().out
    assert printed.count("done earlier: skipped") == 4 and "running:" not in printed

    _pipeline(tiny_bert, out, [0, 1], SoupSpec(enabled=False))
    printed = capsys.readouterr().out
    assert "[soup-baseline]" not in printed and "[finetune-baseline-soup]" not in printed
    assert "| baseline soup |" not in (out / "report.md").read_text()


def test_one_seed_makes_no_soup(tiny_bert, tmp_path):
    _pipeline(tiny_bert, tmp_path / "one", [0])
    state = read_state(tmp_path / "one" / "state.json")
    assert sorted(state) == ["finetune-baseline-seed0"]
    assert "baseline soup" not in (tmp_path / "one" / "report.md").read_text()


def test_a_tool_stage_with_upstream_stages_reruns_when_one_of_them_finished_again(tmp_path, capsys):
    """``soup-<name>`` names its seeds' runs in ``after``: seeds trained again (same paths) make a new soup."""
    from domainbert.pipeline.runner import Runner

    runner = Runner(tmp_path)
    runner.tool("up", ["datamodules"], result="x")
    runner.tool("down", ["datamodules"], result="y", after=("up",))
    capsys.readouterr()
    runner.tool("down", ["datamodules"], result="y", after=("up",))
    assert "[down] done earlier: skipped" in capsys.readouterr().out
    runner.state["up"]["status"] = "failed"  # the upstream runs again
    runner.tool("up", ["datamodules"], result="x")
    capsys.readouterr()
    runner.tool("down", ["datamodules"], result="y", after=("up",))
    assert "[down] done earlier with other inputs" in capsys.readouterr().out
