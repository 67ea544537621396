"""Exports are never silently wrong: mean-pooling exports in plain transformers, pooling files through MLM exports,
and one-line errors for folders with code of their own or a half-written ``config.json``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForSequenceClassification, pipeline

from domainbert.core.embed import native_pooling
from domainbert.core.hf import load_config, load_model, load_tokenizer
from domainbert.core.pooled import FAMILY_KEY, MODEL_TYPE
from domainbert.deploy.load import load_variant
from domainbert.errors import DomainBertError
from domainbert.modules.classification import SequenceClassificationModule, resolve_pooling

LABELS = ["api", "graphics", "network"]
bad_input = pytest.mark.faults(bad_inputs=1)


def _copy(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest)
    return dest


def _edit_config(folder: Path, **fields) -> None:
    path = folder / "config.json"
    data = json.loads(path.read_text())
    for key, value in fields.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    path.write_text(json.dumps(data))


def _batch(tok) -> dict:
    enc = tok(["graphical images here", "secure sockets using many threads today"], padding=True, return_tensors="pt")
    return {k: v for k, v in enc.items() if k in tok.model_input_names}


def _sentence_transformers(tiny_bert: Path, dest: Path, mode: str = "mean") -> Path:
    """``tiny_bert`` as a sentence-transformers folder pooled by ``mode``."""
    _copy(tiny_bert, dest)
    (dest / "modules.json").write_text(
        '[{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}, '
        '{"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}, '
        '{"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]'
    )
    (dest / "1_Pooling").mkdir()
    flags = {"pooling_mode_mean_tokens": mode == "mean", "pooling_mode_cls_token": mode == "cls"}
    (dest / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 32, **flags}))
    (dest / "2_Normalize").mkdir()
    return dest


@pytest.fixture(scope="module")
def mean_export(tiny_bert, tmp_path_factory):
    """A mean-pooling classifier's export, and the logits domainbert's module gives on ``_batch``."""
    module = SequenceClassificationModule(str(tiny_bert), label_names=LABELS, pooling="mean")
    out = module.export_hf(tmp_path_factory.mktemp("mean") / "hf")
    with torch.no_grad():
        logits = module.model.eval()(**_batch(module.tokenizer)).logits
    return out, logits


# -- item 1: a mean-pooling export in plain transformers ------------------------------------------------------------


def test_plain_transformers_refuses_a_mean_pooling_export_and_names_trust_remote_code(mean_export):
    out, _ = mean_export
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == MODEL_TYPE and config[FAMILY_KEY] == "bert"
    assert config["auto_map"]["AutoConfig"].startswith("modeling_domainbert.")
    with pytest.raises(ValueError, match="trust_remote_code=True"):
        AutoModelForSequenceClassification.from_pretrained(out, trust_remote_code=False)
    with pytest.raises(ValueError, match="trust_remote_code=True"):
        pipeline("text-classification", model=str(out))  # left unset: no prompt can be answered under pytest


def test_with_trust_remote_code_transformers_gives_domainberts_logits(mean_export):
    out, logits = mean_export
    batch = _batch(load_tokenizer(str(out)))
    remote = AutoModelForSequenceClassification.from_pretrained(out, trust_remote_code=True).eval()
    torch.testing.assert_close(remote(**batch).logits, logits)
    pipe = pipeline("text-classification", model=str(out), trust_remote_code=True)
    assert pipe("graphical images here")[0]["label"] in LABELS


def test_domainberts_loaders_read_a_mean_pooling_export_without_its_code(mean_export):
    out, logits = mean_export
    batch = _batch(load_tokenizer(str(out)))
    config = load_config(str(out))
    assert config.model_type == "bert" and not getattr(config, "auto_map", None)
    own, missing = load_model(AutoModelForSequenceClassification, str(out))
    assert not missing
    torch.testing.assert_close(own.eval()(**batch).logits, logits)
    variant, _, _ = load_variant(out)
    torch.testing.assert_close(variant(**batch).logits, logits)
    again = SequenceClassificationModule(str(out))  # labels from the export, pooling: auto
    assert again.pooling == "mean" and again.label_names == LABELS
    assert resolve_pooling("auto", str(out)) == "mean"


def test_the_mean_pooling_exports_family_is_read_for_resume_checks_and_pseudo_labels(mean_export):
    from domainbert.adapt.pseudo import label_names
    from domainbert.core.checks import source_family

    out, _ = mean_export
    assert source_family(str(out)) == "bert"
    assert label_names(str(out)) == LABELS


def test_a_cls_export_still_loads_in_plain_transformers_with_domainberts_logits(tiny_bert, tmp_path):
    module = SequenceClassificationModule(str(tiny_bert), label_names=LABELS, pooling="cls")
    out = module.export_hf(tmp_path / "hf")
    assert json.loads((out / "config.json").read_text())["model_type"] == "bert"
    assert not (out / "modeling_domainbert.py").exists()
    batch = _batch(module.tokenizer)
    plain = AutoModelForSequenceClassification.from_pretrained(out).eval()
    with torch.no_grad():
        torch.testing.assert_close(plain(**batch).logits, module.model.eval()(**batch).logits)


def test_an_export_written_before_keeps_loading_as_a_mean_pooling_classifier(mean_export, tmp_path):
    """Exports of earlier versions kept the family's model_type and named only the classifier in auto_map."""
    out, logits = mean_export
    old = _copy(out, tmp_path / "old")
    auto_map = {"AutoModelForSequenceClassification": "modeling_domainbert.MeanPoolingBertForSequenceClassification"}
    _edit_config(old, model_type="bert", auto_map=auto_map, **{FAMILY_KEY: None})
    assert resolve_pooling("auto", str(old)) == "mean"
    model, missing = load_model(AutoModelForSequenceClassification, str(old))
    assert not missing and type(model).__name__ == "MeanPoolingBertForSequenceClassification"
    torch.testing.assert_close(model.eval()(**_batch(load_tokenizer(str(old)))).logits, logits)


# -- item 2: an MLM export carries the pooling that ``pooling: auto`` reads ------------------------------------------


def test_an_mlm_export_of_a_mean_pooled_checkpoint_fine_tunes_through_the_mean(tiny_bert, tmp_path):
    from domainbert.modules.mlm import MaskedLMModule

    st = _sentence_transformers(tiny_bert, tmp_path / "st")
    assert resolve_pooling("auto", str(st)) == "mean"
    out = MaskedLMModule(str(st), head_warmup_steps=0).export_hf(tmp_path / "dapt" / "hf")
    assert native_pooling(out) == "mean" and (out / "2_Normalize").is_dir()
    assert resolve_pooling("auto", str(out)) == "mean"
    module = SequenceClassificationModule(str(out), label_names=LABELS, head_init="auto")  # the finetune configs
    assert module.pooling == "mean" and module.head_init == "probe"
    plain = MaskedLMModule(str(tiny_bert), head_warmup_steps=0).export_hf(tmp_path / "plain" / "hf")
    assert not (plain / "modules.json").exists() and resolve_pooling("auto", str(plain)) == "cls"


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_a_contrastive_export_records_the_pooling_it_trained(tiny_bert, tmp_path, pooling):
    from domainbert.modules.contrastive import ContrastiveModule

    st = _sentence_transformers(tiny_bert, tmp_path / "st")  # the base says mean; the export says what it trained
    out = ContrastiveModule(str(st), pooling=pooling).export_hf(tmp_path / "hf")
    assert native_pooling(out) == pooling
    assert resolve_pooling("auto", str(out)) == pooling
    bare = ContrastiveModule(str(tiny_bert), pooling="mean").export_hf(tmp_path / "bare")
    assert native_pooling(bare) == "mean"


# -- item 4: one-line loader errors -------------------------------------------------------------------------------


@bad_input
@pytest.mark.parametrize("model_type", ["bert", "my-custom-bert"])
def test_a_folder_with_code_of_its_own_is_refused_in_one_line(tiny_bert, tmp_path, model_type):
    folder = _copy(tiny_bert, tmp_path / "custom")
    auto_map = {"AutoConfig": "modeling_custom.CustomConfig", "AutoModel": "modeling_custom.CustomModel"}
    _edit_config(folder, model_type=model_type, auto_map=auto_map)
    (folder / "modeling_custom.py").write_text(f"import pathlib\npathlib.Path({str(tmp_path / 'ran')!r}).touch()\n")
    for load in (
        lambda: load_config(str(folder)),
        lambda: SequenceClassificationModule(str(folder), label_names=LABELS),
        lambda: load_variant(folder),
    ):
        with pytest.raises(DomainBertError, match="domainbert does not run code shipped in a model folder") as err:
            load()
        assert "config.json" in str(err.value) and "modeling_custom.CustomModel" in str(err.value)
        assert "trust_remote_code" in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "ran").exists()


@bad_input
def test_a_half_written_config_is_named_as_invalid_json(tiny_bert, tmp_path):
    folder = _copy(tiny_bert, tmp_path / "half")
    text = (folder / "config.json").read_text()
    (folder / "config.json").write_text(text[: len(text) // 2])
    for load in (
        lambda: load_config(str(folder)),
        lambda: load_tokenizer(str(folder)),
        lambda: SequenceClassificationModule(str(folder)),  # no labels given: today's "number of labels" error
        lambda: SequenceClassificationModule(str(folder), label_names=LABELS, pooling="cls"),
        lambda: load_variant(folder),
    ):
        with pytest.raises(DomainBertError, match=r"config\.json: not valid JSON") as err:
            load()
        assert str(folder / "config.json") in str(err.value) and "\n" not in str(err.value)
