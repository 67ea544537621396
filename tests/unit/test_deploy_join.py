"""Every model that could serve is a row of one summary: another export's rows join it, and every validation pass
keeps its predictions, in the file's order, for the paired comparison the recommendation makes."""

from __future__ import annotations

import json

import pytest
import torch

from domainbert.core.hf import load_tokenizer
from domainbert.deploy.bench import metric_batches, task_metrics
from domainbert.deploy.report import joined_rows, summary, summary_markdown, write_report
from domainbert.errors import DomainBertError

TEXTS = ["the tool renders graphical images and more", "an api", "zqxjvkwpfhgtb", "the server exports packets", "sql"]
LABELS = [2, 0, 1, 2, 0]


def _by_length(batch):
    """Logits that depend on each row's real length only (and refuse any key but the model's inputs)."""
    assert set(batch) <= {"input_ids", "attention_mask", "token_type_ids", "labels"}
    return torch.nn.functional.one_hot(batch["attention_mask"].sum(1) % 3, 3).float()


def test_a_validation_pass_keeps_its_predictions_in_the_files_order(tiny_bert):
    tokenizer = load_tokenizer(str(tiny_bert))
    batches = metric_batches(tokenizer, TEXTS, LABELS, 2, 12, rows=True)
    assert [i for b in batches for i in b["rows"]] != list(range(5))  # batched by length, not in file order
    got = task_metrics(_by_length, batches, 3)
    lengths = [len(ids) for ids in tokenizer(TEXTS, truncation=True, max_length=12)["input_ids"]]
    assert got["predictions"] == {"gold": LABELS, "pred": [n % 3 for n in lengths], "labels": 3}
    named = task_metrics(_by_length, batches, 3, ["a", "b", "c"])["predictions"]
    assert named == {**got["predictions"], "names": ["a", "b", "c"]}
    plain = task_metrics(_by_length, metric_batches(tokenizer, TEXTS, LABELS, 2, 12), 3)
    assert "predictions" not in plain and plain == {k: v for k, v in got.items() if k != "predictions"}


def _export(folder, role: str, rows: list[dict]) -> str:
    folder.mkdir(parents=True)
    (folder / "report.json").write_text(json.dumps({"variants": [{"role": role, **r} for r in rows]}))
    return str(folder)


def _row(variant: str, ms: float, f1: float) -> dict:
    return {"variant": variant, "path": f"x/{variant}", "latency_ms_b32": ms, "f1_macro": f1, "size_mb": 400.0}


def test_another_exports_model_joins_the_summary_under_its_role(tmp_path):
    larger = _export(
        tmp_path / "larger",
        "larger teacher",
        [_row("student", 60.0, 0.82) | {"speedup_b32_vs_student": 1.0}, _row("int8", 30.0, 0.81)],
    )
    joined = joined_rows([larger])
    assert [(r["variant"], r["role"], r["joined"]) for r in joined] == [
        ("larger_teacher", "larger teacher", larger),
        ("larger_teacher_int8", "larger teacher", larger),
    ]
    assert "speedup_b32_vs_student" not in joined[0]  # derived again against this export's rows
    ours = [_row("student", 9.0, 0.75) | {"role": "student"}, _row("teacher", 19.0, 0.79) | {"role": "teacher"}]
    result = summary(ours + joined, max_drop=1.0)
    text = summary_markdown(result)
    assert "| larger teacher |" in text and "| larger teacher int8 |" in text
    assert result["recommendation"].label == "larger teacher int8"  # 0.81, within a point of 0.82 and faster
    assert {r["label"]: r["speedup_b32_vs_student"] for r in result["variants"]}["larger teacher int8"] == 0.3


def test_an_unreadable_or_clashing_join_is_refused_in_one_line(tmp_path):
    with pytest.raises(DomainBertError, match=r"export --join: .*missing/report.json: not an export's summary"):
        joined_rows([str(tmp_path / "missing")])
    twice = [_export(tmp_path / n, "larger teacher", [_row("student", 60.0, 0.82)]) for n in ("a", "b")]
    with pytest.raises(DomainBertError, match=r"two joined exports name rows \['larger_teacher'\]"):
        joined_rows(twice)
    clash = joined_rows([_export(tmp_path / "c", "student", [_row("student", 6.0, 0.7)])])
    with pytest.raises(DomainBertError, match=r"export: two rows are named \['student'\]"):
        summary([_row("student", 9.0, 0.75) | {"role": "student"}, *clash])


def test_a_variants_own_report_lists_no_prediction_per_row(tmp_path):
    row = _row("student", 9.0, 0.75) | {"val_predictions": {"gold": [0, 1], "pred": [0, 0], "labels": 2}}
    write_report(tmp_path, row)
    assert "val_predictions" not in (tmp_path / "report.md").read_text()
    assert json.loads((tmp_path / "report.json").read_text())["val_predictions"]["pred"] == [0, 0]
