"""``domainbert predict`` and evaluation from exports: predictions always written, the export's labels and their
order used, raw text accepted, short model names (REVIEW "A new user's first week" items 4 and 6)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from domainbert.cli import main
from domainbert.data.classification import ClassificationDataModule
from domainbert.data.registry import expand_short_names
from domainbert.data.tagging import TaggingDataModule
from domainbert.errors import DomainBertError
from domainbert.modules.classification import SequenceClassificationModule, labels_from

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"
TINY_CLS = str(ROOT / "configs/finetune/tiny_classification.yaml")
ALPHA = ["api", "graphics", "network"]


def _export(tiny_bert, out: Path, names: list[str], bias=None) -> Path:
    module = SequenceClassificationModule(str(tiny_bert), label_names=names)
    if bias is not None:
        with torch.no_grad():
            module.model.classifier.bias.copy_(torch.tensor(bias))
    module.export_hf(out)
    return out


def test_short_model_names_expand_to_the_shipped_modules():
    cp = "domainbert.modules.classification.SequenceClassificationModule"
    assert expand_short_names(["predict", "--model", "classification"]) == ["predict", "--model", cp]
    assert expand_short_names(["--model=SequenceClassificationModule"]) == [f"--model={cp}"]
    assert expand_short_names(["--model.class_path", "distill"])[1] == "domainbert.modules.distill.DistillationModule"
    assert expand_short_names(["--model", "mlm", "--model.init_from", "mlm"])[1:] == [
        "domainbert.modules.mlm.MaskedLMModule",
        "--model.init_from",
        "mlm",  # option values other than the class are never touched
    ]
    for short, cls in (("tagging", "TokenClassificationModule"), ("qa", "QuestionAnsweringModule")):
        assert expand_short_names(["--model", short])[1].endswith(cls)


def test_an_exports_label_set_and_order_come_from_its_config(tiny_bert, tmp_path, caplog):
    hf = _export(tiny_bert, tmp_path / "hf", ["network", "api", "graphics"])
    assert labels_from(None, None, str(hf)) == ["network", "api", "graphics"]  # no data labels: the export's
    assert labels_from(3, ALPHA, str(hf)) == ["network", "api", "graphics"]  # same set: the export's order
    assert labels_from(2, ["x", "y"], str(hf)) == ["x", "y"]  # another label set: a new head, said loudly
    assert "has a head for the labels ['network', 'api', 'graphics'], but the labels here are ['x', 'y']" in caplog.text
    assert labels_from(None, ALPHA, str(tiny_bert)) == ALPHA  # a checkpoint without labels of its own
    with pytest.raises(DomainBertError, match="number of labels is unknown"):
        labels_from(None, None, str(tiny_bert))


def test_a_txt_file_is_one_example_a_line(tiny_bert, tmp_path):
    txt = tmp_path / "in.txt"
    txt.write_text("The server exports network packets.\n\n  \nThe tool renders graphical images.\n", encoding="utf-8")
    dm = ClassificationDataModule(predict=str(txt), text_column="sentence")
    rows = dm.raw("predict")
    assert rows["sentence"] == ["The server exports network packets.", "The tool renders graphical images."]
    assert rows["line"] == [1, 4]  # blank lines skipped, the others keep their line numbers
    assert dm.label_names is None and dm.num_labels is None  # unknown until a model brings its own
    tags = TaggingDataModule(predict=str(txt)).raw("predict")
    assert tags["tokens"][1] == ["The", "tool", "renders", "graphical", "images."]
    pairs = ClassificationDataModule(predict=str(txt), text_pair_column="other")
    with pytest.raises(DomainBertError, match=r"in\.txt: a \.txt file holds one text a line.*\['text', 'other'\]"):
        pairs.raw("predict")


def test_predict_from_an_export_on_raw_text_writes_predictions_by_default(tiny_bert, tmp_path, capsys):
    """No PredictionWriter in the config, no label set typed, a .txt input and the short model/data names."""
    hf = _export(tiny_bert, tmp_path / "hf", ["network", "api", "graphics"])
    txt = tmp_path / "in.txt"
    txt.write_text("The server exports network packets.\nThe tool renders graphical images.\n", encoding="utf-8")
    main(
        ["predict", "--model", "classification", "--model.init_from", str(hf), "--data", "classification"]
        + ["--data.predict", str(txt), "--trainer.default_root_dir", str(tmp_path / "runs"), "--run_name", "p"]
        + ["--trainer.enable_progress_bar", "false", "--trainer.accelerator", "cpu"]
    )
    out = tmp_path / "runs" / "p" / "version_0" / "predictions.jsonl"
    assert f"Wrote 2 predictions to {out}" in capsys.readouterr().out
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["line"] for r in rows] == [1, 2] and rows[1]["text"] == "The tool renders graphical images."
    assert all(list(r["probabilities"]) == ["network", "api", "graphics"] for r in rows)
    # the same predictions as the export itself gives
    module = SequenceClassificationModule(str(hf)).eval()
    batch = dict(module.tokenizer([r["text"] for r in rows], padding=True, return_tensors="pt"))
    with torch.no_grad():
        probs = torch.softmax(module(batch), -1)
    for row, p in zip(rows, probs):
        assert row["label"] == module.label_names[int(p.argmax())]
        assert list(row["probabilities"].values()) == pytest.approx(p.tolist(), abs=1e-3)  # bf16 where native


def test_an_export_with_reordered_labels_scores_as_the_original(tiny_bert, tmp_path):
    """REVIEW item 6: a copy of an export whose id2label (and head) are reordered validates with the same metrics."""
    bias = [4.0, 0.0, -4.0]  # a head that strongly prefers 'api': a wrong mapping changes every metric
    a = _export(tiny_bert, tmp_path / "a", ALPHA, bias)
    order = ["network", "api", "graphics"]
    state = {k: v.clone() for k, v in SequenceClassificationModule(str(a)).model.state_dict().items()}
    perm = torch.tensor([ALPHA.index(n) for n in order])
    for key in ("classifier.weight", "classifier.bias"):
        state[key] = state[key][perm]  # output i of the copy is label order[i]: the same function under new ids
    b_module = SequenceClassificationModule(str(tiny_bert), label_names=order)
    b_module.model.load_state_dict(state)
    b = b_module.export_hf(tmp_path / "b")
    assert json.loads((b / "config.json").read_text())["id2label"] == {"0": "network", "1": "api", "2": "graphics"}

    from domainbert.core.lightning_cli import cli_main

    rows = [json.loads(line) for line in (FIX / "cls_val.jsonl").read_text(encoding="utf-8").splitlines()]
    keep = {"api": 5, "graphics": 2, "network": 1}  # unbalanced: a permuted mapping cannot score the same
    chosen = [r for name, n in keep.items() for r in [r for r in rows if r["label"] == name][:n]]
    val = tmp_path / "val.jsonl"
    val.write_text("".join(json.dumps(r) + "\n" for r in chosen), encoding="utf-8")
    metrics = []
    for hf in (a, b):
        args = ["validate", "--config", TINY_CLS, "--model.init_from", str(hf), "--trainer.logger", "false"]
        args += ["--data.val", str(val)]
        cli = cli_main(args + ["--trainer.default_root_dir", str(tmp_path / "runs"), "--trainer.callbacks", "[]"])
        metrics.append({k: float(v) for k, v in cli.trainer.callback_metrics.items()})
    assert metrics[0]["val/acc"] == pytest.approx(5 / 8)  # the head predicts 'api' for every row
    assert metrics[1] == pytest.approx(metrics[0], abs=1e-5)
    assert cli.model.label_names == order and cli.datamodule.label_names == order
