"""The probe as a classifier: the frozen encoder with the probe's linear layer as a mean-pooling head gives the
probe's own scores, and its export loads back through domainbert's loader as the same model."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModel, AutoModelForSequenceClassification

from domainbert.core.embed import embed_texts
from domainbert.core.hf import load_model, load_tokenizer
from domainbert.core.probe import Probe
from domainbert.core.scoring import scoring_of
from domainbert.errors import DomainBertError
from domainbert.modules.probe_init import export_probe_classifier, probe_classifier, save_probe

TEXTS = ["The server exports network packets.", "The tool renders graphical images.", "An api for sql tables."]
LABELS = ["api", "graphics", "network"]


def _probe(width: int) -> Probe:
    g = torch.Generator().manual_seed(0)
    return Probe(weight=torch.randn(3, width, generator=g), bias=torch.randn(3, generator=g), c=1.0)


def test_the_probe_classifier_scores_texts_as_the_probe_scores_their_embeddings(tiny_bert):
    encoder, _ = load_model(AutoModel, str(tiny_bert))
    tokenizer = load_tokenizer(str(tiny_bert))
    probe = _probe(encoder.config.hidden_size)
    expected = probe.logits(embed_texts(encoder, tokenizer, TEXTS, bf16=False))
    model, tok = probe_classifier(str(tiny_bert), probe.weight, probe.bias, LABELS)
    with torch.no_grad():
        got = model(**tok(TEXTS, padding=True, return_tensors="pt")).logits
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    assert model.config.id2label == dict(enumerate(LABELS)) and not model.training
    with pytest.raises(DomainBertError, match="do not fit 2 labels"):
        probe_classifier(str(tiny_bert), probe.weight, probe.bias, LABELS[:2])


def test_the_exported_probe_classifier_loads_through_domainbert_as_the_same_model(tiny_bert, tmp_path):
    import json

    width = AutoModel.from_pretrained(tiny_bert).config.hidden_size
    probe = _probe(width)
    folder = tmp_path / "probe"
    folder.mkdir()
    with pytest.raises(DomainBertError, match="run `domainbert probe` again"):
        export_probe_classifier(str(tiny_bert), str(folder), str(tmp_path / "hf"))
    save_probe(probe, folder)
    (folder / "result.json").write_text(json.dumps({"c": 1.0, "labels": LABELS, "val": {"f1_macro": 0.5}}))
    out = export_probe_classifier(str(tiny_bert), str(folder), str(tmp_path / "hf"))
    loaded, missing = load_model(AutoModelForSequenceClassification, out)
    assert not missing and type(loaded).__name__.startswith("MeanPooling")
    tok = load_tokenizer(out)
    reference, _ = probe_classifier(str(tiny_bert), probe.weight, probe.bias, LABELS)
    batch = tok(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        torch.testing.assert_close(loaded.eval()(**batch).logits, reference(**batch).logits)
    assert "Frozen-embedding probe classifier" in (tmp_path / "hf" / "README.md").read_text()
    assert scoring_of(loaded.config) == {}  # a probe run that recorded nothing: nothing is claimed


def test_the_probe_classifier_answers_at_the_length_and_precision_the_probe_embedded_at(tiny_bert, tmp_path):
    import json

    width = AutoModel.from_pretrained(tiny_bert).config.hidden_size
    folder = tmp_path / "probe"
    folder.mkdir()
    save_probe(_probe(width), folder)
    scoring = {"max_length": 48, "precision": "bf16-mixed"}
    (folder / "result.json").write_text(json.dumps({"c": 1.0, "labels": LABELS, "scoring": scoring}))
    out = export_probe_classifier(str(tiny_bert), str(folder), str(tmp_path / "hf"))
    loaded, _ = load_model(AutoModelForSequenceClassification, out)
    assert scoring_of(loaded.config) == scoring
    assert load_tokenizer(out).model_max_length == 48
