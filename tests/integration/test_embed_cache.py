"""The embedding cache across stages on the tiny model: ``domainbert probe`` fills it; the fine-tuning head start,
``domainbert fit`` itself, ``domainbert select`` and ProbeWatch's step 0 read it, say so in one line each, and give
the numbers they give with the cache off."""

from __future__ import annotations

import json

import lightning.pytorch as L
import pytest
import torch
from safetensors.torch import load_file

from domainbert.adapt.probe_cmd import probe
from domainbert.core import cache_store
from domainbert.core.hardware import auto_precision
from domainbert.data.classification import ClassificationDataModule
from domainbert.modules.classification import SequenceClassificationModule
from domainbert.modules.probe_init import init_head_from_probe
from tests.helpers import FIX, TINY_CLS

TRAIN, VAL, TEST = (str(FIX / f) for f in ("cls_sep_train.jsonl", "cls_sep_val.jsonl", "cls_test.jsonl"))
LABELS = ["api", "graphics", "network"]


def _lines(capsys) -> list[str]:
    out = capsys.readouterr().out.splitlines()
    return [line for line in out if line.startswith("[cache]") and not line.startswith("[cache] tokenized")]


def _head_start(tiny_bert) -> torch.Tensor:
    module = SequenceClassificationModule(str(tiny_bert), label_names=LABELS, pooling="mean")
    dm = ClassificationDataModule(train=TRAIN, val=VAL, batch_size=8)
    dm.connect(module.tokenizer)
    dm.setup("fit")
    init_head_from_probe(module.model, dm, 3)
    return torch.cat([module.model.classifier.weight, module.model.classifier.bias[:, None]], 1).detach().clone()


def test_the_head_start_reads_the_probe_stages_fit_and_equals_it_uncached(tiny_bert, tmp_path, capsys, monkeypatch):
    result = probe(str(tiny_bert), TRAIN, str(tmp_path / "probe"), val=VAL, test=TEST)
    stored = _lines(capsys)
    assert len(stored) == 4 and all(" computed in " in x or " fitted, stored in " in x for x in stored)
    head = _head_start(tiny_bert)
    (line,) = _lines(capsys)
    assert line.startswith(f"[cache] probe of cls_sep_train.jsonl (C={result['c']}, 3 labels) reused from ")
    key = line.rsplit("/", 1)[1].removesuffix("…")  # the line names the stored fit (its path may be cut short)
    assert line.endswith("…") and len(key) == 12
    assert [f.name for f in (cache_store.root() / "probes").glob(f"{key}*.safetensors")], line
    weights = load_file(result["weights"])
    assert torch.equal(head, torch.cat([weights["weight"], weights["bias"][:, None]], 1))

    monkeypatch.setenv(cache_store.ENV, "off")
    assert torch.equal(_head_start(tiny_bert), head), "the same head with the cache off"
    assert _lines(capsys) == []


def test_a_second_probe_embeds_nothing_and_scores_the_same(tiny_bert, tmp_path, capsys, monkeypatch):
    first = probe(str(tiny_bert), TRAIN, str(tmp_path / "a"), val=VAL, test=TEST)
    native = auto_precision("cpu") == "bf16-mixed"  # the probe embeds in bf16 where bf16 is native
    assert first["scoring"] == {"max_length": 128, "precision": "bf16-mixed" if native else "32-true"}
    capsys.readouterr()
    import domainbert.core.hf as hf

    monkeypatch.setattr(hf, "load_model", lambda *a, **k: pytest.fail("a full hit loads no model"))
    second = probe(str(tiny_bert), TRAIN, str(tmp_path / "b"), val=VAL, test=TEST)
    assert all(" reused from " in x for x in _lines(capsys))
    for key in ("c", "val", "test", "val_scores"):
        assert second[key] == first[key]
    assert json.loads((tmp_path / "a" / "test_predictions.json").read_text()) == json.loads(
        (tmp_path / "b" / "test_predictions.json").read_text()
    )


def test_domainbert_fit_logs_the_head_starts_cache_hit(tiny_bert, tmp_path, capsys):
    from domainbert.cli import cli_main

    train, val = str(FIX / "cls_train.jsonl"), str(FIX / "cls_val.jsonl")  # the tiny config's files and max_length
    probe(str(tiny_bert), train, str(tmp_path / "probe"), val=val, max_length=64)
    capsys.readouterr()
    args = ["fit", "--config", TINY_CLS, "--model.init_from", str(tiny_bert), "--model.pooling", "mean"]
    args += ["--model.head_init", "probe", "--trainer.max_steps", "1", "--trainer.default_root_dir", str(tmp_path)]
    cli_main(args)
    (line,) = _lines(capsys)
    assert line.startswith("[cache] probe of cls_train.jsonl (C=") and " reused from " in line


def test_select_reuses_the_probes_task_embeddings_and_its_own_corpus_embeddings(tiny_bert, tmp_path, capsys):
    from domainbert.adapt.select import select

    probe(str(tiny_bert), TRAIN, str(tmp_path / "probe"), val=VAL)
    capsys.readouterr()
    corpus = str(FIX / "corpus.txt")
    first = select(str(tiny_bert), corpus, TRAIN, str(tmp_path / "s1"), k=2)
    task, docs = _lines(capsys)
    assert "embeddings of cls_sep_train.jsonl (60 rows" in task and " reused from " in task
    assert "embeddings of corpus.txt (" in docs and " computed in " in docs
    second = select(str(tiny_bert), corpus, TRAIN, str(tmp_path / "s2"), k=2)
    assert all(" reused from " in x for x in _lines(capsys)) and second["documents"] == first["documents"]
    assert (tmp_path / "s1" / "corpus.jsonl").read_text() == (tmp_path / "s2" / "corpus.jsonl").read_text()


def test_probewatch_step_zero_reads_the_probe_stages_embeddings_and_probe(tiny_bert, corpus_file, tmp_path, capsys):
    from domainbert.adapt.watch import ProbeWatch
    from domainbert.modules.mlm import MaskedLMModule
    from tests.helpers.mlm import small_corpus

    result = probe(str(tiny_bert), TRAIN, str(tmp_path / "probe"), val=VAL)
    capsys.readouterr()
    L.seed_everything(0, verbose=False)
    module = MaskedLMModule(str(tiny_bert), learning_rate=1e-3, warmup_ratio=0.0, head_warmup_steps=0)
    watch = ProbeWatch(TRAIN, VAL, every_n_steps=1, patience=None)
    trainer = L.Trainer(
        accelerator="cpu", max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, limit_val_batches=0, callbacks=[watch], default_root_dir=tmp_path,
    )  # fmt: skip
    trainer.fit(module, datamodule=small_corpus(module, corpus_file, tmp_path))
    lines = _lines(capsys)
    assert len(lines) == 3 and all(" reused from " in x for x in lines), lines
    assert watch.c == result["c"] and watch.history[0]["score"] == pytest.approx(result["val"]["f1_macro"], abs=1e-12)
    assert [h["step"] for h in watch.history] == [0, 1], "the adapted step is checked, uncached"
