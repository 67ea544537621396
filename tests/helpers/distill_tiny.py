"""Tiny fine-tuned-looking teachers and labelled batches for the distillation and deployment tests."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification

from tests.helpers.tiny import make_config, make_tokenizer

LABELS = ["database", "network", "video"]


def make_teacher(
    family: str, out: Path, layers: int = 4, task: str = "seq", seed: int = 0, init_range: float = 0.2
) -> Path:
    """Save a tiny random ``family`` classifier (or tagger) with ``layers`` layers and 3 labels into ``out``.

    The weights are drawn wider than usual (``init_range``) so that the teacher's outputs differ from input
    to input and from those of a student with fewer layers, as a trained teacher's do.
    """
    torch.manual_seed(seed)
    tok = make_tokenizer(family)
    config = make_config(family, len(tok), tok)
    config.initializer_range = init_range
    if family == "distilbert":
        config.n_layers = layers
    else:
        config.num_hidden_layers = layers
    config.num_labels = len(LABELS)
    config.id2label = dict(enumerate(LABELS))
    config.label2id = {n: i for i, n in enumerate(LABELS)}
    cls = AutoModelForSequenceClassification if task == "seq" else AutoModelForTokenClassification
    model = cls.from_config(config)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


_SUBJECTS = ["The tool", "The client", "The server", "The driver", "This package", "The module", "The utility"]
_VERBS = ["parses", "exports", "renders", "configures", "supports", "compresses"]
_OBJECTS = {
    "database": ["database queries", "sql tables", "database records"],
    "network": ["network packets", "web pages", "secure sockets"],
    "video": ["video streams", "vector graphics", "graphical images"],
}
_TAILS = ["on unix-like systems.", "with plugin support.", "from the command line.", "in real time."]


def rows(split: str = "train") -> list[dict]:
    """Labelled sentences made from the fixture corpus's phrases: 60 train, 15 val, 15 test rows (fixed)."""
    g = torch.Generator().manual_seed({"train": 0, "val": 1, "test": 2}[split])
    n = {"train": 60, "val": 15, "test": 15}[split]
    out = []
    for i in range(n):
        label = LABELS[i % len(LABELS)]
        pick = lambda xs: xs[int(torch.randint(len(xs), (1,), generator=g))]  # noqa: E731
        text = f"{pick(_SUBJECTS)} {pick(_VERBS)} {pick(_OBJECTS[label])} {pick(_TAILS)}"
        out.append({"text": text, "label": label})
    return out


def write_jsonl(path: Path, split: str) -> Path:
    """Write :func:`rows` of ``split`` as JSON lines to ``path``."""
    path.write_text("".join(json.dumps(r) + "\n" for r in rows(split)), encoding="utf-8")
    return path


def batches(tokenizer, split: str = "train", batch_size: int = 8, with_idx: bool = False) -> list[dict]:
    """Tokenized, padded batches of the fixture rows (``input_ids``, ``attention_mask``, ``labels``)."""
    data = rows(split)
    out = []
    for start in range(0, len(data), batch_size):
        chunk = data[start : start + batch_size]
        enc = tokenizer([r["text"] for r in chunk], padding=True, truncation=True, max_length=32, return_tensors="pt")
        batch = {k: v for k, v in enc.items() if k in tokenizer.model_input_names}
        batch["labels"] = torch.tensor([LABELS.index(r["label"]) for r in chunk])
        if with_idx:
            batch["idx"] = torch.arange(start, start + len(chunk))
        out.append(batch)
    return out


def labelled_teacher(out: Path, layers: int) -> Path:
    """A tiny BERT classifier (:func:`make_teacher`) whose labels are the fixture task's: api, graphics, network."""
    from transformers import AutoConfig

    path = make_teacher("bert", out, layers=layers)
    config = AutoConfig.from_pretrained(path)
    labels = ["api", "graphics", "network"]
    config.id2label, config.label2id = dict(enumerate(labels)), {n: i for i, n in enumerate(labels)}
    config.save_pretrained(path)
    return path
