"""``domainbert export`` reads inputs no longer than the model's position embeddings hold."""

from __future__ import annotations

import json
import logging

from transformers import AutoConfig, AutoModelForSequenceClassification

from domainbert.deploy.command import export
from domainbert.deploy.sample import WORDS, sample_classifier


def test_a_model_with_fewer_positions_than_max_length_is_exported_with_inputs_cut_to_fit(tmp_path, caplog):
    folder = sample_classifier(tmp_path / "model", labels=["a", "b"])
    config = AutoConfig.from_pretrained(folder)
    config.max_position_embeddings = 16  # below export's default max_length of 128
    AutoModelForSequenceClassification.from_config(config).save_pretrained(folder)
    long_text = " ".join(list(WORDS) * 8)
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"text": long_text, "label": lab}) + "\n" for lab in "abab"))
    caplog.set_level(logging.INFO, logger="domainbert.deploy.command")
    result = export(str(folder), str(tmp_path / "out"), data=str(data), latency_examples=4, repeats=1, int8=False)
    assert "--max_length 128 is beyond the model's 16 positions; inputs are cut at 16" in caplog.text
    assert {row["variant"] for row in result["variants"]} >= {"student"}
