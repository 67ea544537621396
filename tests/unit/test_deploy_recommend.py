"""The variant to ship: the fastest at batch 32 within the drop (and latency) allowed, on validation when measured."""

from __future__ import annotations

import json

import pytest

from domainbert.deploy.recommend import Best, Recommendation, Top, below_probe_line, check_rule, label, recommend
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
    # the best: teacher and teacher_int8 both 0.791, the faster of the two -> it is the pick, nothing faster is within
    assert rec.variant == "teacher_int8" and rec.label == "teacher int8" and rec.path == "out/teacher_int8"
    assert rec.split == "test" and rec.key == "f1_macro" and rec.data == "test.jsonl"
    assert rec.best == Best("teacher_int8", "teacher int8", 0.791)
    assert rec.interval is None and not rec.below_probe
    assert [g.label for g in rec.faster] == ["student int8", "student onnx_int8"]
    assert rec.why.startswith("the best test macro-F1 (0.7910) of the variants; the faster student onnx_int8")
    assert "(5.1 ms) is -6.00 points (point estimate: no predictions to pair)" in rec.why
    assert "(1 other faster variant lost too)" in rec.why


def test_the_why_line_counts_the_other_faster_variants_that_lost():
    rows = [r for r in _rows() if r["variant"] != "teacher_int8"]
    rec = recommend(rows, max_drop=0.1)  # the teacher ships; its ONNX int8 (-0.5) and the student's three lose
    assert rec.variant == "teacher" and len(rec.faster) == 4
    assert "the faster teacher onnx_int8 (8.4 ms) is -0.50 points" in rec.why
    assert "(3 other faster variants lost too)" in rec.why


def test_a_drop_of_exactly_the_limit_counts_and_a_wider_one_reaches_the_students_int8():
    assert recommend(_rows(), max_drop=0.5).variant == "teacher_int8"  # 0.786 is 0.5 below: within
    assert recommend(_rows(), max_drop=0.49).variant == "teacher_int8"
    rows = [r for r in _rows() if r["variant"] != "teacher_int8"]
    assert recommend(rows, max_drop=0.5).variant == "teacher_onnx_int8"
    assert recommend(rows, max_drop=0.49).variant == "teacher"
    assert recommend(_rows(), max_drop=6.3).variant == "int8"  # 0.728 = 0.791 - 0.063


def test_a_latency_limit_alone_picks_the_fastest_under_it_and_warns_below_the_probe():
    rec = recommend(_rows(), max_drop=None, max_ms=5.0)
    assert rec.variant == "int8" and rec.rule == "at most 5 ms/example at batch 32"
    assert rec.below_probe and rec.probe == 0.761
    assert below_probe_line(rec) == (
        "WARNING: the recommended student int8 scores 0.7280 test macro-F1, below the frozen-embedding probe's 0.7610"
    )
    both = recommend(_rows(), max_drop=1.0, max_ms=8.0)
    assert both.variant == "teacher_int8" and both.rule.endswith("at most 8 ms/example at batch 32")


def test_a_latency_limit_compares_with_the_best_under_it_and_names_the_better_one_it_keeps_out():
    rec = recommend(_rows(), max_drop=1.0, max_ms=5.0)
    assert rec.variant == "int8" and rec.best.label == "student int8"
    assert rec.top == Top("teacher int8", 0.791, 7.7)  # of two 0.791s, faster
    assert rec.why.endswith("the better teacher int8 (0.7910) takes 7.7 ms, over max_ms 5")


def test_no_variant_under_the_latency_limit_names_none_and_says_why():
    rec = recommend(_rows(), max_drop=1.0, max_ms=4.0)
    assert rec.variant is None and below_probe_line(rec) is None
    assert "no variant is shown to be at most 1 macro-F1 points below the best, at most 4 ms" in rec.why
    assert "the fastest, student int8, takes 4.2 ms" in rec.why


def test_with_validation_scores_the_choice_is_made_on_validation():
    rec = recommend(_rows(val=True), max_drop=1.0)
    # validation: best teacher 0.80; within 0.79: teacher 18.9, teacher_onnx_int8 0.797 at 8.4 (int8's 0.788 is out)
    assert rec.variant == "teacher_onnx_int8" and rec.split == "validation" and rec.data == "val.jsonl"
    assert rec.key == "val_f1_macro" and rec.score == 0.797


def test_rows_without_a_latency_or_a_metric_are_not_candidates():
    rows = [*_rows(), {"variant": "onnx", "role": "student", "f1_macro": 0.9, "check": "skipped"}]
    assert recommend(rows).variant == "teacher_int8"
    none = recommend([{"variant": "student", "role": "model", "latency_ms_b32": 1.0}])
    assert none.variant is None and "no variant has both a latency and a task metric" in none.why


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


def _predictions(rows_per_class: int, wrong_per_class: int) -> tuple[dict, dict]:
    """Two classes of ``rows_per_class`` rows: the best model right on every row, the fast one wrong on
    ``wrong_per_class`` rows of each class (each sent to the other class)."""
    gold = [0] * rows_per_class + [1] * rows_per_class
    fast = list(gold)
    for i in range(wrong_per_class):
        fast[i], fast[rows_per_class + i] = 1, 0
    return {"gold": gold, "pred": list(gold), "labels": 2}, {"gold": gold, "pred": fast, "labels": 2}


def _pair(rows_per_class: int, wrong_per_class: int) -> list[dict]:
    best, fast = _predictions(rows_per_class, wrong_per_class)
    # each class: TP = n - w, FP = FN = w, so F1 = (n - w) / n; macro-F1 the same
    fast_f1 = (rows_per_class - wrong_per_class) / rows_per_class
    return [
        {**_row("teacher", "teacher", 20.0, 0.9, 1.0), "val_predictions": best},
        {**_row("int8", "student", 5.0, 0.88, fast_f1), "val_predictions": fast},
    ]


def test_a_two_point_drop_on_few_rows_is_not_shown_within_one_point_and_the_best_ships():
    """100 rows, the fast model wrong on 2 of them: macro-F1 0.98 against 1.00, a drop of 2.00 points.

    A bootstrap resample of 100 rows draws neither wrong row with probability 0.98^100 = 0.133, more than the 2.5%
    the interval's upper end leaves out: so that end is 0.00, and its low end is below the point estimate's -2.00.
    The drop is not shown to be within 1 point, so the best ships; a limit of 6 points takes the fast model in.
    """
    rec = recommend(_pair(50, 1), max_drop=1.0)
    assert rec.split == "validation" and rec.variant == "teacher" and rec.interval is None
    (lost,) = rec.faster
    assert lost.diff == pytest.approx(-2.0) and lost.high == pytest.approx(0.0)
    assert lost.rows == 100 and lost.low < -2.0
    assert f"the faster student int8 (5.0 ms) is -2.00 points [{lost.low:+.2f}, +0.00], " in rec.why
    assert f"not shown to be within 1 points (its interval reaches {lost.low:+.2f})" in rec.why
    wide = recommend(_pair(50, 1), max_drop=6.0)
    assert wide.variant == "int8" and wide.interval.low >= -6.0
    rule = "the fastest at batch 32 whose validation macro-F1 is shown to be at most 6 points below the best"
    assert rule in wide.why and ", +0.00] over 100 rows" in wide.why
    assert wide.why.endswith("the better teacher is slower")


def test_a_half_point_drop_on_many_rows_is_shown_within_one_point_and_the_faster_model_ships():
    """2,000 rows, the fast model wrong on 10 (5 per class): macro-F1 0.995 against 1.000, a drop of 0.50 points.

    The wrong rows a resample draws are about Binomial(2000, 0.005): 10 ± 3.2, so the interval's low end is about
    -(10 + 1.96 × 3.2) / 2000 = -0.8 points: the drop is shown to be within 1 point, and the faster model ships.
    The same model wrong on 2 of 200 rows drops 1.00 point, and the low end, about -(2 + 1.96 × 1.4) / 200 = -2.4
    points, leaves it out.
    """
    rec = recommend(_pair(1000, 5), max_drop=1.0)
    assert rec.variant == "int8"
    interval = rec.interval
    assert interval.diff == pytest.approx(-0.5) and -1.0 < interval.low < -0.6 and interval.rows == 2000
    few = recommend(_pair(100, 1), max_drop=1.0)
    assert few.variant == "teacher" and few.faster[0].low < -1.5


def test_predictions_of_other_rows_are_not_paired_and_the_point_estimate_decides():
    rows = _pair(50, 1)
    rows[1]["val_predictions"] = {**rows[1]["val_predictions"], "gold": [1] * 100}  # not the same rows
    rec = recommend(rows, max_drop=1.0)
    assert rec.variant == "teacher" and rec.faster[0].high is None
    assert "(point estimate: no predictions to pair)" in rec.why


def _rare_label_pair(missed: bool) -> list[dict]:
    """Eight labels of 50 validation rows and one of 5: the fast model never predicts the rare one (``missed``), or
    misses 20 rows spread over the eight; the best model right on every row."""
    gold = [c for c in range(8) for _ in range(50)] + [8] * 5
    fast = list(gold)
    if missed:
        fast[-5:] = [0] * 5
    else:
        for c in range(8):
            for i in range(c * 50, c * 50 + 3):
                fast[i] = (c + 1) % 8
    names = [f"era{c}" for c in range(9)]
    best = {"gold": gold, "pred": list(gold), "labels": 9, "names": names}
    return [
        {**_row("teacher", "teacher", 20.0, 0.9, 1.0), "val_predictions": best},
        {**_row("student", "student", 5.0, 0.88, 0.9), "val_predictions": {**best, "pred": fast}},
    ]


def test_a_drop_that_one_rare_label_holds_is_named_with_its_rows():
    """The fast model misses the 5 rows of label 8 (F1 0) and sends them to label 0 (precision 50/55: F1 0.952):
    macro-F1 (7 x 1.00 + 0.952 + 0) / 9 = 0.884, an 11.6-point drop, of which label 8 holds 100 / 9 = 11.1."""
    rec = recommend(_rare_label_pair(missed=True), max_drop=1.0)
    assert rec.variant == "teacher"
    (lost,) = rec.faster
    assert lost.held_by == "label `era8` holds 11.1 of the 11.6 points (F1 0.00 against 1.00 on its 5 rows)"
    assert f"not shown to be within 1 points (its interval reaches {lost.low:+.2f}): {lost.held_by}" in rec.why


def test_a_drop_spread_over_the_labels_names_none():
    rec = recommend(_rare_label_pair(missed=False), max_drop=1.0)
    (lost,) = rec.faster
    assert lost.diff < -1.0 and lost.held_by is None
    assert "holds" not in rec.why


def test_a_recommendation_is_a_record_its_json_gives_back():
    for rec in (
        recommend(_rows(), max_drop=1.0, max_ms=5.0),  # best, top
        recommend(_pair(1000, 5), max_drop=1.0),  # interval
        recommend(_pair(50, 1), max_drop=1.0),  # faster
        recommend(_rare_label_pair(missed=True), max_drop=1.0),  # a drop one label holds
        recommend(_rows(), max_drop=1.0, max_ms=4.0),  # none
    ):
        assert Recommendation.from_json(json.loads(json.dumps(rec.to_json())), "report.json: recommendation") == rec


def _formatted(variant, role, fmt, ms, val):
    return {**_row(variant, role, ms, val - 0.01, val), "format": fmt}


def _amx_rows():
    """An export on a CPU with AMX: bf16 serves the fp32 folders faster than the int8 kernels serve theirs."""
    return [
        _formatted("teacher", "teacher", "fp32", 3.5, 0.8033),
        _formatted("teacher_int8", "teacher", "int8", 5.1, 0.8038),
        _formatted("teacher_onnx_int8", "teacher", "onnx_int8", 5.5, 0.8021),
        _formatted("student", "student", "fp32", 1.7, 0.7746),
        _formatted("onnx_int8", "student", "onnx_int8", 1.2, 0.7828),
    ]


def test_a_conversion_no_faster_than_its_own_model_is_left_out_before_the_rule_runs():
    rec = recommend(_amx_rows(), max_drop=0.0)
    # teacher_int8 validates 0.05 above the teacher it was made from, and is slower: the teacher is the best
    assert rec.variant == "teacher" and rec.best == Best("teacher", "teacher", 0.8033)
    assert rec.left_out == ("teacher int8", "teacher onnx_int8")
    assert rec.why.endswith("left out as no faster than the model each converts: teacher int8, teacher onnx_int8")
    assert [g.label for g in rec.faster] == ["student onnx_int8", "student"]  # the student's faster ONNX int8 stays
    again = Recommendation.from_json(json.loads(json.dumps(rec.to_json())), "report.json")
    assert again.left_out == rec.left_out


def test_a_faster_conversion_stays_and_a_role_with_two_fp32_rows_keeps_its_conversions():
    rows = _amx_rows()
    rows[1]["latency_ms_b32"] = 3.0  # the teacher's int8 is now faster than the teacher
    rec = recommend(rows, max_drop=0.0)
    assert rec.variant == "teacher_int8" and rec.left_out == ("teacher onnx_int8",)
    rows = _amx_rows() + [_formatted("teacher_copy", "teacher", "fp32", 9.0, 0.70)]
    assert recommend(rows, max_drop=0.0).variant == "teacher_int8" and not recommend(rows).left_out
