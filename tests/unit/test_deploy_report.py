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
