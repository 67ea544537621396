"""DAPT's ``enabled: auto``: it runs where the base model ships a trained masked-LM head, and says why it does not."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from transformers import AutoModel

from domainbert.core.mlm_head import trained_head
from domainbert.pipeline.report import _gate_line, _gated_row
from domainbert.pipeline.specs import DaptSpec, VocabSpec
from tests.helpers.pipeline_tiny import bare_context


@pytest.fixture(scope="module")
def headless(tiny_bert, tmp_path_factory) -> Path:
    """The tiny BERT saved as a bare encoder, as sentence embedders ship (no ``cls.predictions`` weights)."""
    out = tmp_path_factory.mktemp("headless")
    AutoModel.from_pretrained(tiny_bert).save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
        if (tiny_bert / name).is_file():
            shutil.copy(tiny_bert / name, out / name)
    return out


def test_trained_head_reads_the_weight_names(tiny_models, headless, tmp_path):
    assert trained_head(str(tiny_models["bert"])) is True  # saved from BertForMaskedLM
    assert trained_head(str(tiny_models["roberta"])) is True  # lm_head.dense, another family's path
    assert trained_head(str(headless)) is False
    assert trained_head("org/not-a-local-folder") is None  # a hub name: nothing to read without a download
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}), encoding="utf-8")
    assert trained_head(str(tmp_path)) is None  # no weight files


def _dapt(ctx):
    return ctx.strategies["dapt"]


def test_auto_skips_dapt_for_a_model_without_a_trained_head(headless):
    ctx = bare_context()
    ctx.base_model = str(headless)
    reason = _dapt(ctx).skip_reason(ctx, DaptSpec())
    assert reason.startswith(f"not run: {headless} ships no trained masked-LM head")
    assert "dapt.enabled: true" in reason
    made = _dapt(ctx).run(ctx, DaptSpec())
    assert len(made) == 1 and made[0].model is None and made[0].gated and not made[0].offered
    assert _gated_row(None, made[0]) == "| dapt | – | – | – | not run (dapt.enabled: auto) | 0.0 |"
    assert _gate_line(made[0], 3.0) == f"- **dapt**: {reason}."


def test_auto_runs_dapt_for_a_trained_head_when_asked_or_when_vocab_feeds_it(tiny_bert, headless):
    ctx = bare_context()
    ctx.base_model = str(tiny_bert)
    assert _dapt(ctx).skip_reason(ctx, DaptSpec()) is None  # a trained head: auto runs it
    ctx.base_model = str(headless)
    assert _dapt(ctx).skip_reason(ctx, DaptSpec(enabled=True)) is None  # asked for
    fed = bare_context(vocab=VocabSpec(enabled=True))
    fed.base_model = str(headless)
    assert _dapt(fed).skip_reason(fed, DaptSpec()) is None  # a new vocabulary needs DAPT to train its rows


def test_the_pipeline_parser_reads_auto_true_and_false():
    from domainbert.pipeline import build_parser

    paths = ["--base_model=m", "--task_train=t.jsonl", "--task_val=v.jsonl"]
    for given, expected in (("auto", "auto"), ("true", True), ("false", False)):
        cfg = build_parser([]).parse_args([*paths, f"--dapt.enabled={given}"])
        assert cfg.dapt.enabled == expected
    assert build_parser([]).parse_args(paths).dapt.enabled == "auto"


def test_auto_without_a_corpus_is_off_but_true_without_one_is_refused():
    ctx = bare_context()
    ctx.corpus = None
    assert not ctx.enabled("dapt")  # auto: nothing to adapt on, no error
    asked = bare_context(dapt=DaptSpec(enabled=True))
    asked.corpus = None
    assert asked.enabled("dapt")  # asked for: the checks refuse it for want of a corpus
