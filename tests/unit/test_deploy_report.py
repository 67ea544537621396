"""The export's report says what the variants were measured on, and whether --limit cut the data short."""

from __future__ import annotations

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


def test_a_variant_slower_per_example_at_batch_32_gets_its_note_only_then():
    text = summary_markdown(summary(_demo_rows()))
    assert (
        "**Note:** student onnx_int8 takes 5.1 ms/example at batch 32 (in batches of rows of similar length, as "
        "`classify` and `domainbert predict` serve them; 41% padding) against 3.2 at batch 1: batching does not "
        "speed it up on this CPU." in text
    )
    assert text.count("**Note:**") == 1  # the other rows are faster per example at batch 32
    assert "**Note:**" not in summary_markdown(summary(_demo_rows(onnx_b1=6.0)))


def test_any_format_slower_at_batch_32_gets_the_note():
    rows = _demo_rows()
    rows[-1].update(latency_ms_b1=7.0, latency_ms_b32=7.7)  # the teacher's torch int8
    result = summary(rows)
    assert result["slower_at_b32"] == ["onnx_int8", "teacher_int8"]
    assert "**Note:** teacher int8 takes 7.7 ms/example at batch 32" in summary_markdown(result)


def test_the_bf16_or_int8_verdict_names_the_cpu_features_read_as_whole_flags(monkeypatch):
    from domainbert.deploy import report

    monkeypatch.setattr("domainbert.core.hardware.cpu_flags", lambda: frozenset({"avx2", "amx_bf16", "xavx512f"}))
    note = report._cpu_note()
    assert note.endswith("CPU features: amx_bf16, avx2")  # "xavx512f" is not avx512f
    monkeypatch.setattr("domainbert.core.hardware.cpu_flags", lambda: frozenset())
    assert report._cpu_note().endswith("CPU features: unknown")
