"""The export's batch-32 latency is timed on the batches ``classify`` serves: rows of similar length together, over
``b32_examples`` rows (the texts repeated when there are fewer)."""

from __future__ import annotations

import pytest

from domainbert.deploy.bench import EvalSet, encode
from domainbert.deploy.classifier import classify
from domainbert.deploy.command import export
from domainbert.deploy.load import load_variant
from domainbert.deploy.sample import WORDS, sample_classifier
from domainbert.errors import DomainBertError

#: 13 texts of 2 to 38 words, in no order of length
TEXTS = [" ".join(WORDS[i % len(WORDS)] for i in range(k, k + 2 + 3 * k)) for k in (5, 0, 12, 3, 9, 1, 7, 11, 2)]
TEXTS += [" ".join(WORDS[i % len(WORDS)] for i in range(k, k + 2 + 3 * k)) for k in (10, 4, 8, 6)]


def _padding(batches: list[dict]) -> float:
    total = sum(b["attention_mask"].numel() for b in batches)
    return 1 - sum(int(b["attention_mask"].sum()) for b in batches) / total


def _served_shapes(model, tokenizer, texts: list[str], max_length: int) -> list[tuple[int, int]]:
    """The ``(rows, tokens)`` of each batch the model runs when ``classify`` serves ``texts`` in batches of 32."""
    seen = []
    hook = model.register_forward_pre_hook(
        lambda _m, _args, kwargs: seen.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True
    )
    try:
        classify(model, tokenizer, texts, batch_size=32, max_length=max_length, bf16=False)
    finally:
        hook.remove()
    return seen


def test_batch_32_is_timed_on_the_batches_classify_serves_over_256_rows(tmp_path):
    model, tokenizer, _ = load_variant(sample_classifier(tmp_path / "model", labels=["a", "b", "c"]))
    evalset = EvalSet.build(tokenizer, TEXTS, None, None, max_length=24, repeats=1)
    rows = (TEXTS * 20)[:256]  # the texts, repeated to the default 256 rows
    assert sum(b["input_ids"].shape[0] for b in evalset.b32) == 256
    assert [tuple(b["input_ids"].shape) for b in evalset.b32] == _served_shapes(model, tokenizer, rows, 24)
    in_order = encode(tokenizer, rows, 32, 24)
    assert evalset.b32_padding() < round(_padding(in_order), 3)  # rows of similar length pad less than in order
    assert evalset.b32_padding() == round(_padding(evalset.b32), 3)


def test_batch_32_times_the_rows_asked_for_and_batch_1_its_own_count(tmp_path):
    _, tokenizer, _ = load_variant(sample_classifier(tmp_path / "model", labels=["a", "b"]))
    evalset = EvalSet.build(tokenizer, TEXTS, None, None, max_length=24, latency_examples=5, b32_examples=40)
    assert [b["input_ids"].shape[0] for b in evalset.b32] == [32, 8]
    assert len(evalset.b1) == 5 and all(b["input_ids"].shape[0] == 1 for b in evalset.b1)


@pytest.mark.parametrize(
    ("sizes", "message"),
    [
        ({"b32_examples": 16}, "b32_examples=16: expected at least 32 examples timed at batch 32"),
        ({"latency_examples": 0}, "latency_examples=0: expected at least 1 example timed at batch 1"),
    ],
)
def test_export_refuses_latency_passes_without_a_batch_to_time(tmp_path, sizes, message):
    model = sample_classifier(tmp_path / "model", labels=["a", "b"])
    with pytest.raises(DomainBertError, match=message):
        export(str(model), str(tmp_path / "out"), **sizes)
    assert not (tmp_path / "out").exists()
