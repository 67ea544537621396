"""examples/benchmarks/deploy_rule_split.py on a small export: each reading's pick, the halves' scores, its errors."""

from __future__ import annotations

import json

import pytest

from domainbert.errors import DomainBertError
from tests.helpers.scripts import BENCH, script_module


@pytest.fixture(scope="module")
def split_mod():
    with script_module(BENCH / "deploy_rule_split.py") as module:
        yield module


def _export(folder, rows: int = 200, wrong: int = 6):
    """Two labels of ``rows / 2`` rows each: the slow model right on every row, the fast one wrong on ``wrong`` rows
    (half of each label, each sent to the other): macro-F1 1 - wrong / rows, a drop of 3 points at 6 of 200."""
    gold = [0] * (rows // 2) + [1] * (rows // 2)
    fast = list(gold)
    for i in range(wrong // 2):
        fast[i], fast[rows // 2 + i] = 1, 0
    variants = [
        {"variant": "teacher", "role": "teacher", "latency_ms_b32": 10.0, "val_f1_macro": 1.0},
        {"variant": "onnx_int8", "role": "student", "latency_ms_b32": 1.0, "val_f1_macro": 1 - wrong / rows},
    ]
    variants[0]["val_predictions"] = {"gold": gold, "pred": list(gold), "labels": 2}
    variants[1]["val_predictions"] = {"gold": gold, "pred": fast, "labels": 2}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "report.json").write_text(json.dumps({"variants": variants}))
    return folder


def test_half_scores_the_rows_it_keeps(split_mod, tmp_path):
    rows = split_mod.read_rows(_export(tmp_path / "e"))
    # rows 0-3 of label 0: the fast model is wrong on rows 0-2 -> label 0 F1 2/5 (1 TP, 3 FN), label 1 F1 0 (3 FP)
    fast = split_mod.half(rows, [0, 1, 2, 3])[1]
    assert fast["val_predictions"]["gold"] == [0, 0, 0, 0] and fast["val_predictions"]["pred"] == [1, 1, 1, 0]
    assert fast["val_f1_macro"] == pytest.approx((2 / 5 + 0) / 2)


def test_a_three_point_drop_on_200_rows_ships_only_where_the_reading_lets_noise_decide(split_mod, tmp_path):
    """6 wrong of 200 rows: a resample draws Binomial(200, 0.03) wrong rows, 6 ± 2.4, so the interval is about
    [-(6 + 4.7) / 200, -(6 - 4.7) / 200] = [-5.4, -0.7] points: under a 2-point limit its top end reaches -2 (ship
    unless shown worse), its low end does not (shown within), and the observed 3.0 is more than 2 (point)."""
    rows = split_mod.read_rows(_export(tmp_path / "e"))
    picks = {r: split_mod.pick(rows, r, 2.0, None, 1000)["variant"] for r in split_mod.READINGS}
    assert picks == {"shown": "teacher", "not_shown_worse": "onnx_int8", "point": "teacher"}
    assert split_mod.pick(rows, "shown", 7.0, None, 1000)["variant"] == "onnx_int8"  # the whole interval above -7
    assert split_mod.pick(rows, "shown", 2.0, 5.0, 1000)["variant"] == "onnx_int8"  # the only one within max_ms


def test_on_the_other_half_the_reading_that_ships_on_noise_breaks_its_limit(split_mod, tmp_path, capsys):
    figures = split_mod.main([str(_export(tmp_path / "e")), "--max_drop", "1", "--splits", "20", "--resamples", "200"])
    # shown: the fast model's 100-row interval never lies above -1, so the slow one ships and loses nothing on B
    assert figures["drop_shown"] == 0.0 and figures["over_shown"] == 0.0 and figures["ms_shown"] == 10.0
    # ship unless shown worse: with 1-5 wrong rows of 100 on A the top end reaches -1; on B it is 3 +- 2 points down
    assert figures["over_not_shown_worse"] >= 0.5 and figures["drop_not_shown_worse"] < -1.0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith(
        "2 variants, 200 validation rows, 20 halvings (100 rows choose, 100 score); max_drop 1, max_ms None"
    )
    assert out[-1].startswith("drop_shown=0.0 over_shown=0.0 ms_shown=10.0 ")


def test_an_export_without_predictions_or_a_budget_variant_is_refused(split_mod, tmp_path):
    with pytest.raises(DomainBertError, match=r"missing: no such file; expected an export.s report.json"):
        split_mod.main([str(tmp_path / "missing")])
    folder = _export(tmp_path / "e")
    data = json.loads((folder / "report.json").read_text())
    del data["variants"][1]["val_predictions"]
    (folder / "report.json").write_text(json.dumps(data))
    with pytest.raises(DomainBertError, match="expected two or more variants with val_predictions over the same rows"):
        split_mod.main([str(folder)])
    with pytest.raises(DomainBertError, match="--max_ms_of base: no such variant"):
        split_mod.main([str(_export(tmp_path / "f")), "--max_ms_of", "base"])


def test_a_conversion_slower_than_its_own_model_is_never_picked_as_the_rule_leaves_it_out(split_mod, tmp_path):
    rows = split_mod.read_rows(_export(tmp_path / "e"))
    teacher = rows[0]
    # the teacher's int8, slower than the teacher (as on a CPU with AMX), right on 4 rows where the teacher is not:
    # without the rule's first step it is the best on every half, and the teacher is never shown within 1 point
    gold = teacher["val_predictions"]["gold"]
    wrong = list(gold)
    for i in (0, 1, 100, 101):
        wrong[i] = 1 - gold[i]
    rows.append({**teacher, "variant": "teacher_int8", "format": "int8", "latency_ms_b32": 12.0})
    rows[0] = {
        **teacher,
        "format": "fp32",
        "val_f1_macro": 0.98,
        "val_predictions": {**teacher["val_predictions"], "pred": wrong},
    }
    found = split_mod.compare(rows, 1.0, None, splits=5, resamples=200, seed=0)
    assert all("teacher int8" not in dict(f["picks"]) for f in found.values())
    assert dict(found["shown"]["picks"]).get("teacher", 0) > 0  # the teacher ships in its place
