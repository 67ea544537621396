"""The export's report says what the variants were measured on, and whether --limit cut the data short."""

from __future__ import annotations

import pytest

from domainbert.deploy.report import summary, summary_markdown


def _rows(limit):
    common = {"examples": 50, "data": "test.jsonl", "limit": limit, "threads": 2, "max_length": 64}
    return [
        {"variant": "student", "latency_ms_b32": 2.0, "latency_ms_b1": 3.0, "size_mb": 10.0, "f1_macro": 0.5, **common},
        {"variant": "int8", "latency_ms_b32": 1.0, "latency_ms_b1": 2.0, "size_mb": 5.0, "f1_macro": 0.4, **common},
    ]


def test_the_report_names_the_limit_that_cut_the_data():
    text = summary_markdown(summary(_rows(limit=50)))
    assert "Measured on 50 examples of test.jsonl (cut to `--limit 50`)." in text


def test_the_report_says_when_all_the_data_was_used():
    text = summary_markdown(summary(_rows(limit=None)))
    assert "Measured on 50 examples of test.jsonl (all of it)." in text


def _demo_rows(role: str = "student", teacher: bool = True, onnx_b1: float = 3.2, onnx_b32: float = 5.1):
    common = {"examples": 742, "data": "test.jsonl", "limit": None, "b32_padding": 0.41}
    rows = [
        {"variant": "student", "role": role, "format": "fp32", "latency_ms_b1": 10.3, "latency_ms_b32": 9.1},
        {"variant": "onnx_int8", "role": role, "format": "onnx_int8", "latency_ms_b1": onnx_b1},
    ]
    rows[0]["f1_macro"], rows[1]["f1_macro"], rows[1]["latency_ms_b32"] = 0.729, 0.731, onnx_b32
    if teacher:
        rows.insert(0, {"variant": "teacher", "role": "teacher", "format": "fp32", "f1_macro": 0.791})
        rows[0].update(latency_ms_b1=19.6, latency_ms_b32=18.9)
        rows.append({"variant": "teacher_int8", "role": "teacher", "format": "int8", "f1_macro": 0.791})
        rows[-1].update(latency_ms_b1=9.0, latency_ms_b32=7.7)
    return [{**common, "size_mb": 10.0, **r} for r in rows]


def test_rows_are_named_by_role_and_the_f1_column_is_a_difference_in_points_from_the_teacher():
    result = summary(_demo_rows())
    text = summary_markdown(result)
    by = {r["variant"]: r for r in result["variants"]}
    assert by["student"]["f1_macro_points_vs_teacher"] == -6.2 and by["teacher_int8"]["f1_macro_points_vs_teacher"] == 0
    assert "| Δ test macro-F1 (points) vs teacher |" in text and "F1 vs" not in text
    assert "| teacher int8 |" in text and "| student onnx_int8 |" in text and "| student |" in text
    assert result["recommendation"].variant == "teacher_int8"
    assert "**Recommended:** **teacher int8**" in text and "made on the export's test data `test.jsonl`" in text


def test_a_model_exported_without_a_teacher_is_labelled_by_its_role_not_student():
    result = summary(_demo_rows(role="model", teacher=False))
    text = summary_markdown(result)
    assert "| model |" in text and "| model onnx_int8 |" in text and "| student |" not in text
    assert "Δ test macro-F1 (points) vs model" in text and "speed-up b32 vs model" in text


def test_onnx_int8_slower_per_example_at_batch_32_gets_its_note_only_then():
    rows = _demo_rows()
    text = summary_markdown(summary(rows))
    assert "**Note:** student onnx_int8 takes 5.1 ms/example at batch 32 against 3.2 at batch 1." in text
    assert "(41% of its inputs here are padding)." in text  # not timed by length: no claim on the cause
    assert "**Note:**" not in summary_markdown(summary(_demo_rows(onnx_b1=6.0)))


@pytest.mark.parametrize(
    ("by_length", "says"),
    [
        (2.9, "and padding is the cost: the same rows batched in order of length (3% padding) take 2.9 ms/example"),
        (4.8, "but padding does not explain it: the same rows batched in order of length (3% padding) take 4.8"),
    ],
)
def test_the_note_names_padding_only_when_batching_by_length_removes_the_slowdown(by_length, says):
    rows = _demo_rows()
    rows[2].update(latency_ms_b32_by_length=by_length, b32_padding_by_length=0.03)
    assert says in summary_markdown(summary(rows))
