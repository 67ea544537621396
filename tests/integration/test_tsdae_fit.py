"""TSDAE through the Trainer: the loss falls (BERT, RoBERTa), the export is the encoder, the pipeline stage runs.

The noise, the tying, the loss by hand and the decoder's memory are in tests/unit/test_tsdae.py.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import lightning.pytorch as L
import pytest
import torch
import yaml

from domainbert.core.embed import native_pooling
from domainbert.modules.tsdae import TsdaeModule
from domainbert.pipeline import WatchSpec
from domainbert.pipeline.strategies.tsdae import TsdaeSpec
from tests.helpers.mlm import LossRecorder, quiet_trainer, small_corpus
from tests.helpers.pipeline_tiny import OPEN_GATE, tiny_pipeline


@pytest.mark.parametrize("fam", ["bert", "roberta"])
def test_a_short_fit_lowers_the_reconstruction_loss(tiny_models, corpus_file, tmp_path, fam):
    L.seed_everything(0, verbose=False)
    module = TsdaeModule(str(tiny_models[fam]), learning_rate=3e-3, pooling="mean")
    dm = small_corpus(module, corpus_file, tmp_path, packing=False)  # 64 texts, 8 batches of 8
    losses = LossRecorder()
    quiet_trainer(40, [losses]).fit(module, datamodule=dm)
    assert len(losses.losses) == 40 and all(math.isfinite(x) for x in losses.losses)
    first, last = sum(losses.losses[:8]) / 8, sum(losses.losses[-8:]) / 8  # the same 8 texts, epochs 1 and 5
    assert last < 0.8 * first, f"the loss did not fall: {first:.3f} -> {last:.3f}"
    assert last < math.log(len(module.tokenizer)), "the decoder rebuilds the texts better than a uniform guess"


def test_the_export_is_the_trained_encoder_with_its_pooling(tiny_bert, corpus_file, tmp_path):
    from transformers import AutoModel

    L.seed_everything(0, verbose=False)
    module = TsdaeModule(str(tiny_bert), learning_rate=1e-3, pooling="mean")
    before = module.model.embeddings.word_embeddings.weight.detach().clone()
    quiet_trainer(3).fit(module, datamodule=small_corpus(module, corpus_file, tmp_path, packing=False))
    trained = module.model.state_dict()
    assert not torch.equal(before, trained["embeddings.word_embeddings.weight"]), "training changed the encoder"
    out = module.export_hf(tmp_path / "hf")
    loaded = AutoModel.from_pretrained(out)
    assert type(loaded).__name__ == "BertModel" and not loaded.config.is_decoder, "the encoder, not the decoder"
    assert not any("crossattention" in k for k in loaded.state_dict()), "no decoder weight in the export"
    for name, value in loaded.state_dict().items():
        torch.testing.assert_close(value, trained[name], rtol=0, atol=0, msg=name)
    assert native_pooling(out) == "mean", "pooling: auto fine-tunes the export mean-pooled, as it trained"


def test_the_pipeline_stage_fits_tsdae_and_fine_tunes_its_export(tiny_bert, tmp_path):
    out = tmp_path / "p"
    args = ["--trainer.max_steps=2", "--trainer.val_check_interval=2", "--trainer.log_every_n_steps=1"]
    args += ["--data.init_args.max_length=64", "--trainer.limit_val_batches=1"]
    report = tiny_pipeline(
        tiny_bert, out, [0], tsdae=TsdaeSpec(enabled=True, args=args, watch=WatchSpec(**OPEN_GATE))
    ).read_text()
    state = json.loads((out / "state.json").read_text())
    fit = yaml.safe_load((Path(state["tsdae"]["run"]) / "config.yaml").read_text())
    assert fit["model"]["class_path"] == "domainbert.modules.tsdae.TsdaeModule"
    assert fit["model"]["init_args"]["init_from"] == str(tiny_bert)
    assert fit["data"]["init_args"]["packing"] is False
    assert (Path(state["tsdae"]["run"]) / "probe_watch.json").is_file(), "the task is watched"
    tuned = yaml.safe_load((Path(state["finetune-tsdae-seed0"]["run"]) / "config.yaml").read_text())
    assert tuned["model"]["init_args"]["init_from"] == state["tsdae"]["hf"]
    assert fit["model"]["init_args"]["pooling"] == tuned["model"]["init_args"]["pooling"]
    assert any(line.startswith("| tsdae |") for line in report.splitlines()), "a row of the report"
