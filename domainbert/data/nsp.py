"""Sentence pairs for the next-sentence-prediction objective (checkpoints with an NSP head)."""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Dataset

from domainbert.errors import DomainBertError


class SentencePairs(Dataset):
    """``[CLS] A [SEP] B [SEP]`` pairs: B is A's true continuation half of the time, else from another document.

    Each document of at least two tokens is cut in two at its middle. Labels follow BERT: 0 = B is the true
    next segment, 1 = B is random. The choice is fixed per example by ``seed``.
    """

    def __init__(self, docs, tokenizer, max_length: int, seed: int = 0) -> None:
        """Tokenize ``docs`` (a ``datasets.Dataset`` with ``text``) and draw the pairs."""
        enc = docs.map(
            lambda b: {"ids": tokenizer(b["text"], add_special_tokens=False, return_attention_mask=False)["input_ids"]},
            batched=True,
            remove_columns=docs.column_names,
            desc="Tokenizing pairs",
        ).filter(lambda b: [len(x) >= 2 for x in b["ids"]], batched=True)
        if len(enc) < 2:
            raise DomainBertError("next-sentence prediction needs at least two documents of two or more tokens")
        self.ids = enc.with_format("numpy")["ids"]
        rng = np.random.default_rng(seed)
        n = len(self.ids)
        self.is_random = rng.random(n) < 0.5
        other = rng.integers(0, n - 1, n)
        self.other = np.where(other >= np.arange(n), other + 1, other)  # never the same document
        self.cls, self.sep = tokenizer.cls_token_id, tokenizer.sep_token_id
        self.budget = max_length - 3

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        doc = np.asarray(self.ids[i])
        cut = len(doc) // 2
        a = doc[:cut]
        if self.is_random[i]:
            other = np.asarray(self.ids[int(self.other[i])])
            b = other[len(other) // 2 :]
        else:
            b = doc[cut:]
        half = self.budget // 2
        a = a[-max(half, self.budget - len(b)) :] if len(a) + len(b) > self.budget else a
        b = b[: self.budget - len(a)]
        ids = np.concatenate([[self.cls], a, [self.sep], b, [self.sep]]).astype(np.int64)
        types = np.concatenate([np.zeros(len(a) + 2), np.ones(len(b) + 1)]).astype(np.int64)
        return {"input_ids": ids, "token_type_ids": types, "next_sentence_label": int(self.is_random[i])}


class PairCollator:
    """Pad sentence pairs and stack their labels."""

    def __init__(self, pad_id: int) -> None:
        """Args: pad_id: the padding id."""
        self.pad_id = pad_id

    def __call__(self, rows: list[dict]) -> dict:
        width = max(len(r["input_ids"]) for r in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        types = torch.zeros((len(rows), width), dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            n = len(r["input_ids"])
            ids[i, :n] = torch.as_tensor(r["input_ids"])
            types[i, :n] = torch.as_tensor(r["token_type_ids"])
            mask[i, :n] = 1
        labels = torch.tensor([r["next_sentence_label"] for r in rows], dtype=torch.long)
        return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask, "next_sentence_label": labels}
