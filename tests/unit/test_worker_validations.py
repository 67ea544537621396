"""The stage worker's validation metrics come from the fit's own passes: the best checkpoint's or the last one's."""

from types import SimpleNamespace

import torch

from domainbert.pipeline.worker import Validations

MONITOR = "val/f1_macro"


def _trainer(step: int, metrics: dict, sanity: bool = False, savers=()):
    return SimpleNamespace(
        global_step=step,
        callback_metrics={k: torch.tensor(v) for k, v in metrics.items()},
        sanity_checking=sanity,
        checkpoint_callbacks=list(savers),
    )


def _export(best: str | None, restore_best: bool = True):
    return SimpleNamespace(enabled=True, restore_best=restore_best, best_path=lambda trainer: best)


def _passes() -> Validations:
    """A sanity check, then three validations: the second is the best; the third ties it on the monitor."""
    seen = Validations()
    seen.on_validation_end(_trainer(0, {MONITOR: 0.9, "val/loss": 9.0}, sanity=True), None)
    seen.on_validation_end(_trainer(10, {MONITOR: 0.5, "val/loss": 2.0, "train/loss": 3.0}), None)
    seen.on_validation_end(_trainer(20, {MONITOR: 0.75, "val/loss": 1.5, "train/loss": 2.0}), None)
    seen.on_validation_end(_trainer(30, {MONITOR: 0.75, "val/loss": 1.25, "train/loss": 1.0}), None)
    return seen


def test_the_best_checkpoints_metrics_are_those_of_the_first_pass_with_its_score(tmp_path):
    best = tmp_path / "best-epoch=1.ckpt"
    best.write_bytes(b"")
    saver = SimpleNamespace(monitor=MONITOR, best_model_path=str(best), best_model_score=torch.tensor(0.75))
    got = _passes().of_model(_trainer(30, {}, savers=[saver]), _export(str(best)))
    assert got == {MONITOR: 0.75, "val/loss": 1.5}  # the tie at step 30 did not replace the checkpoint


def test_the_final_weights_metrics_are_the_last_passes_only_when_it_came_after_the_last_step(tmp_path):
    seen = _passes()
    assert seen.of_model(_trainer(30, {}), None) == {MONITOR: 0.75, "val/loss": 1.25}
    assert seen.of_model(_trainer(30, {}), _export(None)) == {MONITOR: 0.75, "val/loss": 1.25}
    assert seen.of_model(_trainer(30, {}), _export(str(tmp_path / "x.ckpt"), restore_best=False)) == {
        MONITOR: 0.75,
        "val/loss": 1.25,
    }
    assert seen.of_model(_trainer(35, {}), None) is None  # trained past the last validation: validate again


def test_no_pass_saw_the_weights_when_the_best_score_matches_none_or_nothing_validated(tmp_path):
    best = tmp_path / "best.ckpt"
    best.write_bytes(b"")
    saver = SimpleNamespace(monitor=MONITOR, best_model_path=str(best), best_model_score=torch.tensor(0.8))
    assert _passes().of_model(_trainer(30, {}, savers=[saver]), _export(str(best))) is None
    assert Validations().of_model(_trainer(0, {}), None) is None
