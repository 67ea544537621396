"""Strategies through the tiny pipeline: a declared chain (select → vocab → DAPT → TAPT) names its rows after every
link and adds up its minutes from its own stages; contrastive pretraining is one more starting model."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from domainbert.pipeline import PretrainSpec, SelectSpec, VocabSpec, WatchSpec
from domainbert.pipeline.runner import read_state
from domainbert.pipeline.strategies.contrastive import ContrastiveSpec
from tests.helpers.pipeline_tiny import OPEN_GATE, tiny_pipeline

PRETRAIN = ["--trainer.max_steps=2", "--trainer.val_check_interval=2", "--trainer.log_every_n_steps=1"]


def _config(state: dict, stage: str) -> dict:
    return yaml.safe_load((Path(state[stage]["run"]) / "config.yaml").read_text())


def _row(report: str, name: str) -> list[str]:
    line = next(line for line in report.splitlines() if line.startswith(f"| {name} |"))
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_a_declared_chain_names_each_row_after_its_links_and_sums_the_minutes_of_its_own_stages(tiny_bert, tmp_path):
    out = tmp_path / "p"
    stage = PretrainSpec("configs/pretrain/tiny_debug.yaml", PRETRAIN)
    report = tiny_pipeline(
        tiny_bert,
        out,
        [0],
        select=SelectSpec(enabled=True, k=2),
        vocab=VocabSpec(enabled=True, top_k=5, min_freq=2),
        dapt=stage,
        tapt=PretrainSpec(stage.config, PRETRAIN),
    ).read_text()
    state = read_state(out / "state.json")
    assert {"finetune-vocab-knn-dapt-seed0", "finetune-vocab-knn-dapt-tapt-seed0"} <= set(state)
    dapt, tapt = _config(state, "dapt"), _config(state, "tapt")
    assert dapt["model"]["init_args"]["init_from"] == state["vocab"]["result"]  # DAPT starts from vocab's model
    assert dapt["data"]["init_args"]["train"] == state["select"]["corpus"]  # ...on select's documents
    assert tapt["model"]["init_args"]["init_from"] == state["dapt"]["hf"]  # TAPT starts from DAPT's export
    minutes = {s: state[s]["seconds"] / 60 for s in ("select", "vocab", "dapt", "tapt")}
    own = {n: state[f"finetune-{n}-seed0"]["seconds"] / 60 for n in ("vocab-knn-dapt", "vocab-knn-dapt-tapt")}
    chain = minutes["select"] + minutes["vocab"] + minutes["dapt"] + own["vocab-knn-dapt"]  # its stages, its own run
    assert _row(report, "vocab+knn-dapt")[-1] == f"{chain:.1f}"
    assert _row(report, "vocab+knn-dapt+tapt")[-1] == f"{sum(minutes.values()) + own['vocab-knn-dapt-tapt']:.1f}"
    for name in ("vocab+knn-dapt", "vocab+knn-dapt+tapt"):  # neither started from the base, and no probe ran
        assert f"- **{name}**: fine-tuned without the probe gate: no score of the base model on the same" in report
    table = report.split("## Stages and their cost")[0]
    assert "| dapt |" not in table and "| tapt |" not in table  # no row shares another's name


def test_contrastive_pretraining_is_a_starting_model_fine_tuned_and_compared(tiny_bert, tmp_path):
    out = tmp_path / "p"
    args = [
        *PRETRAIN,
        "--data.init_args.batch_size=8",
        "--data.init_args.max_length=64",
        "--trainer.limit_val_batches=1",
    ]
    report = tiny_pipeline(
        tiny_bert, out, [0], contrastive=ContrastiveSpec(enabled=True, args=args, watch=WatchSpec(**OPEN_GATE))
    ).read_text()
    state = read_state(out / "state.json")
    fit = _config(state, "contrastive")
    assert fit["model"]["class_path"] == "domainbert.modules.contrastive.ContrastiveModule"
    assert fit["model"]["init_args"]["init_from"] == str(tiny_bert)
    assert fit["data"]["init_args"]["train"].endswith("corpus.txt") and fit["data"]["init_args"]["packing"] is False
    tuned = _config(state, "finetune-contrastive-seed0")
    assert tuned["model"]["init_args"]["init_from"] == state["contrastive"]["hf"]
    assert fit["model"]["init_args"]["pooling"] == tuned["model"]["init_args"]["pooling"]  # the head's pooling
    row = _row(report, "contrastive")
    assert re.fullmatch(r"[+-]\d+\.\d{2} \[[+-]\d+\.\d{2}, [+-]\d+\.\d{2}\]", row[4]), row  # in points
    minutes = (state["contrastive"]["seconds"] + state["finetune-contrastive-seed0"]["seconds"]) / 60  # + its own run
    assert row[-1] == f"{minutes:.1f}"
