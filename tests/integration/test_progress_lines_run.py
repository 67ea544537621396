"""A pipeline stage's progress reaches the pipeline's own output while it trains, and its log as it goes."""

from __future__ import annotations

import re

from domainbert.pipeline import StageSpec
from tests.helpers.pipeline_tiny import tiny_pipeline

STAGE = "finetune-baseline-seed0"


def test_a_stage_in_a_process_of_its_own_shows_epoch_step_and_metric_on_the_pipelines_output(
    tiny_bert, tmp_path, capfd
):
    config = "configs/finetune/tiny_classification.yaml"
    args = ["--trainer.max_epochs=2", "--trainer.enable_progress_bar=true"]
    tiny_pipeline(tiny_bert, tmp_path / "p", [0], isolate="training", finetune=StageSpec(config, args))
    out = capfd.readouterr().out
    shown = [line for line in out.splitlines() if line.startswith(f"[{STAGE}] epoch ")]
    validations = [line for line in shown if re.search(r"step \d+/\d+: val/f1_macro [0-9.]+; \S+ elapsed", line)]
    assert len(validations) == 2, out  # one line per validation
    assert re.search(r"epoch 1/2, step \d+/\d+: val/f1_macro .*, about \S+ left$", validations[0]), validations
    assert "epoch 2/2" in validations[1]
    log = (tmp_path / "p" / STAGE / "log.txt").read_text(encoding="utf-8")
    assert sum(line.startswith("Progress: epoch ") for line in log.splitlines()) == len(shown)
    assert out.index(f"[{STAGE}] running:") < out.index(shown[0]) < out.index(f"[{STAGE}] done in")
