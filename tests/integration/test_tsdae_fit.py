"""TSDAE through the Trainer: the loss falls (BERT, RoBERTa), the head warm-up holds the encoder (and the probe watch
waits for it), the export is the encoder, the pipeline stage runs.

The noise, the tying, the loss by hand and the decoder's memory are in tests/unit/test_tsdae.py.
"""

from __future__ import annotations

import math
from pathlib import Path

import lightning.pytorch as L
import pytest
import torch
import yaml

from domainbert.adapt.watch import ProbeWatch
from domainbert.core.embed import native_pooling
from domainbert.modules.tsdae import TsdaeModule
from domainbert.pipeline import WatchSpec
from domainbert.pipeline.runner import read_state
from domainbert.pipeline.strategies.tsdae import TsdaeSpec
from tests.helpers.mlm import LossRecorder, quiet_trainer, small_corpus
from tests.helpers.pipeline_tiny import OPEN_GATE, tiny_pipeline


@pytest.mark.parametrize("fam", ["bert", "roberta"])
def test_a_short_fit_lowers_the_reconstruction_loss(tiny_models, corpus_file, tmp_path, fam):
    L.seed_everything(0, verbose=False)
    module = TsdaeModule(str(tiny_models[fam]), learning_rate=3e-3, pooling="mean", head_warmup_steps=0)
    dm = small_corpus(module, corpus_file, tmp_path, packing=False)  # 64 texts, 8 batches of 8
    losses = LossRecorder()
    quiet_trainer(40, [losses]).fit(module, datamodule=dm)
    assert len(losses.losses) == 40 and all(math.isfinite(x) for x in losses.losses)
    first, last = sum(losses.losses[:8]) / 8, sum(losses.losses[-8:]) / 8  # the same 8 texts, epochs 1 and 5
    assert last < 0.8 * first, f"the loss did not fall: {first:.3f} -> {last:.3f}"
    assert last < math.log(len(module.tokenizer)), "the decoder rebuilds the texts better than a uniform guess"


class _Steps(L.Callback):
    """Before each step and at the end: the encoder's and the decoder's state; at each step: each group's LR and
    whether any encoder weight got a gradient."""

    def __init__(self) -> None:
        self.encoder, self.decoder, self.lrs, self.encoder_grad = [], [], [], []

    def _take(self, module) -> None:
        self.encoder.append({k: v.detach().clone() for k, v in module.model.state_dict().items()})
        self.decoder.append({k: v.detach().clone() for k, v in module.decoder.state_dict().items()})

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._take(pl_module)
        self.lrs.append([g["lr"] for g in trainer.optimizers[0].param_groups])

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        self.encoder_grad.append(any(p.grad is not None for p in pl_module.model.parameters()))

    def on_train_end(self, trainer, pl_module) -> None:
        self._take(pl_module)


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_the_head_warm_up_trains_the_decoders_own_weights_alone_then_everything(tiny_bert, corpus_file, tmp_path):
    L.seed_everything(0, verbose=False)
    w, lr, head_lr = 3, 1e-3, 1e-2
    module = TsdaeModule(
        str(tiny_bert), learning_rate=lr, weight_decay=0.1, pooling="mean", head_warmup_steps=w, head_warmup_lr=head_lr
    )
    steps = _Steps()
    quiet_trainer(w + 2, [steps]).fit(module, datamodule=small_corpus(module, corpus_file, tmp_path, packing=False))
    # snapshots before steps 0..w+1, then after the last: encoder[i] is the state after i optimizer steps
    for i in range(1, w + 1):
        assert _same(steps.encoder[i], steps.encoder[0]), f"the encoder moved in warm-up step {i - 1}"
    encoder_ids = {id(p) for p in module.model.parameters()}
    tied = {n for n, p in module.decoder.named_parameters(remove_duplicate=False) if id(p) in encoder_ids}
    moved = {k for k in steps.decoder[0] if not torch.equal(steps.decoder[0][k], steps.decoder[w][k])}
    assert moved and not moved & tied, f"only the decoder's own weights train in the warm-up: {sorted(moved & tied)}"
    assert any("crossattention.output.dense.weight" in k for k in moved), sorted(moved)
    assert steps.encoder_grad == [False] * w + [True] * 2, "no gradient reaches the encoder until the warm-up ends"
    assert not _same(steps.encoder[-1], steps.encoder[w]), "the encoder trains after the warm-up"
    own = {id(p) for p in module.decoder.parameters()} - encoder_ids
    groups = module.trainer.optimizers[0].param_groups
    head = [all(id(p) in own for p in g["params"]) for g in groups]
    assert any(head) and not all(head), "the decoder's own weights have groups of their own"
    for step, lrs in enumerate(steps.lrs):
        for is_head, got in zip(head, lrs):
            want = (head_lr if is_head else 0.0) if step < w else lr  # constant, warmup_ratio 0
            assert got == pytest.approx(want, rel=1e-9, abs=0.0), f"step {step}, head group {is_head}: lr {got}"
    assert not module.model.pooler.dense.weight.requires_grad, "the unused pooler stays frozen after the fit"
    assert all(p.requires_grad for n, p in module.model.named_parameters() if not n.startswith("pooler."))


class _AtBase(ProbeWatch):
    """A ProbeWatch that notes, at each check, whether the encoder is still ``base``."""

    base: dict
    seen: list

    def embed(self, pl_module):
        self.seen = [*getattr(self, "seen", []), _same(pl_module.model.state_dict(), self.base)]
        return super().embed(pl_module)


def test_the_probe_watch_skips_the_head_warm_up_and_scores_the_base_at_step_0(tiny_bert, corpus_file, tmp_path):
    fx = Path(__file__).resolve().parents[1] / "fixtures"
    L.seed_everything(0, verbose=False)
    module = TsdaeModule(str(tiny_bert), learning_rate=1e-2, pooling="mean", head_warmup_steps=2)
    watch = _AtBase(str(fx / "cls_train.jsonl"), str(fx / "cls_val.jsonl"), 1, patience=None, restore_best=False)
    watch.base = {k: v.detach().clone() for k, v in module.model.state_dict().items()}
    trainer = L.Trainer(
        accelerator="cpu", max_steps=4, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, limit_val_batches=0, default_root_dir=tmp_path, callbacks=[watch],
    )  # fmt: skip
    trainer.fit(module, datamodule=small_corpus(module, corpus_file, tmp_path, packing=False))
    assert [h["step"] for h in watch.history] == [0, 3, 4], "no check during the warm-up (steps 1, 2)"
    assert watch.seen == [True, False, False], "step 0 scores the base encoder; later checks the trained one"


def test_the_export_is_the_trained_encoder_with_its_pooling(tiny_bert, corpus_file, tmp_path):
    from transformers import AutoModel

    L.seed_everything(0, verbose=False)
    module = TsdaeModule(str(tiny_bert), learning_rate=1e-3, pooling="mean", head_warmup_steps=0)
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
    args += ["--data.init_args.max_length=64", "--trainer.limit_val_batches=1", "--model.head_warmup_steps=1"]
    report = tiny_pipeline(
        tiny_bert, out, [0], tsdae=TsdaeSpec(enabled=True, args=args, watch=WatchSpec(**OPEN_GATE))
    ).read_text()
    state = read_state(out / "state.json")
    fit = yaml.safe_load((Path(state["tsdae"]["run"]) / "config.yaml").read_text())
    assert fit["model"]["class_path"] == "domainbert.modules.tsdae.TsdaeModule"
    assert fit["model"]["init_args"]["init_from"] == str(tiny_bert)
    assert fit["data"]["init_args"]["packing"] is False
    assert (Path(state["tsdae"]["run"]) / "probe_watch.json").is_file(), "the task is watched"
    tuned = yaml.safe_load((Path(state["finetune-tsdae-seed0"]["run"]) / "config.yaml").read_text())
    assert tuned["model"]["init_args"]["init_from"] == state["tsdae"]["hf"]
    assert fit["model"]["init_args"]["pooling"] == tuned["model"]["init_args"]["pooling"]
    assert any(line.startswith("| tsdae |") for line in report.splitlines()), "a row of the report"
