"""ProbeWatch without a Trainer: its settings, its data checks, its verdict and its checkpoint state."""

from pathlib import Path

import pytest
import torch

from domainbert.adapt.watch import ProbeWatch
from domainbert.errors import DomainBertError

FX = Path(__file__).resolve().parents[1] / "fixtures"
TRAIN, VAL = str(FX / "cls_train.jsonl"), str(FX / "cls_val.jsonl")


@pytest.mark.parametrize(
    "kwargs",
    [{"every_n_steps": 0}, {"every_n_steps": 2.5}, {"patience": 0}, {"metric": "f1"}, {"min_delta": -0.1}],
)
def test_bad_settings_are_refused(kwargs):
    with pytest.raises(DomainBertError, match="ProbeWatch"):
        ProbeWatch(TRAIN, VAL, **kwargs)


def test_data_is_read_with_labels_in_sorted_order():
    watch = ProbeWatch(TRAIN, VAL)
    watch.setup(None, None, "fit")
    assert watch._data["labels"] == ["api", "graphics", "network"]
    texts, y = watch._data["train"]
    assert len(texts) == 60 and y.shape == (60,) and set(y.tolist()) == {0, 1, 2}
    assert len(watch._data["val"][0]) == 15


def test_missing_files_and_unknown_validation_labels_are_errors(tmp_path):
    with pytest.raises(DomainBertError, match="no such file"):
        ProbeWatch(str(tmp_path / "nope.jsonl"), VAL).setup(None, None, "fit")
    with pytest.raises(DomainBertError, match="not in the training split"):
        ProbeWatch(TRAIN, str(FX / "cls_val_unknown.jsonl")).setup(None, None, "fit")


def test_verdict_says_whether_adaptation_beat_step_zero():
    watch = ProbeWatch(TRAIN, VAL)
    watch.history = [{"step": 0, "score": 0.8}, {"step": 10, "score": 0.7}, {"step": 20, "score": 0.75}]
    watch.best_step, watch.best_score = 0, 0.8
    assert watch.verdict() == "adaptation did not improve the task's probe: step 0 probe 0.8000, best later 0.7500"
    watch.history.append({"step": 30, "score": 0.9})
    watch.best_step, watch.best_score = 30, 0.9
    assert watch.verdict() == "adaptation improved the task's probe: step 0 probe 0.8000, best 0.9000 at step 30"
    watch.history, watch.best_step = watch.history[:1], 0
    assert watch.verdict().endswith("best later none checked")


def test_checkpoint_state_round_trips():
    watch = ProbeWatch(TRAIN, VAL)
    watch.c, watch.best_step, watch.best_score, watch.bad_checks = 10.0, 5, 0.7, 1
    watch.history = [{"step": 0, "score": 0.6}, {"step": 5, "score": 0.7}]
    watch.best_state = {"w": torch.arange(3.0)}
    other = ProbeWatch(TRAIN, VAL)
    other.load_state_dict(watch.state_dict())
    assert (other.c, other.best_step, other.best_score, other.bad_checks) == (10.0, 5, 0.7, 1)
    assert other.history == watch.history and torch.equal(other.best_state["w"], torch.arange(3.0))
