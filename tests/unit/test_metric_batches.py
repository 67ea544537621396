"""The export's metric pass: batches in order of token count (longest first, as a test pass), each row with its own
label, the same metrics."""

from __future__ import annotations

import pytest
import torch

from domainbert.core.hf import load_tokenizer
from domainbert.deploy.bench import EvalSet, encode, task_metrics

TEXTS = [
    "the tool renders graphical images and the tool renders graphical images",
    "an api",
    "zqxjvkwpfhgtb",
    "the server exports network packets",
    "sql",
    "the server",
    "network packets",
]
LABELS = [2, 0, 1, 2, 0, 1, 1]


def _rows(batches):
    """``{real token ids: label}`` over labelled batches."""
    rows = {}
    for b in batches:
        for ids, mask, label in zip(b["input_ids"], b["attention_mask"], b["labels"], strict=True):
            rows[tuple(ids[mask.bool()].tolist())] = int(label)
    return rows


def _by_length(batch):
    """Logits that depend on each row's real length only, so a row scores the same in any batch."""
    return torch.nn.functional.one_hot(batch["attention_mask"].sum(1) % 3, 3).float()


def test_metric_batches_follow_token_counts_and_keep_each_rows_label(tiny_bert):
    tokenizer = load_tokenizer(str(tiny_bert))
    evalset = EvalSet.build(tokenizer, TEXTS, LABELS, 3, batch_size=3, max_length=12, latency_examples=2, repeats=1)
    in_file_order = encode(tokenizer, TEXTS, 3, 12, LABELS)
    counts = [int(n) for b in evalset.metric_batches for n in b["attention_mask"].sum(1)]
    assert counts == sorted(counts, reverse=True) and len(counts) == len(TEXTS)  # longest first, as a test pass
    assert counts != [int(n) for b in in_file_order for n in b["attention_mask"].sum(1)]  # the order did change
    assert _rows(evalset.metric_batches) == _rows(in_file_order)
    got = task_metrics(_by_length, evalset.metric_batches, 3)
    assert got == task_metrics(_by_length, in_file_order, 3)
    lengths = [len(ids) for ids in tokenizer(TEXTS, truncation=True, max_length=12)["input_ids"]]
    assert got["accuracy"] == pytest.approx(sum(n % 3 == y for n, y in zip(lengths, LABELS)) / len(TEXTS), abs=1e-5)
