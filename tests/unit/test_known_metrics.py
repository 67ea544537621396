"""The export takes a model's task metric from a training stage's test predictions over the same rows, or none."""

import json

import pytest
import torch

from domainbert.deploy.bench import EvalSet, known_metrics, measure, task_metrics

NAMES = ["a", "b", "c"]
GOLD = [0, 1, 2, 2, 1, 0, 1]
PRED = [0, 1, 1, 2, 1, 2, 1]


def _write(tmp_path, gold=GOLD, pred=PRED, labels=NAMES):
    path = tmp_path / "test_predictions.json"
    path.write_text(json.dumps({"gold": gold, "pred": pred, "labels": labels}))
    return path


def test_the_metric_of_known_predictions_is_the_one_a_pass_over_the_rows_would_give(tmp_path):
    got = known_metrics(_write(tmp_path), GOLD, NAMES, 3)
    logits = torch.nn.functional.one_hot(torch.tensor(PRED), 3).float()
    batches = [{"labels": torch.tensor(GOLD), "logits": logits}]
    assert got == task_metrics(lambda b: b["logits"], batches, 3)
    assert got["accuracy"] == pytest.approx(5 / 7, abs=1e-5)


@pytest.mark.parametrize(
    "written",
    [
        {"gold": GOLD[:-1], "pred": PRED[:-1]},  # other rows
        {"gold": [1, *GOLD[1:]]},  # other gold labels
        {"labels": ["b", "a", "c"]},  # the labels in another order
        {"pred": PRED[:-1]},  # a prediction missing
    ],
)
def test_predictions_of_other_rows_or_labels_give_none_so_the_rows_are_run(tmp_path, written):
    assert known_metrics(_write(tmp_path, **written), GOLD, NAMES, 3) is None


def test_an_unreadable_file_or_no_labels_give_none(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert known_metrics(bad, GOLD, NAMES, 3) is None
    assert known_metrics(tmp_path / "missing.json", GOLD, NAMES, 3) is None
    assert known_metrics(_write(tmp_path), None, NAMES, 3) is None


def test_measure_with_a_known_metric_times_the_model_but_runs_no_metric_pass():
    calls = []

    def runner(batch):
        calls.append(batch["input_ids"].shape[0])
        return torch.zeros(batch["input_ids"].shape[0], 3)

    one = {"input_ids": torch.ones(1, 4, dtype=torch.long)}
    metric = {"input_ids": torch.ones(5, 4, dtype=torch.long), "labels": torch.zeros(5, dtype=torch.long)}
    evalset = EvalSet(metric_batches=[metric], b1=[one], b32=[one], num_labels=3, repeats=1)
    out = measure(runner, evalset, known={"accuracy": 0.5, "f1_macro": 0.25})
    assert out["f1_macro"] == 0.25 and 5 not in calls
    assert measure(runner, evalset)["accuracy"] == 1.0 and 5 in calls
