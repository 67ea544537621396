"""Fine-tuning with long texts in windows: the loss falls, the export records the windows, predict windows again."""

import json
import random
from collections import defaultdict

import lightning.pytorch as L
import torch

from domainbert.cli import main
from domainbert.data.batching import Collator
from domainbert.data.classification import ClassificationDataModule
from domainbert.data.windows import CONFIG_KEY, Windows, tokenize_windows
from domainbert.modules.classification import SequenceClassificationModule
from tests.helpers import FIX

WINDOWS = Windows(max_length=32, stride=8, max_windows=4)


def long_rows(name: str, n: int, seed: int) -> list[dict]:
    """``n`` rows, each four fixture texts of one label joined: several windows of 32 tokens per text."""
    by_label = defaultdict(list)
    for line in (FIX / name).read_text().splitlines():
        row = json.loads(line)
        by_label[row["label"]].append(row["text"])
    rng, labels = random.Random(seed), sorted(by_label)
    return [{"text": " ".join(rng.choices(by_label[labels[i % 3]], k=4)), "label": labels[i % 3]} for i in range(n)]


def write_rows(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


class Losses(L.Callback):
    """The training loss of every step."""

    def __init__(self) -> None:
        self.values: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.values.append(float(outputs["loss"]))


def test_fit_with_windows_learns_and_predict_on_its_export_windows_again(tiny_bert, tmp_path, capsys):
    L.seed_everything(0)
    dm = ClassificationDataModule(
        train=write_rows(tmp_path / "train.jsonl", long_rows("cls_sep_train.jsonl", 48, 0)),
        val=write_rows(tmp_path / "val.jsonl", long_rows("cls_sep_val.jsonl", 9, 1)),
        batch_size=8,
        max_length=WINDOWS.max_length,
        long_text="windows",
        stride=WINDOWS.stride,
        max_windows=WINDOWS.max_windows,
    )
    module = SequenceClassificationModule(
        str(tiny_bert), num_labels=dm.num_labels, label_names=dm.label_names, pooling="mean", head_init="probe",
        learning_rate=3e-3, warmup_ratio=0.0, hidden_dropout=0.0, attention_dropout=0.0, classifier_dropout=0.0,
    )  # fmt: skip
    dm.connect(module.tokenizer)
    losses = Losses()
    trainer = L.Trainer(
        max_steps=60, accelerator="cpu", precision="32-true", logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, callbacks=[losses], default_root_dir=tmp_path,
    )  # fmt: skip
    trainer.fit(module, datamodule=dm)
    assert max(len(w) for w in dm.datasets["train"]["input_ids"]) > 1  # the texts were read in several windows
    first = sum(losses.values[:6]) / 6  # the best epoch (6 steps) of the second half, against the first
    best = min(sum(losses.values[i : i + 6]) / 6 for i in range(30, 55))
    assert best < 0.7 * first, losses.values

    hf = module.export_hf(tmp_path / "hf")
    config = json.loads((hf / "config.json").read_text())
    assert config[CONFIG_KEY] == {"long_text": "windows", "max_length": 32, "stride": 8, "max_windows": 4}
    assert "plain transformers" in (hf / "README.md").read_text().lower()

    texts = [r["text"] for r in long_rows("cls_test.jsonl", 3, 2)] + ["The tool renders graphical images."]
    txt = tmp_path / "in.txt"
    txt.write_text("\n".join(texts) + "\n", encoding="utf-8")
    main(  # nothing says windows here: the export's config does
        ["predict", "--model", "classification", "--model.init_from", str(hf), "--data", "classification"]
        + ["--data.predict", str(txt), "--data.max_length", "32", "--trainer.default_root_dir", str(tmp_path / "r")]
        + ["--run_name", "p", "--trainer.enable_progress_bar", "false", "--trainer.accelerator", "cpu"]
        + ["--trainer.precision", "32-true"]
    )
    out = tmp_path / "r" / "p" / "version_0" / "predictions.jsonl"
    assert "Wrote 4 predictions" in capsys.readouterr().out
    got = torch.tensor([list(json.loads(line)["probabilities"].values()) for line in out.read_text().splitlines()])

    reloaded = SequenceClassificationModule(str(hf)).eval()
    tok = reloaded.tokenizer
    enc = tokenize_windows(tok, texts, WINDOWS)  # the raw texts, windowed by hand
    rows = [{k: enc[k][i] for k in enc} for i in range(len(texts))]
    truncated = dict(tok(texts, truncation=True, max_length=32, padding=True, return_tensors="pt"))
    with torch.no_grad():
        windowed = torch.softmax(reloaded(Collator(tok)(rows)), -1)
        plain = torch.softmax(reloaded(truncated), -1)
        with_module = torch.softmax(module.eval()(Collator(tok)(rows)), -1)
    torch.testing.assert_close(got, windowed, rtol=0, atol=1e-5)  # predict gives the module's forward on windows
    torch.testing.assert_close(windowed, with_module, rtol=0, atol=1e-5)  # and the export is the fitted model
    assert (got[:3] - plain[:3]).abs().max() > 1e-3  # which differs from truncating the long texts
    torch.testing.assert_close(got[3], plain[3], rtol=0, atol=1e-5)  # and equals it on a short one
