"""The replay's shared inputs, built offline in a fresh temporary folder: tiny models, data files, planted payloads.

Nothing downloads: the tiny BERT and its tokenizer come from ``tests/helpers/tiny.py`` (loaded from its file, so
neither pytest nor the ``tests`` package is imported), trained on the repository's fixture corpus.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"
LABELS = ["api", "graphics", "network"]  # the labels of tests/fixtures/cls_train.jsonl


def _tiny_builders():
    """``tests/helpers/tiny.py`` as a module of its own (its package ``__init__`` imports pytest)."""
    spec = importlib.util.spec_from_file_location("redteam_tiny", ROOT / "tests" / "helpers" / "tiny.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Payload:
    """Unpickling this runs ``exec``: it creates the marker file (a planted checkpoint)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"import pathlib; pathlib.Path({str(self.marker)!r}).touch()",))


def plant_checkpoint(path: Path, marker: Path) -> Path:
    """A ``.ckpt`` whose full unpickling creates ``marker``."""
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": {}, "callbacks": {}, "payload": Payload(marker)}, path)
    return path


def plant_auto_map(model: Path, dest: Path, marker: Path) -> Path:
    """A copy of ``model`` whose config names custom code (``auto_map``); importing that code creates ``marker``."""
    shutil.copytree(model, dest)
    code = f"import pathlib\npathlib.Path({str(marker)!r}).touch()\nfrom transformers import BertConfig as EvilConfig\n"
    code += "from transformers import BertForMaskedLM as EvilModel\n"
    (dest / "evil_code.py").write_text(code)
    config = json.loads((dest / "config.json").read_text())
    config["auto_map"] = {
        k: f"evil_code.{v}"
        for k, v in {
            "AutoConfig": "EvilConfig",
            "AutoModel": "EvilModel",
            "AutoModelForMaskedLM": "EvilModel",
            "AutoModelForSequenceClassification": "EvilModel",
        }.items()
    }
    (dest / "config.json").write_text(json.dumps(config))
    return dest


def half_config(model: Path, dest: Path) -> Path:
    """A copy of ``model`` whose ``config.json`` breaks off half-way (an interrupted copy)."""
    shutil.copytree(model, dest)
    text = (dest / "config.json").read_text()
    (dest / "config.json").write_text(text[: len(text) // 2])
    return dest


def truncated_gzip(path: Path, lines: int = 5000) -> Path:
    """A ``.txt.gz`` corpus cut off half-way (a download that broke off)."""
    whole = gzip.compress("".join(f"corpus document number {i} about sockets\n" for i in range(lines)).encode())
    path.write_bytes(whole[: len(whole) // 2])
    return path


def cut(path: Path, data: bytes) -> Path:
    """``data`` cut off half-way at ``path`` (a compressed or Parquet file whose download broke off)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data[: len(data) // 2])
    return path


def labelled_rows(n: int = 400) -> list[dict]:
    """``n`` classification rows with the fixtures' labels, text that compresses poorly enough to cut mid-stream."""
    return [{"text": f"row {i} about {LABELS[i % 3]}, checksum {i * 7919 % 100003:05d}", "label": LABELS[i % 3]}
            for i in range(n)]  # fmt: skip


def plugin(site: Path, entry_points: str, **modules: str) -> Path:
    """A distribution ``evilplug`` in ``site`` (for ``PYTHONPATH``): its ``entry_points.txt`` and its modules."""
    info = site / "evilplug-0.1.dist-info"
    if not info.exists():
        info.mkdir(parents=True)
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: evilplug\nVersion: 0.1\n")
        (info / "entry_points.txt").write_text(entry_points)
        for name, code in modules.items():
            (site / f"{name}.py").write_text(code)
    return site


def jsonl(path: Path, rows: list[dict]) -> Path:
    """Write ``rows`` as JSON lines."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def build(root: Path) -> dict[str, str]:
    """Build the shared inputs under ``root``; the placeholders the attacks' commands use (``{bert}``, ...)."""
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # no load-report tables while building
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    tiny = _tiny_builders()
    models, data = root / "models", root / "data"
    bert = tiny.make_tiny("bert", models / "bert")
    cls_a = tiny.tiny_classifier(bert, models / "A", 0, LABELS)
    cls_b = tiny.tiny_classifier(bert, models / "B", 1, LABELS)
    data.mkdir(parents=True)
    for name in ("train", "val", "test"):
        shutil.copy(FIX / f"cls_{name}.jsonl", data / f"{name}.jsonl")
    shutil.copy(FIX / "corpus.txt", data / "corpus.txt")
    rows = [json.loads(line) for line in (FIX / "cls_train.jsonl").read_text().splitlines()]
    big = [{"text": f"{r['text']} {i}", "label": r["label"]} for i in range(40) for r in rows]
    jsonl(data / "big_train.jsonl", big)
    return {
        "root": str(root),
        "models": str(models),
        "bert": str(bert),
        "clsA": cls_a,
        "clsB": cls_b,
        "train": str(data / "train.jsonl"),
        "val": str(data / "val.jsonl"),
        "test": str(data / "test.jsonl"),
        "corpus": str(data / "corpus.txt"),
        "big_train": str(data / "big_train.jsonl"),
        "cfg_cls": str(ROOT / "configs/finetune/tiny_classification.yaml"),
        "cfg_mlm": str(ROOT / "configs/pretrain/tiny_debug.yaml"),
        "cfg_distill": str(ROOT / "configs/distill/tiny_debug.yaml"),
        "sweep_lr": str(ROOT / "configs/sweep/lr_warmup.yaml"),
        "get_mpnet": str(ROOT / "examples/models/get_mpnet.py"),
    }
