"""``domainbert soup``: the uniform weight average of fine-tuned classifiers, checked and saved as one model."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForSequenceClassification

from domainbert.adapt.soup import soup
from domainbert.core.hf import load_model
from domainbert.errors import DomainBertError

LABELS = ["api", "graphics", "network"]


def _classifier(tiny_bert, out, seed: int, labels: list[str] = LABELS, mean: bool = False) -> str:
    """A tiny random sequence classifier with ``labels`` (mean-pooled with ``mean``), saved with its tokenizer."""
    torch.manual_seed(seed)
    if mean:
        from domainbert.modules.classification import SequenceClassificationModule

        module = SequenceClassificationModule(str(tiny_bert), label_names=labels, pooling="mean")
        return str(module.export_hf(out))
    from transformers import AutoTokenizer

    ids = {n: i for i, n in enumerate(labels)}
    model = AutoModelForSequenceClassification.from_pretrained(
        tiny_bert, num_labels=len(labels), id2label=dict(enumerate(labels)), label2id=ids
    )
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_bert).save_pretrained(out)
    return str(out)


def _state(path: str) -> dict[str, torch.Tensor]:
    return load_model(AutoModelForSequenceClassification, path)[0].state_dict()


@pytest.mark.parametrize("mean", [False, True], ids=["cls", "mean-pooled"])
def test_the_soup_is_the_mean_of_the_inputs_weights_and_loads_back_as_the_same_class(tiny_bert, tmp_path, mean):
    paths = [_classifier(tiny_bert, tmp_path / f"m{i}", seed=i, mean=mean) for i in range(3)]
    states = [_state(p) for p in paths]
    assert not torch.equal(states[0]["classifier.weight"], states[1]["classifier.weight"])  # the seeds differ

    record = soup(paths, str(tmp_path / "soup"))

    assert record["hf"] == str(tmp_path / "soup") and record["models"] == paths and record["seconds"] >= 0
    assert json.loads((tmp_path / "soup" / "soup.json").read_text()) == {k: record[k] for k in ("models", "seconds")}
    souped, _ = load_model(AutoModelForSequenceClassification, str(tmp_path / "soup"))
    first, _ = load_model(AutoModelForSequenceClassification, paths[0])
    assert type(souped) is type(first)
    assert type(souped).__name__.startswith("MeanPooling") == mean
    assert [souped.config.id2label[i] for i in range(3)] == LABELS
    got = souped.state_dict()
    assert set(got) == set(states[0])
    for key, tensor in got.items():
        if tensor.is_floating_point():
            torch.testing.assert_close(tensor, sum(s[key] for s in states) / 3, msg=key)
        else:
            assert torch.equal(tensor, states[0][key]), key
    assert (tmp_path / "soup" / "tokenizer.json").is_file() or (tmp_path / "soup" / "vocab.txt").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".soup.tmp")]  # written through a temporary folder


def test_a_second_soup_replaces_the_first_and_the_cli_runs_it(tiny_bert, tmp_path, capsys):
    from domainbert.cli import main

    paths = [_classifier(tiny_bert, tmp_path / f"m{i}", seed=i) for i in range(2)]
    soup(paths, str(tmp_path / "soup"))
    main(["soup", "--models", json.dumps(paths[::-1]), "--out", str(tmp_path / "soup")])
    assert json.loads((tmp_path / "soup" / "soup.json").read_text())["models"] == paths[::-1]
    assert "averaged" in capsys.readouterr().out


def test_models_with_other_labels_are_refused_naming_the_model(tiny_bert, tmp_path):
    a = _classifier(tiny_bert, tmp_path / "a", seed=0)
    b = _classifier(tiny_bert, tmp_path / "b", seed=1, labels=["graphics", "api", "network"])
    with pytest.raises(DomainBertError, match=r"soup: .*/b has labels \['graphics', 'api', 'network'\]; .*/a has"):
        soup([a, b], str(tmp_path / "soup"))
    assert not (tmp_path / "soup").exists()


def test_models_with_other_shapes_are_refused_naming_the_weight(tiny_bert, tmp_path):
    a = _classifier(tiny_bert, tmp_path / "a", seed=0)
    b = _classifier(tiny_bert, tmp_path / "b", seed=1)
    state = _state(b)  # the same labels, a grown vocabulary
    config = json.loads((tmp_path / "b" / "config.json").read_text())
    config["vocab_size"] += 4
    (tmp_path / "b" / "config.json").write_text(json.dumps(config))
    from safetensors.torch import save_file

    grown = torch.cat([state["bert.embeddings.word_embeddings.weight"], torch.zeros(4, 32)])
    state["bert.embeddings.word_embeddings.weight"] = grown
    save_file({k: v.contiguous() for k, v in state.items()}, str(tmp_path / "b" / "model.safetensors"))
    with pytest.raises(DomainBertError, match=r"soup: .*/b has 'bert.embeddings.word_embeddings.weight' of shape"):
        soup([a, b], str(tmp_path / "soup"))


def test_a_mean_pooled_and_a_cls_model_or_a_single_model_are_refused(tiny_bert, tmp_path):
    a = _classifier(tiny_bert, tmp_path / "a", seed=0)
    b = _classifier(tiny_bert, tmp_path / "b", seed=1, mean=True)
    with pytest.raises(DomainBertError, match=r"soup: .*/b is a MeanPoolingBertForSequenceClassification"):
        soup([a, b], str(tmp_path / "soup"))
    with pytest.raises(DomainBertError, match="needs two or more"):
        soup([a], str(tmp_path / "soup"))
