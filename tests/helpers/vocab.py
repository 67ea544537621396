"""What the vocabulary tests share: corpus lines, token spans, the MLM bias, loading a model folder."""

from __future__ import annotations

import torch
from transformers import AutoModelForMaskedLM, AutoTokenizer


def lines(corpus_file) -> list[str]:
    """The corpus file's lines."""
    return corpus_file.read_text(encoding="utf-8").splitlines()


def span_ids(tokenizer, text: str, start: int, end: int) -> list[int]:
    """Ids of the tokens covering characters ``start:end`` of ``text``, in running text."""
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    return [
        i
        for i, (a, b) in zip(enc["input_ids"], enc["offset_mapping"], strict=True)
        if (a < end and b > start) or a == b == start
    ]


def mlm_bias(model) -> torch.Tensor:
    """The MLM output bias."""
    return model.get_output_embeddings().bias


def load(path):
    """``(masked-LM model, tokenizer)`` of a folder."""
    return AutoModelForMaskedLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)
