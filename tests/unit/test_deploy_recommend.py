"""The variant to ship: the fastest at batch 32 within the drop (and latency) allowed, on validation when measured."""

from __future__ import annotations

import pytest

from domainbert.deploy.recommend import below_probe_line, check_rule, label, recommend
from domainbert.errors import DomainBertError


def _row(variant, role, ms, f1, val=None):
    row = {"variant": variant, "role": role, "latency_ms_b32": ms, "f1_macro": f1, "path": f"out/{variant}"}
    row["data"], row["val"] = "test.jsonl", "val.jsonl"
    return {**row, "val_f1_macro": val} if val is not None else row


def _rows(val: bool = False):
    """An export like the demo's: a fine-tuned teacher whose int8 beats the 1-epoch student."""
    v = (lambda x: x) if val else (lambda x: None)
    return [
        _row("teacher", "teacher", 18.9, 0.791, v(0.80)),
        _row("probe", "probe", 19.5, 0.761, v(0.77)),
        _row("student", "student", 9.1, 0.729, v(0.74)),
        _row("int8", "student", 4.2, 0.728, v(0.739)),
        _row("onnx_int8", "student", 5.1, 0.731, v(0.745)),
        _row("teacher_int8", "teacher", 7.7, 0.791, v(0.788)),
        _row("teacher_onnx_int8", "teacher", 8.4, 0.786, v(0.797)),
    ]


def test_within_one_point_of_the_best_the_teachers_int8_is_the_fastest():
    rec = recommend(_rows(), max_drop=1.0)
    # within 0.791 - 0.010 = 0.781: teacher 18.9, teacher_int8 7.7, teacher_onnx_int8 8.4 -> teacher_int8
    assert rec["variant"] == "teacher_int8" and rec["label"] == "teacher int8" and rec["path"] == "out/teacher_int8"
    assert rec["split"] == "test" and rec["key"] == "f1_macro" and rec["data"] == "test.jsonl"
    assert rec["best"] == {"variant": "teacher", "label": "teacher", "score": 0.791}
    assert "the fastest at batch 32 (7.7 ms/example) of the 3 variant(s) within 1 macro-F1 points" in rec["why"]
    assert "0.0 points below the best (teacher, 0.7910)" in rec["why"] and not rec["below_probe"]


def test_a_drop_of_exactly_the_limit_counts_and_a_wider_one_reaches_the_students_int8():
    assert recommend(_rows(), max_drop=0.5)["variant"] == "teacher_int8"  # 0.786 is 0.5 below: within
    assert recommend(_rows(), max_drop=0.49)["variant"] == "teacher_int8"
    rows = [r for r in _rows() if r["variant"] != "teacher_int8"]
    assert recommend(rows, max_drop=0.5)["variant"] == "teacher_onnx_int8"
    assert recommend(rows, max_drop=0.49)["variant"] == "teacher"
    assert recommend(_rows(), max_drop=6.3)["variant"] == "int8"  # 0.728 = 0.791 - 0.063


def test_a_latency_limit_alone_picks_the_fastest_under_it_and_warns_below_the_probe():
    rec = recommend(_rows(), max_drop=None, max_ms=5.0)
    assert rec["variant"] == "int8" and rec["rule"] == "at most 5 ms/example at batch 32"
    assert rec["below_probe"] and rec["probe"] == 0.761
    assert below_probe_line(rec) == (
        "WARNING: the recommended student int8 scores 0.7280 test macro-F1, below the frozen-embedding probe's 0.7610"
    )
    both = recommend(_rows(), max_drop=1.0, max_ms=8.0)
    assert both["variant"] == "teacher_int8" and both["rule"].endswith("at most 8 ms/example at batch 32")


def test_no_variant_under_the_rule_names_none_and_says_why():
    rec = recommend(_rows(), max_drop=1.0, max_ms=5.0)
    assert rec["variant"] is None and below_probe_line(rec) is None
    assert "no variant is within 1 macro-F1 points of the best, at most 5 ms/example" in rec["why"]
    assert "the fastest, student int8, takes 4.2 ms" in rec["why"]


def test_with_validation_scores_the_choice_is_made_on_validation():
    rec = recommend(_rows(val=True), max_drop=1.0)
    # validation: best teacher 0.80; within 0.79: teacher 18.9, teacher_onnx_int8 0.797 at 8.4 (int8's 0.788 is out)
    assert rec["variant"] == "teacher_onnx_int8" and rec["split"] == "validation" and rec["data"] == "val.jsonl"
    assert rec["key"] == "val_f1_macro" and rec["score"] == 0.797


def test_rows_without_a_latency_or_a_metric_are_not_candidates():
    rows = [*_rows(), {"variant": "onnx", "role": "student", "f1_macro": 0.9, "check": "skipped"}]
    assert recommend(rows)["variant"] == "teacher_int8"
    none = recommend([{"variant": "student", "role": "model", "latency_ms_b32": 1.0}])
    assert none["variant"] is None and "no variant has both a latency and a task metric" in none["why"]


@pytest.mark.parametrize(
    ("drop", "ms", "message"),
    [(-0.5, None, "max_drop=-0.5: expected macro-F1 points at or above 0"), (1.0, 0.0, "max_ms=0.0: expected")],
)
def test_a_rule_that_cannot_choose_is_refused(drop, ms, message):
    with pytest.raises(DomainBertError, match=message):
        check_rule(drop, ms)


def test_a_rows_label_is_its_role_then_its_format():
    assert label({"variant": "student", "role": "model"}) == "model"
    assert label({"variant": "student", "role": "student"}) == "student"
    assert label({"variant": "int8", "role": "student"}) == "student int8"
    assert label({"variant": "pruned", "role": "model"}) == "model pruned"
    assert label({"variant": "teacher_onnx_int8", "role": "teacher"}) == "teacher onnx_int8"
    assert label({"variant": "probe", "role": "probe"}) == "probe"
    assert label({"variant": "int8"}) == "int8"  # a row of an older export
