"""The pipeline's choice and report on hand-made records: the probe ships when fine-tuning lost to it, and says so;
one seed shows no spread; a skipped export is named; the comparison chart shows validation beside test near the data
and marks the chosen model; the wording follows a candidate's ``adapted`` and its own minutes."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from domainbert.pipeline.recipe import PROBE, Choice, Distilled, Probed, choose, export_skipped
from domainbert.pipeline.report import chart_figure, choice_why, chosen_lines, write_report
from domainbert.pipeline.runner import Runner
from domainbert.pipeline.specs import ExportSpec, TaskFiles
from domainbert.pipeline.strategies.base import BASELINE, Candidate, Run


def _run(val: float, test: float, seed=0, hf: str | None = "runs/x/hf") -> Run:
    return Run(seed=seed, hf=hf, metrics={"val/f1_macro": val, "test/f1_macro": test, "test/acc": test})


def _probe(val: float, hf: str | None = "runs/p/probe/hf") -> list[Run]:
    error = None if hf else "no encoder class for this family"
    return [Run("probe", kind="probe", hf=hf, hf_error=error, metrics={"val/f1_macro": val, "test/f1_macro": val})]


def test_the_probe_ships_when_it_validates_above_every_fine_tuned_model_and_the_reason_says_so():
    results = {"baseline": [_run(0.1667, 0.1667)], "dapt": [_run(0.20, 0.2)], PROBE: _probe(1.0)}
    choice = choose(results, "f1_macro")
    assert (choice.name, choice.best, choice.probe, choice.probe_error) == (PROBE, "dapt", 1.0, None)
    assert choice.run is results[PROBE][0]  # the probe's classifier teaches the student
    why = choice_why(choice)
    assert "fine-tuning failed to beat the frozen-embedding probe" in why and "1.0000" in why and "dapt 0.2000" in why


def test_a_fine_tuned_model_at_or_above_the_probe_ships_and_one_below_an_unexportable_probe_is_flagged():
    results = {"baseline": [_run(0.80, 0.7)], PROBE: _probe(0.80)}
    choice = choose(results, "f1_macro")
    assert choice.name == "baseline" and "the frozen probe scored 0.8000" in choice_why(choice)  # a tie: fine-tuned
    results[PROBE] = _probe(0.90, hf=None)
    choice = choose(results, "f1_macro")
    assert (choice.name, choice.probe, choice.probe_error) == ("baseline", 0.9, "no encoder class for this family")
    why = choice_why(choice)
    assert "WARNING" in why and "BELOW the frozen-embedding probe (0.8000 against 0.9000)" in why
    assert "no encoder class for this family" in why


def test_the_report_words_the_choice_from_its_parts():
    """The choice is a record of its parts; the report writes the sentence from them, never parsing one back."""
    run = _run(0.84, 0.8)
    choice = Choice("dapt", run, "f1_macro", {BASELINE: 0.81, "dapt": 0.84, "tapt": None}, "dapt", probe=0.7)
    assert choice_why(choice) == (
        "best validation val/f1_macro: 0.8400 against the baseline's 0.8100; the frozen probe scored 0.7000"
    )
    kept = Choice(BASELINE, run, "acc", {BASELINE: 0.81}, BASELINE, gated=("dapt", "tapt"))
    assert choice_why(kept).startswith("the only fine-tuned model (the probe gate kept dapt, tapt from fine-tuning)")
    assert chosen_lines(choice)[2] == f"**dapt**, its best seed on validation, `{run.hf}`: {choice_why(choice)}."


def _report(tmp_path, results, probed, choice, seeds, student=None) -> str:
    runner = Runner(tmp_path / "p")
    candidates = [Candidate(n, n, runs=runs, adapted=n not in (BASELINE, PROBE)) for n, runs in results.items()]
    return write_report(runner, candidates, probed, choice, student, "f1_macro", seeds).read_text()


def test_one_seed_prints_no_spread_and_a_probe_that_won_is_the_reports_warning_and_chosen_model(tmp_path):
    results = {"baseline": [_run(0.1667, 0.1667)], PROBE: _probe(1.0)}
    probed = Probed("runs/p/probe", val={"f1_macro": 1.0, "acc": 1.0}, test={"f1_macro": 1.0, "acc": 1.0})
    text = _report(tmp_path, results, probed, choose(results, "f1_macro"), [0])
    table = text.split("## The chosen fine-tuned model")[0].split("| starting model")[1]
    assert "±" not in table  # one seed: no spread
    assert "One seed (0) per starting model" in text and "| baseline | 0.1667 | 0.1667 |" in text
    assert text.index("Warning: fine-tuning failed") < text.index("## Does domain adaptation help?")
    assert "ships the probe as a classifier" in text
    assert "**Fine-tuning lost to the frozen-embedding probe**: the baseline scored 0.1667" in text
    assert "What fine-tuning itself buys" not in text
    assert "**frozen probe**, the base encoder, frozen, with the probe's logistic regression" in text
    assert "| frozen probe |" not in text  # one probe row: the frozen-embeddings one
    assert (tmp_path / "p" / "plots" / "comparison.png").is_file()


def test_two_seeds_print_mean_and_std_and_a_probe_below_fine_tuning_raises_no_warning(tmp_path):
    results = {"baseline": [_run(0.8, 0.7, 0), _run(0.9, 0.8, 1)], PROBE: _probe(0.5)}
    probed = Probed("runs/p/probe", val={"f1_macro": 0.5}, test={"f1_macro": 0.5, "acc": 0.5})
    choice = choose(results, "f1_macro")
    text = _report(tmp_path, results, probed, choice, [0, 1])
    assert choice.name == "baseline" and "| baseline | 0.8500 ± 0.0707 | 0.7500 ± 0.0707 |" in text
    assert "Warning" not in text and "What fine-tuning itself buys" in text and "+25.00 test f1_macro points" in text


def test_a_skipped_export_is_named_in_the_report_with_its_reason(tmp_path):
    student = Run("distill", hf="runs/p/distill/hf", metrics={"test/f1_macro": 0.5})
    reason = export_skipped(ExportSpec(), student, TaskFiles("train.jsonl", "val.jsonl", None))
    assert "no test split (task_test)" in reason and "domainbert export --model runs/p/distill/hf" in reason
    assert export_skipped(ExportSpec(), student, TaskFiles("train.jsonl", "val.jsonl", "test.jsonl")) is None
    assert "disabled" in export_skipped(ExportSpec(enabled=False), student, TaskFiles("t", "v", "te"))
    results = {"baseline": [_run(0.8, 0.7)]}
    text = _report(tmp_path, results, None, choose(results, "f1_macro"), [0], Distilled(student, skipped=reason))
    assert f"- deployment variants (int8, ONNX...): **not exported**: {reason}" in text


@pytest.mark.parametrize("spread", [True, False])
def test_the_comparison_chart_shows_validation_beside_test_near_the_data_and_marks_the_chosen_model(spread):
    import matplotlib.pyplot as plt
    from matplotlib.container import ErrorbarContainer

    rows = [
        ("frozen probe", 0.77, 0.0, 0.76, 0.0),
        ("baseline", 0.80, 0.01, 0.785, 0.01),
        ("knn-dapt+tapt soup", 0.79, 0.0, 0.792, 0.0),  # the tallest test score, not chosen
    ]
    fig = chart_figure(rows, "f1_macro", spread=spread, chosen="baseline")
    ax = fig.axes[0]
    low, high = ax.get_ylim()
    assert 0.7 < low < 0.76 and 0.80 < high < 0.86  # near the data, not from 0
    points = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    assert len(points) == 6  # validation and test for each row
    assert [t.get_text() for t in ax.texts if t.get_text() == "chosen"] == ["chosen"]
    chosen = next(t for t in ax.texts if t.get_text() == "chosen")
    assert chosen.xy[0] == 1  # over the baseline, the second row
    assert "validation" in ax.get_title() and "test" in ax.get_title()
    has_bars = any(len(c[2]) for c in points)
    assert has_bars == spread
    renderer = fig.canvas.get_renderer()
    box = fig.bbox
    for label in [*ax.get_xticklabels(), *ax.texts, ax.title]:
        extent = label.get_window_extent(renderer)
        assert extent.x0 >= box.x0 - 1 and extent.x1 <= box.x1 + 1 and extent.y0 >= box.y0 - 1, label
    plt.close(fig)


def test_the_curves_show_validation_even_beside_many_training_losses():
    from domainbert.pipeline.report import curve_panels

    distill = ["epoch", "step", "test/f1_macro", "train/loss", "train/loss_hard", "train/loss_hidden", "train/loss_kl"]
    distill += ["val/acc", "val/f1_macro", "val/loss"]
    assert curve_panels(distill) == [["train/loss", "val/loss"], ["val/acc"], ["val/f1_macro"], ["train/loss_hard"]]
    assert curve_panels(["train/loss", "probe/val_f1"]) == [["train/loss"], ["probe/val_f1"]]


def _predictions(path, pred):
    import json

    path.write_text(json.dumps({"gold": [0, 1, 2, 0, 1, 2], "pred": pred, "labels": ["a", "b", "c"]}))
    return str(path)


def test_a_plugin_candidate_that_is_no_adaptation_is_not_called_one_and_its_fine_tuning_counts(tmp_path):
    runner = Runner(tmp_path / "p")
    runner.called += ["finetune-baseline-seed0", "finetune-relabel-seed0"]
    runner.state.update({"finetune-baseline-seed0": {"seconds": 120.0}, "finetune-relabel-seed0": {"seconds": 90.0}})
    predicted = _predictions(tmp_path / "b.json", [0, 1, 2, 0, 1, 2])
    base = replace(_run(0.8, 0.7), stage="finetune-baseline-seed0", predictions=predicted)
    predicted = _predictions(tmp_path / "o.json", [0, 1, 2, 0, 1, 1])
    other = replace(_run(0.8, 0.7), stage="finetune-relabel-seed0", predictions=predicted)
    candidates = [
        Candidate(BASELINE, BASELINE, runs=[base], adapted=False),
        Candidate("relabel", "relabel", runs=[other], adapted=False),
    ]
    choice = choose({c.name: c.runs for c in candidates}, "f1_macro")
    text = write_report(runner, candidates, None, choice, None, "f1_macro", [0]).read_text()
    row = next(line for line in text.splitlines() if line.startswith("| relabel |"))
    assert row.endswith("| 1.5 |")  # its own fine-tuning's 90 s
    assert re.search(r"\*\*relabel\*\*: relabel's model \(no domain adaptation\) (helped|made no signif|hurt)", text)
    assert "adaptation made" not in text and "adaptation helped" not in text and "adaptation hurt" not in text
    assert next(line for line in text.splitlines() if line.startswith("| baseline |")).endswith("| 0.0 |")
