"""LoRA-DAPT through the Trainer: the loss falls, the encoder's weights stay, the merged export reloads without peft;
checkpoints resume, the head warm-up holds the adapters, ProbeWatch restores its pick, the pipeline stage args work."""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as L
import pytest
import torch
import yaml
from lightning.pytorch.callbacks import ModelCheckpoint
from safetensors.torch import load_file
from transformers import AutoModelForMaskedLM, AutoTokenizer, BertModel

from domainbert.adapt.watch import ProbeWatch
from domainbert.core.callbacks import HFExport
from domainbert.modules.lora import LoraSettings
from domainbert.modules.mlm import MaskedLMModule
from domainbert.pipeline import PretrainSpec, WatchSpec
from domainbert.pipeline.runner import read_state
from tests.helpers.mlm import fixed_batch, small_corpus
from tests.helpers.pipeline_tiny import tiny_pipeline

FX = Path(__file__).resolve().parents[1] / "fixtures"
NO_DROPOUT = LoraSettings(r=4, alpha=8, dropout=0.0)


def _trainer(tmp_path, steps: int, callbacks=(), **kw) -> L.Trainer:
    return L.Trainer(
        max_steps=steps,
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=bool(kw.pop("checkpointing", False)),
        default_root_dir=tmp_path,
        limit_val_batches=0,
        callbacks=list(callbacks),
        **kw,
    )


def _module(path, **kw) -> MaskedLMModule:
    kw.setdefault("head_warmup_steps", 0)
    return MaskedLMModule(str(path), warmup_ratio=0.0, lora=kw.pop("lora", NO_DROPOUT), **kw)


def _inputs(batch) -> dict:
    return {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in batch}


def _encoder_weights(module) -> dict[str, torch.Tensor]:
    """The encoder's own weights (not the adapters', not the head's), cloned."""
    named = module.named_parameters()
    return {n: p.detach().clone() for n, p in named if not module.is_head_param(n) and "lora_" not in n}


def _logits(model, batch) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(**_inputs(batch)).logits


@pytest.mark.parametrize("family,whole_word", [("bert", True), ("roberta", False), ("electra", False)])
def test_loss_falls_the_encoder_stays_and_the_export_reloads_without_peft(
    tiny_models, corpus_file, tmp_path, family, whole_word
):
    torch.manual_seed(0)
    module = _module(tiny_models[family], learning_rate=5e-2, whole_word_mask=whole_word)
    dm = small_corpus(module, corpus_file, tmp_path)
    batch = fixed_batch(dm)
    module.eval()
    with torch.no_grad():
        before = module(batch, salt=123)["loss"].item()
    encoder = _encoder_weights(module)
    export = HFExport()
    _trainer(tmp_path, 30, [export]).fit(module, datamodule=dm)
    module.eval()
    with torch.no_grad():
        after = module(batch, salt=123)["loss"].item()
    assert after < before - 0.3, (family, before, after)
    assert all(torch.equal(p, encoder[n]) for n, p in _encoder_weights(module).items())
    assert any(p.abs().sum() > 0 for n, p in module.named_parameters() if "lora_B" in n)
    keys = load_file(str(export.path / "model.safetensors")).keys()
    assert not any("lora" in k or "base_layer" in k for k in keys)
    reloaded = AutoModelForMaskedLM.from_pretrained(export.path)
    torch.testing.assert_close(_logits(reloaded, batch), _logits(module.model, batch), atol=1e-5, rtol=1e-4)


def test_a_checkpoint_resumes_to_the_uninterrupted_weights_and_the_best_one_restores(tiny_bert, corpus_file, tmp_path):
    def fit(root, ckpt=None):
        torch.manual_seed(0)
        module = _module(tiny_bert, learning_rate=1e-2)
        dm = small_corpus(module, corpus_file, tmp_path)
        saver = ModelCheckpoint(root / "ck", monitor="train/loss", every_n_train_steps=4, save_top_k=-1)
        export = HFExport()
        _trainer(root, 8, [saver, export], checkpointing=True).fit(module, datamodule=dm, ckpt_path=ckpt)
        return module, saver, export

    a, saver, export = fit(tmp_path / "a")
    assert Path(saver.best_model_path).is_file() and (export.path / "model.safetensors").is_file()
    (mid,) = (tmp_path / "a" / "ck").glob("*step=4*.ckpt")
    assert torch.load(mid, weights_only=True)["hyper_parameters"]["lora"]["r"] == 4  # plain data in checkpoints
    b, _, _ = fit(tmp_path / "b", ckpt=str(mid))
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys() and any("lora_A" in k for k in sa)
    for k in sa:
        torch.testing.assert_close(sa[k], sb[k], rtol=0, atol=1e-6, msg=k)


@pytest.fixture
def headless_bert(tiny_bert, tmp_path):
    """A BERT checkpoint saved without its MLM head (like a sentence-embedding model)."""
    out = tmp_path / "headless"
    BertModel.from_pretrained(tiny_bert, add_pooling_layer=False).save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_bert).save_pretrained(out)
    return out


class _Snapshots(L.Callback):
    """The adapters, the head and the encoder's own weights before each training batch."""

    def __init__(self):
        self.seen = []

    def on_train_batch_start(self, trainer, module, batch, idx):
        parts = {"adapters": [], "head": [], "encoder": []}
        for n, p in module.named_parameters():
            part = "adapters" if "lora_" in n else "head" if module.is_head_param(n) else "encoder"
            parts[part].append(p.detach().flatten())
        self.seen.append({k: torch.cat(v).clone() for k, v in parts.items()})


def test_the_head_warm_up_holds_the_adapters_then_trains_them_and_never_the_encoder(
    headless_bert, corpus_file, tmp_path
):
    torch.manual_seed(0)
    module = _module(headless_bert, learning_rate=1e-2, head_warmup_steps=3)
    assert module.head_missing and module.head_warmup_steps == 3
    snaps = _Snapshots()
    _trainer(tmp_path, 6, [snaps]).fit(module, datamodule=small_corpus(module, corpus_file, tmp_path))
    s = snaps.seen  # s[i]: the weights before step i's update
    assert all(torch.equal(s[i]["adapters"], s[0]["adapters"]) for i in range(4)), "frozen during the warm-up"
    assert not torch.equal(s[5]["adapters"], s[3]["adapters"]), "trained after it"
    assert not torch.equal(s[1]["head"], s[0]["head"]), "the head trains from the first step"
    assert all(torch.equal(x["encoder"], s[0]["encoder"]) for x in s), "the encoder's weights never move"
    trainable = {n for n, p in module.named_parameters() if p.requires_grad}
    assert trainable == module.encoder_trainable | {n for n, _ in module.named_parameters() if module.is_head_param(n)}


class _Keeping(ProbeWatch):
    """A ProbeWatch that keeps the module's state and the embeddings at every check."""

    states: list
    embedded: list

    def check(self, trainer, pl_module, step):
        self.states = [*getattr(self, "states", []), {k: v.clone() for k, v in pl_module.state_dict().items()}]
        super().check(trainer, pl_module, step)

    def embed(self, pl_module):
        x = super().embed(pl_module)
        self.embedded = [*getattr(self, "embedded", []), x["train"].clone()]
        return x


def test_probe_watch_sees_the_adapted_encoder_and_restores_its_pick(tiny_bert, corpus_file, tmp_path):
    torch.manual_seed(0)
    module = _module(tiny_bert, learning_rate=0.5)
    watch = _Keeping(str(FX / "cls_train.jsonl"), str(FX / "cls_val.jsonl"), every_n_steps=2, patience=None)
    export = HFExport()
    dm = small_corpus(module, corpus_file, tmp_path, packing=True)
    _trainer(tmp_path, 6, [watch, export]).fit(module, datamodule=dm)
    assert [h["step"] for h in watch.history] == [0, 2, 4, 6]
    assert not torch.equal(watch.embedded[1], watch.embedded[0]), "step 2 embeds through the adapters"
    assert any("lora_B" in k for k in watch.best_state)
    picked = watch.states[[h["step"] for h in watch.history].index(watch.best_step)]
    state = module.state_dict()
    assert state.keys() == picked.keys() and all(torch.equal(state[k], v) for k, v in picked.items())
    batch = fixed_batch(dm)
    reloaded = AutoModelForMaskedLM.from_pretrained(export.path)
    torch.testing.assert_close(_logits(reloaded, batch), _logits(module.model, batch), atol=1e-5, rtol=1e-4)


def test_the_pipelines_dapt_stage_takes_lora_through_its_args(tiny_bert, tmp_path):
    out = tmp_path / "p"
    small = ["--trainer.max_steps=8", "--trainer.val_check_interval=4", "--trainer.limit_val_batches=2"]
    small += ["--data.batch_size=8", "--data.max_length=32", "--trainer.enable_progress_bar=false"]
    lora = ["--model.lora", "{r: 4}", "--model.learning_rate", "1.0e-2"]
    # the built-in dapt.yaml stage, unwatched: it exports its best val/loss checkpoint (test_probe_watch_sees_... above
    # covers the watch)
    dapt = PretrainSpec(None, [*small, *lora], watch=WatchSpec(enabled=False))
    tiny_pipeline(tiny_bert, out, [0], dapt=dapt)
    state = read_state(out / "state.json")
    assert state["dapt"]["status"] == "done" and state["finetune-dapt-seed0"]["status"] == "done"
    run = out / "dapt" / "run" / "version_0"
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["model"]["init_args"]["lora"]["r"] == 4
    hf = Path(state["dapt"]["hf"])
    weights = load_file(str(hf / "model.safetensors"))
    assert not any("lora" in k or "base_layer" in k for k in weights)
    base = load_file(str(Path(tiny_bert) / "model.safetensors"))
    query = "bert.encoder.layer.0.attention.self.query.weight"
    embeddings = "bert.embeddings.word_embeddings.weight"
    assert torch.equal(weights[embeddings], base[embeddings]), "the embeddings stay frozen"
    assert not torch.equal(weights[query], base[query]), "the adapters are merged into the query"
    AutoModelForMaskedLM.from_pretrained(hf)
