"""``domainbert predict`` and evaluation from exports: predictions always written, the export's labels and their
order used, raw text accepted, short model names; predict batches grouped by length, predictions still in file
order."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from domainbert.cli import main
from domainbert.cli.short_names import expand_short_names
from domainbert.core.prediction import FileOrder, PredictionWriter
from domainbert.data.classification import ClassificationDataModule
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
    assert expand_short_names(["--model.class_path", "distill"])[1] == "domainbert.distill.module.DistillationModule"
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
    """A copy of an export whose id2label (and head) are reordered validates with the same metrics."""
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

    from domainbert.cli.lightning_cli import cli_main

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


def _sharp_export(tiny_bert, out: Path) -> Path:
    """An export whose head tells texts apart (large random weights): a row put in the wrong place shows."""
    torch.manual_seed(0)  # the same new weights (head, pooler) whatever ran before
    module = SequenceClassificationModule(str(tiny_bert), label_names=ALPHA)
    with torch.no_grad():
        weight = module.model.classifier.weight
        weight.copy_(torch.randn(weight.shape, generator=torch.Generator().manual_seed(0)) * 10)
    module.export_hf(out)
    return out


def test_predict_batches_rows_by_length_and_writes_them_in_file_order(tiny_bert, tmp_path):
    """``domainbert predict`` pads little (a batch holds rows of similar length) and changes nothing in the output."""
    hf = _sharp_export(tiny_bert, tmp_path / "hf")
    words = "the server exports network packets while a tool renders graphical images for every user".split()
    sizes = [3, 12, 5, 20, 1, 8, 15, 2, 9, 6]
    rows = [{"id": i, "text": " ".join(words[(i + j) % len(words)] for j in range(n))} for i, n in enumerate(sizes)]
    data = tmp_path / "in.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    main(
        ["predict", "--model", "classification", "--model.init_from", str(hf), "--data", "classification"]
        + ["--data.predict", str(data), "--data.eval_batch_size", "3", "--run_name", "p"]
        + ["--trainer.default_root_dir", str(tmp_path / "runs"), "--trainer.enable_progress_bar", "false"]
        + ["--trainer.accelerator", "cpu", "--trainer.precision", "32-true"]  # fp32: the reference below is
    )
    out = tmp_path / "runs" / "p" / "version_0" / "predictions.jsonl"
    got = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in got] == list(range(len(rows))) and [r["text"] for r in got] == [r["text"] for r in rows]

    # the same predictions as unsorted batches of 3, in file order
    module = SequenceClassificationModule(str(hf)).eval()
    expected = []
    for start in range(0, len(rows), 3):
        chunk = rows[start : start + 3]
        texts = [r["text"] for r in chunk]
        batch = dict(module.tokenizer(texts, padding=True, truncation=True, max_length=128, return_tensors="pt"))
        with torch.no_grad():
            expected += module.predict_step({**batch, "meta": chunk}, 0)
    probs = torch.tensor([list(r["probabilities"].values()) for r in expected])
    gaps = (probs[:, None] - probs[None]).abs().amax(-1) + torch.eye(len(rows))
    assert gaps.min() > 1e-5  # the head tells every two rows apart: a row in the wrong place would show
    for row, want in zip(got, expected):
        assert row["label"] == want["label"]
        assert list(row["probabilities"].values()) == pytest.approx(list(want["probabilities"].values()), abs=2e-6)

    # the loader did sort: with a PredictionWriter on the trainer, the first batch holds the longest rows
    dm = ClassificationDataModule(predict=str(data), eval_batch_size=3)
    dm.connect(module.tokenizer)
    assert [m["id"] for m in next(iter(dm.predict_dataloader()))["meta"]] == [0, 1, 2]  # no trainer: file order
    dm.trainer = SimpleNamespace(callbacks=[PredictionWriter()])
    tokens = [len(module.tokenizer(r["text"], truncation=True, max_length=128)["input_ids"]) for r in rows]
    longest = sorted(range(len(rows)), key=lambda i: -tokens[i])[:3]
    assert [m["id"] for m in next(iter(dm.predict_dataloader()))["meta"]] == longest != [0, 1, 2]


def test_only_tasks_with_one_prediction_per_row_batch_predict_rows_by_length(tiny_bert, tmp_path):
    from domainbert.core.hf import load_tokenizer
    from domainbert.data.batching import LengthSortedSampler
    from domainbert.data.qa import QADataModule

    txt = tmp_path / "in.txt"
    txt.write_text("a\nthe tool renders graphical images on screens\nnetwork packets\n", encoding="utf-8")
    tags = TaggingDataModule(predict=str(txt), eval_batch_size=2)
    tags.connect(load_tokenizer(str(tiny_bert)))
    tags.trainer = SimpleNamespace(callbacks=[PredictionWriter()])
    loader = tags.predict_dataloader()
    assert isinstance(loader.sampler, LengthSortedSampler) and list(loader.sampler) == [1, 2, 0]
    assert not QADataModule.predict_by_length  # a question's windows must stay consecutive


def test_file_order_puts_rows_back_and_holds_only_those_after_a_gap():
    order = FileOrder()
    assert order.add([2, 0], ["c", "a"]) == ["a"]
    assert order.pending == {2: "c"}
    assert order.add([1, 4], ["b", "e"]) == ["b", "c"]
    assert order.rest() == ["e"] and order.pending == {}  # row 3 never came (another DDP rank's)
    with pytest.raises(RuntimeError, match="2 predictions for a batch of 1 rows"):
        order.add([5], ["f", "g"])


def test_length_sorted_sampler_sorts_runs_of_fifty_batches_and_training_order_is_unchanged():
    from domainbert.data.batching import EpochSampler, LengthSortedSampler

    lengths = [(i * 37) % 101 for i in range(250)]
    order = list(LengthSortedSampler(lengths, batch_size=2))  # runs of 100 rows
    assert sorted(order) == list(range(250)) and len(LengthSortedSampler(lengths, 2)) == 250
    for start in (0, 100, 200):
        run = order[start : start + 100]
        assert set(run) == set(range(start, min(start + 100, 250)))
        assert [lengths[i] for i in run] == sorted((lengths[i] for i in run), reverse=True)
    # the training sampler's grouped order, as it was before the predict sampler shared its sorting
    sampler = EpochSampler(250, seed=1, lengths=lengths, batch_size=2)
    g = torch.Generator().manual_seed(1)
    idx = torch.randperm(250, generator=g).tolist()
    grouped = [i for s in range(0, 250, 100) for i in sorted(idx[s : s + 100], key=lambda i: -lengths[i])]
    batches = [grouped[i : i + 2] for i in range(0, 250, 2)]
    assert sampler.order() == [i for b in torch.randperm(len(batches), generator=g).tolist() for i in batches[b]]
