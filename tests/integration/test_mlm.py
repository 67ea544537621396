import lightning.pytorch as L
import pytest
import torch
from transformers import AutoModelForMaskedLM, AutoModelForSequenceClassification, AutoTokenizer, BertModel

from domainbert.modules.mlm import MaskedLMModule
from tests.helpers.mlm import fixed_batch, small_corpus


def _trainer(tmp_path, steps, **kw):
    kw.setdefault("callbacks", [])
    return L.Trainer(
        max_steps=steps,
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=kw.pop("enable_checkpointing", False),
        default_root_dir=tmp_path,
        limit_val_batches=0,
        gradient_clip_val=1.0,
        **kw,
    )


@pytest.mark.parametrize("family", ["bert", "roberta", "albert", "distilbert", "electra"])
def test_loss_falls_over_30_steps(tiny_models, corpus_file, tmp_path, family):
    torch.manual_seed(0)
    module = MaskedLMModule(str(tiny_models[family]), learning_rate=3e-3, warmup_ratio=0.1, head_warmup_steps=0)
    dm = small_corpus(module, corpus_file, tmp_path)
    batch = fixed_batch(dm)
    module.eval()
    with torch.no_grad():
        before = module(batch, salt=123)["loss"].item()
    _trainer(tmp_path, 30).fit(module, datamodule=dm)
    module.eval()
    with torch.no_grad():
        after = module(batch, salt=123)["loss"].item()
    assert after < before - 0.3, (family, before, after)


@pytest.fixture
def headless_bert(tiny_bert, tmp_path):
    """A BERT checkpoint saved without its MLM head (like a sentence-embedding model), with a pooler."""
    torch.manual_seed(1)
    base = BertModel.from_pretrained(tiny_bert, add_pooling_layer=True)
    torch.nn.init.normal_(base.pooler.dense.weight)
    out = tmp_path / "headless"
    base.save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_bert).save_pretrained(out)
    return out


class _Snapshot(L.Callback):
    def __init__(self):
        self.encoder, self.head = [], []

    def on_train_batch_start(self, trainer, module, batch, idx):
        enc = torch.cat([p.detach().flatten() for n, p in module.named_parameters() if not module.is_head_param(n)])
        head = torch.cat([p.detach().flatten() for n, p in module.named_parameters() if module.is_head_param(n)])
        self.encoder.append(enc.clone())
        self.head.append(head.clone())


def test_head_warmup_keeps_the_encoder_frozen(headless_bert, corpus_file, tmp_path):
    module = MaskedLMModule(str(headless_bert), learning_rate=1e-3, head_warmup_steps=None, head_warmup_lr=1e-2)
    assert module.head_missing and module.head_warmup_steps == 100, "missing head detected, warm-up on by default"
    module.head_warmup_steps = 4
    snap = _Snapshot()
    _trainer(tmp_path, 7, callbacks=[snap]).fit(module, datamodule=small_corpus(module, corpus_file, tmp_path))
    # snapshots are taken before steps 0..6; steps 0-3 are the warm-up
    for i in range(1, 5):
        assert torch.equal(snap.encoder[i], snap.encoder[0]), f"encoder moved during warm-up step {i - 1}"
        assert not torch.equal(snap.head[i], snap.head[i - 1]), "the head must train during warm-up"
    assert not torch.equal(snap.encoder[6], snap.encoder[4]), "the encoder trains after the warm-up"


def test_export_round_trip_and_pooler_kept(headless_bert, corpus_file, tmp_path):
    module = MaskedLMModule(str(headless_bert), head_warmup_steps=0)
    _trainer(tmp_path, 3).fit(module, datamodule=small_corpus(module, corpus_file, tmp_path))
    out = module.export_hf(tmp_path / "hf")
    module.eval()
    reloaded = AutoModelForMaskedLM.from_pretrained(out).eval()
    tok = AutoTokenizer.from_pretrained(out)
    enc = tok(["the daemon parses packets", "a plugin"], return_tensors="pt", padding=True)
    with torch.no_grad():
        assert torch.equal(module.model(**enc).logits, reloaded(**enc).logits)
    cls = AutoModelForSequenceClassification.from_pretrained(out, num_labels=3)
    src = BertModel.from_pretrained(headless_bert)
    assert torch.equal(cls.bert.pooler.dense.weight, src.pooler.dense.weight), "the trained pooler was lost"
    assert (out / "README.md").read_text().startswith("---")


def test_resume_continues_at_the_right_step(tiny_bert, corpus_file, tmp_path):
    from lightning.pytorch.callbacks import ModelCheckpoint

    module = MaskedLMModule(str(tiny_bert), head_warmup_steps=0)
    ckpt = ModelCheckpoint(dirpath=tmp_path / "ck", every_n_train_steps=3, save_top_k=-1)
    _trainer(tmp_path, 6, callbacks=[ckpt], enable_checkpointing=True).fit(
        module, datamodule=small_corpus(module, corpus_file, tmp_path)
    )
    path = next(p for p in (tmp_path / "ck").iterdir() if "step=3" in p.name)

    seen = []

    class Spy(L.Callback):
        def on_train_batch_start(self, trainer, m, batch, idx):
            seen.append((trainer.global_step, trainer.optimizers[0].param_groups[0]["lr"]))

    fresh = MaskedLMModule(str(tiny_bert), head_warmup_steps=0)
    trainer = _trainer(tmp_path, 6, callbacks=[Spy()])
    trainer.fit(fresh, datamodule=small_corpus(fresh, corpus_file, tmp_path), ckpt_path=str(path))
    assert seen[0][0] == 3 and trainer.global_step == 6
    state = torch.load(path, weights_only=True)
    assert state["lr_schedulers"][0]["last_epoch"] == 3
    assert state["optimizer_states"][0]["state"], "optimizer moments are saved"


def test_compiled_encoder_trains_like_the_eager_one_and_saves_each_weight_once(tiny_bert, corpus_file, tmp_path):
    """``compile: true`` follows the eager run's weights, and the checkpoint has no compiled copy.

    Dropout is off: compiled kernels draw their dropout masks from their own generator.
    """
    runs = {}
    for compiled in (False, True):
        L.seed_everything(0, verbose=False)
        module = MaskedLMModule(
            str(tiny_bert),
            learning_rate=3e-3,
            head_warmup_steps=0,
            hidden_dropout=0.0,
            attention_dropout=0.0,
            compile=compiled,
        )
        dm = small_corpus(module, corpus_file, tmp_path)
        _trainer(tmp_path / str(compiled), 3).fit(module, datamodule=dm)
        runs[compiled] = module
    eager, compiled = runs[False], runs[True]
    assert compiled._encoder is not None and eager._encoder is None
    assert compiled.state_dict().keys() == eager.state_dict().keys()
    for name, p in eager.state_dict().items():
        torch.testing.assert_close(compiled.state_dict()[name], p, rtol=1e-3, atol=1e-4, msg=name)
