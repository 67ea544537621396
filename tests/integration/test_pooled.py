"""The mean-pooling classifier: every family, export and reload (with and without domainbert), the probe head."""

import json

import pytest
import torch
from transformers import AutoModelForSequenceClassification

from domainbert.core.hf import load_model
from domainbert.data.classification import ClassificationDataModule
from domainbert.errors import DomainBertError
from domainbert.modules.classification import SequenceClassificationModule, resolve_pooling
from domainbert.modules.probe_init import embed_batches, init_head_from_probe
from tests.helpers import FIX

FAMILIES = ["bert", "roberta", "albert", "distilbert", "electra"]


def _batch(tok):
    enc = tok(["graphical images here", "secure sockets using many threads today"], padding=True, return_tensors="pt")
    return {k: v for k, v in enc.items() if k in tok.model_input_names}


@pytest.mark.parametrize("family", FAMILIES)
def test_mean_pooled_head_averages_token_states_and_its_export_reloads_equal(tiny_models, family, tmp_path):
    module = SequenceClassificationModule(str(tiny_models[family]), label_names=["a", "b", "c"], pooling="mean")
    model = module.model.eval()
    batch = _batch(module.tokenizer)
    logits = model(**batch).logits
    encoder = getattr(model, model.base_model_prefix)
    hidden = encoder(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    expected = model.classifier((hidden * mask).sum(1) / mask.sum(1))
    torch.testing.assert_close(logits, expected)

    out = module.export_hf(tmp_path / "hf")
    config = json.loads((out / "config.json").read_text())
    assert config["classifier_pooling"] == "mean" and config["id2label"] == {"0": "a", "1": "b", "2": "c"}
    assert (out / "modeling_domainbert.py").is_file()
    again, missing = load_model(AutoModelForSequenceClassification, str(out))  # domainbert's own class
    assert not missing and type(again).__name__ == type(model).__name__
    torch.testing.assert_close(again.eval()(**batch).logits, logits)
    remote = AutoModelForSequenceClassification.from_pretrained(out, trust_remote_code=True).eval()  # no domainbert
    torch.testing.assert_close(remote(**batch).logits, logits)
    with pytest.raises(ValueError, match="trust_remote_code=True"):  # never the family's head with a random pooler
        AutoModelForSequenceClassification.from_pretrained(out, trust_remote_code=False)


def test_pooling_auto_follows_the_checkpoint(tiny_bert, tmp_path):
    assert resolve_pooling("auto", str(tiny_bert)) == "cls"
    st = tmp_path / "st"
    st.mkdir()
    for f in tiny_bert.iterdir():
        if f.is_file():
            (st / f.name).write_bytes(f.read_bytes())
    (st / "1_Pooling").mkdir()
    (st / "modules.json").write_text(
        '[{"idx": 1, "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]'
    )
    (st / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}')
    assert resolve_pooling("auto", str(st)) == "mean"
    export = SequenceClassificationModule(str(st), label_names=["a", "b"]).export_hf(tmp_path / "hf")
    assert resolve_pooling("auto", str(export)) == "mean"  # a mean-pooled export keeps its head
    cls_again = SequenceClassificationModule(str(export), label_names=["a", "b"], pooling="cls")
    assert "auto_map" not in cls_again.model.config.to_dict()  # and loses the marker when re-headed
    with pytest.raises(DomainBertError, match="expected auto, cls or mean"):
        resolve_pooling("max", str(tiny_bert))
    with pytest.raises(DomainBertError, match="head_init=probe needs model.pooling=mean"):
        SequenceClassificationModule(str(tiny_bert), label_names=["a", "b"], pooling="cls", head_init="probe")


def test_probe_head_starts_at_the_probes_validation_score(tiny_bert, caplog):
    module = SequenceClassificationModule(str(tiny_bert), label_names=["api", "graphics", "network"], pooling="mean")
    dm = ClassificationDataModule(
        train=str(FIX / "cls_sep_train.jsonl"), val=str(FIX / "cls_sep_val.jsonl"), batch_size=8
    )
    dm.connect(module.tokenizer)
    dm.setup("fit")
    before = module.model.classifier.weight.clone()
    with caplog.at_level("INFO", logger="domainbert.modules.probe_init"):
        score = init_head_from_probe(module.model, dm, 3)
    said = [r.getMessage() for r in caplog.records if "head initialised" in r.getMessage()]
    assert len(said) == 1 and said[0].endswith(f", validation macro-F1 {score:.4f})"), said  # 4 digits, not 16
    assert not torch.equal(before, module.model.classifier.weight)
    x, y = embed_batches(module.model, dm.val_dataloader())
    module.model.eval()
    with torch.no_grad():
        pred = module.model.classifier(x).argmax(-1)
    from domainbert.core.stats import macro_f1

    assert macro_f1(y.numpy(), pred.numpy(), 3) == pytest.approx(score)


def test_a_mean_pooled_teacher_distils_into_a_mean_pooled_student_whose_export_reloads(tiny_bert, tmp_path):
    from domainbert.cli import cli_main
    from domainbert.deploy.load import load_variant

    teacher = SequenceClassificationModule(
        str(tiny_bert), label_names=["api", "graphics", "network"], pooling="mean"
    ).export_hf(tmp_path / "teacher")
    args = ["fit", "--config", "configs/distill/tiny_debug.yaml", "--model.teacher", str(teacher)]
    args += ["--model.init_args.teacher_cache=null", "--model.init_args.student_layers=1", "--trainer.max_steps=2"]
    args += ["--trainer.val_check_interval=2", "--trainer.default_root_dir", str(tmp_path / "runs")]
    cli = cli_main(args)
    student = cli.model.model
    assert type(student).__name__ == "MeanPoolingBertForSequenceClassification"
    hf = next((tmp_path / "runs").rglob("hf"))
    model, tok, info = load_variant(hf)
    batch = _batch(tok)
    student.eval()
    torch.testing.assert_close(model(**batch).logits, student(**batch).logits)
    from domainbert.cli import main

    main(
        ["export", "--model", str(hf), "--data", "tests/fixtures/cls_test.jsonl", "--out", str(tmp_path / "dep")]
        + ["--int8", "true", "--latency_examples", "4", "--repeats", "1"]
    )
    for variant in ("student", "onnx_int8"):
        loaded, _, _ = load_variant(tmp_path / "dep" / variant)
        assert loaded(**batch).logits.argmax(-1).tolist() == student(**batch).logits.argmax(-1).tolist()
    remote = AutoModelForSequenceClassification.from_pretrained(tmp_path / "dep" / "student", trust_remote_code=True)
    torch.testing.assert_close(remote.eval()(**batch).logits, student(**batch).logits)


def test_the_cli_starts_the_head_from_the_probe_when_head_init_resolves_to_it(tiny_bert, tmp_path, monkeypatch):
    """LightningCLI saves the hyper-parameters as given ("auto"); the module must act on the resolved value."""
    import domainbert.modules.probe_init as probe_init
    from domainbert.cli import cli_main

    calls = []
    real = probe_init.init_head_from_probe
    monkeypatch.setattr(probe_init, "init_head_from_probe", lambda *a: calls.append(a) or real(*a))
    args = ["fit", "--config", "configs/finetune/tiny_classification.yaml", "--model.init_from", str(tiny_bert)]
    args += ["--model.pooling", "mean", "--model.head_init", "auto", "--trainer.max_steps", "1"]
    args += ["--trainer.default_root_dir", str(tmp_path)]
    cli = cli_main(args)
    assert len(calls) == 1 and cli.model.head_init == "probe" and cli.model.hparams.head_init == "auto"


def test_the_probe_head_starts_lora_adapters_too(tiny_bert):
    module = SequenceClassificationModule(
        str(tiny_bert), label_names=["api", "graphics", "network"], pooling="mean", lora={}
    )
    dm = ClassificationDataModule(
        train=str(FIX / "cls_sep_train.jsonl"), val=str(FIX / "cls_sep_val.jsonl"), batch_size=8
    )
    dm.connect(module.tokenizer)
    dm.setup("fit")
    init_head_from_probe(module.model, dm, 3)
    wrapper = module.model.get_base_model().classifier
    trained = next(iter(wrapper.modules_to_save.values()))
    assert torch.equal(trained.weight, wrapper.original_module.weight) and trained.weight.abs().sum() > 0


@pytest.mark.parametrize("family,attr", [("albert", "classifier_dropout_prob"), ("distilbert", "seq_classif_dropout")])
def test_the_mean_pooled_head_takes_each_familys_classifier_dropout(tiny_models, family, attr):
    module = SequenceClassificationModule(
        str(tiny_models[family]), label_names=["a", "b"], pooling="mean", hidden_dropout=0.05, classifier_dropout=0.3
    )
    assert getattr(module.model.config, attr) == 0.3 and module.model.dropout.p == 0.3


@pytest.mark.faults(bad_inputs=1)
def test_domainbert_never_runs_the_modeling_file_of_an_export(tiny_bert, tmp_path):
    from domainbert.deploy.load import load_variant
    from tests.helpers import faults_summary

    out = SequenceClassificationModule(str(tiny_bert), label_names=["a", "b"], pooling="mean").export_hf(
        tmp_path / "hf"
    )
    marker = tmp_path / "ran"
    payload = f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n"
    (out / "modeling_domainbert.py").write_text(payload + (out / "modeling_domainbert.py").read_text())
    load_model(AutoModelForSequenceClassification, str(out))
    load_variant(out)
    SequenceClassificationModule(str(out), label_names=["a", "b"])
    faults_summary.record("code_executed", int(marker.exists()))
    assert not marker.exists()
