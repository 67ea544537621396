"""A domainbert datamodule plugin: labelled text stored as one folder per class of ``.txt`` files.

    root/
      train/<label>/<any name>.txt     one example per file
      val/<label>/*.txt
      test/<label>/*.txt               (optional)

It is a plain ``LightningDataModule`` that meets domainbert's datamodule contract
(``domainbert.data.contract``): ``connect(tokenizer)`` receives the model's tokenizer, ``num_labels`` and
``label_names`` are known from ``__init__`` (the CLI links them into the model), and batches are dicts of
tensors the model takes, with ``labels``.
"""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as L
import torch
from torch.utils.data import DataLoader
from transformers import DataCollatorWithPadding

__all__ = ["FolderClassificationDataModule"]


class FolderClassificationDataModule(L.LightningDataModule):
    """Text classification from ``<root>/<split>/<label>/*.txt`` (one example per file)."""

    def __init__(self, root: str, batch_size: int = 16, max_length: int = 128, seed: int = 0) -> None:
        """Find the splits and the label set.

        Args:
            root: folder holding ``train/``, ``val/`` and optionally ``test/``, each with one sub-folder per label.
            batch_size: examples per batch.
            max_length: longest tokenized input; longer ones are truncated.
            seed: seed of the training order.
        """
        super().__init__()
        self.root = Path(root)
        train = self.root / "train"
        if not train.is_dir():
            raise FileNotFoundError(f"{train}: no such folder (expected {root}/train/<label>/*.txt)")
        self.label_names = sorted(p.name for p in train.iterdir() if p.is_dir())
        if not self.label_names:
            raise ValueError(f"{train}: no label folders (expected {train}/<label>/*.txt)")
        self.num_labels = len(self.label_names)
        self.batch_size = batch_size
        self.max_length = max_length
        self.seed = seed
        self.tokenizer = None

    def connect(self, tokenizer) -> None:
        """Receive the model's tokenizer (the domainbert CLI calls this after building model and data)."""
        self.tokenizer = tokenizer

    def _split(self, name: str) -> list[dict]:
        folder = self.root / name
        rows = []
        for label_id, label in enumerate(self.label_names):
            for f in sorted((folder / label).glob("*.txt")):
                text = f.read_text(encoding="utf-8").strip()
                enc = self.tokenizer(text, truncation=True, max_length=self.max_length)
                rows.append({**enc, "labels": label_id})
        unknown = sorted(p.name for p in folder.iterdir() if p.is_dir() and p.name not in self.label_names)
        if unknown:
            raise ValueError(f"{folder}: label folders {unknown} are not in the training labels {self.label_names}")
        return rows

    def _loader(self, name: str, shuffle: bool) -> DataLoader:
        if self.tokenizer is None:
            raise RuntimeError("no tokenizer: run through `domainbert fit`, or call connect(tokenizer=...) first")
        gen = torch.Generator().manual_seed(self.seed)
        collate = DataCollatorWithPadding(self.tokenizer)
        return DataLoader(self._split(name), self.batch_size, shuffle=shuffle, generator=gen, collate_fn=collate)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)
