"""ProbeWatch through the Trainer: step 0 is scored as a hand-fitted probe would score it; a harmful fit stops early
and hands back the base model's weights, for the masked-LM and the contrastive module."""

import csv
import json
from pathlib import Path

import lightning.pytorch as L
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger

from domainbert.adapt.probe_cmd import read_split
from domainbert.adapt.watch import ProbeWatch
from domainbert.core.callbacks import HFExport
from domainbert.core.embed import embed_texts
from domainbert.core.probe import fit_logreg, select_probe
from domainbert.core.stats import macro_f1
from domainbert.modules.contrastive import ContrastiveModule
from domainbert.modules.mlm import MaskedLMModule
from tests.helpers.mlm import small_corpus

FX = Path(__file__).resolve().parents[1] / "fixtures"
TRAIN, VAL = str(FX / "cls_train.jsonl"), str(FX / "cls_val.jsonl")


def _trainer(tmp_path, max_steps: int, callbacks) -> L.Trainer:
    return L.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=max_steps,
        logger=CSVLogger(tmp_path, name="run", version=0),
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        callbacks=callbacks,
    )


def _noisy(tmp_path) -> tuple[str, str]:
    """The fixture task with every third row's label rotated, so a probe scores neither 0 nor 1 (C matters)."""
    out = []
    for path in (TRAIN, VAL):
        rows = [json.loads(line) for line in Path(path).read_text().splitlines()]
        labels = sorted({r["label"] for r in rows})
        for i, row in enumerate(rows):
            if i % 3 == 0:
                row["label"] = labels[(labels.index(row["label"]) + 1) % len(labels)]
        noisy = tmp_path / f"noisy_{Path(path).name}"
        noisy.write_text("".join(json.dumps(r) + "\n" for r in rows))
        out.append(str(noisy))
    return out[0], out[1]


def _task(train: str, val: str):
    texts, names = read_split(train, "text", None, "label", None)
    labels = sorted(set(names))
    val_texts, val_names = read_split(val, "text", None, "label", labels)
    ids = {n: i for i, n in enumerate(labels)}
    return texts, torch.tensor([ids[n] for n in names]), val_texts, torch.tensor([ids[n] for n in val_names]), labels


class _Recording(ProbeWatch):
    """A ProbeWatch that keeps the embeddings of every check."""

    def embed(self, pl_module):
        x = super().embed(pl_module)
        self.seen = [*getattr(self, "seen", []), {k: v.clone() for k, v in x.items()}]
        return x


def test_step_zero_and_later_checks_equal_a_hand_fitted_probe(tiny_bert, corpus_file, tmp_path):
    L.seed_everything(0, verbose=False)
    module = MaskedLMModule(str(tiny_bert), learning_rate=1e-3, warmup_ratio=0.0, head_warmup_steps=0)
    train, val = _noisy(tmp_path)
    texts, y, val_texts, y_val, labels = _task(train, val)
    x = embed_texts(module.model.base_model, module.tokenizer, texts)  # the base model, before fit
    x_val = embed_texts(module.model.base_model, module.tokenizer, val_texts)
    module.train()
    hand = select_probe(x, y, x_val, y_val, len(labels))
    hand_score = macro_f1(y_val.numpy(), hand.logits(x_val).argmax(-1).numpy(), len(labels))
    assert 0.2 < hand_score < 0.95, "a task the probe neither solves nor fails, so the comparison can fail"

    watch = _Recording(train, val, every_n_steps=2, patience=None)
    _trainer(tmp_path, 4, [watch]).fit(module, datamodule=small_corpus(module, corpus_file, tmp_path))

    assert [h["step"] for h in watch.history] == [0, 2, 4]
    assert watch.history[0]["score"] == pytest.approx(hand_score, abs=1e-12)
    assert watch.c == hand.c, "C is chosen at step 0 on validation"
    assert torch.equal(watch.seen[0]["train"], x), "step 0 embeds the base model"
    later = watch.seen[1]
    assert not torch.equal(later["train"], x), "step 2 embeds the adapted encoder"
    refit = fit_logreg(later["train"], y, len(labels), hand.c)
    refit_score = macro_f1(y_val.numpy(), refit.logits(later["val"]).argmax(-1).numpy(), len(labels))
    assert watch.history[1]["score"] == pytest.approx(refit_score, abs=1e-12), "later checks keep step 0's C"
    rows = list(csv.DictReader((tmp_path / "run" / "version_0" / "metrics.csv").open()))
    logged = {int(r["step"]): float(r["probe/val_f1_macro"]) for r in rows if r.get("probe/val_f1_macro")}
    assert logged == pytest.approx({h["step"]: h["score"] for h in watch.history})


def _mlm(tiny_bert):
    return MaskedLMModule(str(tiny_bert), learning_rate=5.0, warmup_ratio=0.0, head_warmup_steps=0)


def _contrastive(tiny_bert):
    return ContrastiveModule(str(tiny_bert), learning_rate=5.0, warmup_ratio=0.0)


@pytest.mark.parametrize("make", [_mlm, _contrastive], ids=["mlm", "contrastive"])
def test_harmful_adaptation_stops_within_patience_and_restores_the_base(make, tiny_bert, corpus_file, tmp_path):
    L.seed_everything(0, verbose=False)
    module = make(tiny_bert)
    base = {k: v.detach().clone() for k, v in module.state_dict().items()}
    export = HFExport(enabled=False)
    watch = ProbeWatch(TRAIN, VAL, every_n_steps=1, patience=2)
    dm = small_corpus(module, corpus_file, tmp_path, packing=isinstance(module, MaskedLMModule))
    trainer = _trainer(tmp_path, 30, [watch, export])
    trainer.fit(module, datamodule=dm)

    assert trainer.global_step == 2, "two checks without improvement, then the fit stops"
    assert [h["step"] for h in watch.history] == [0, 1, 2]
    assert all(h["score"] < watch.history[0]["score"] for h in watch.history[1:]), "the huge LR hurt the probe"
    assert watch.best_step == 0
    assert watch.summary.startswith("adaptation did not improve the task's probe: step 0 probe ")
    state = module.state_dict()
    assert all(torch.equal(state[k], v) for k, v in base.items()), "the base model's weights are back"
    assert export.restore_best is False, "the export takes the probe's pick, not another checkpoint"
    record = json.loads((tmp_path / "run" / "version_0" / "probe_watch.json").read_text())
    assert record["best_step"] == 0 and record["restored"] and len(record["history"]) == 3
