"""Progress lines: their text, their pace on a fake clock, and the pipeline's echo of a stage's log."""

from __future__ import annotations

import io
import threading
import time
from types import SimpleNamespace

import torch

from domainbert.core.callbacks import ProgressLines
from domainbert.core.progress import PREFIX, duration, echoed, progress_line


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _trainer(**kw) -> SimpleNamespace:
    monitor = SimpleNamespace(monitor="val/f1_macro")
    base = {
        "current_epoch": 0,
        "max_epochs": 4,
        "global_step": 0,
        "estimated_stepping_batches": 400,
        "callback_metrics": {},
        "sanity_checking": False,
        "callbacks": [SimpleNamespace(), monitor],
    }
    return SimpleNamespace(**{**base, **kw})


def test_a_line_gives_epoch_step_metric_elapsed_and_time_left():
    line = progress_line(1, 4, 100, 400, {"val/f1_macro": 0.731234}, elapsed=250)
    assert line == f"{PREFIX}epoch 2/4, step 100/400: val/f1_macro 0.7312; 4m10s elapsed, about 12m30s left"
    assert progress_line(0, -1, 0, float("inf"), {}, 3) == f"{PREFIX}epoch 1, step 0; 3s elapsed"
    assert [duration(s) for s in (0, 59.6, 61, 3600 + 5 * 60)] == ["0s", "1m00s", "1m01s", "1h05m"]


def test_lines_come_at_the_start_after_each_validation_and_every_minute_of_training(capsys):
    clock = FakeClock()
    bar, trainer = ProgressLines(every=60, clock=clock), _trainer()
    bar.on_train_start(trainer, None)
    for step in range(1, 40):  # 39 batches over 58.5 s: no line
        clock.now += 1.5
        trainer.global_step = step
        trainer.callback_metrics = {"train/loss": torch.tensor(2.0 - step / 100)}
        bar.on_train_batch_end(trainer, None, None, None, step)
    assert capsys.readouterr().out == f"{PREFIX}epoch 1/4, step 0/400; 0s elapsed\n"
    clock.now += 1.5  # 60 s since the last line
    trainer.global_step = 40
    bar.on_train_batch_end(trainer, None, None, None, 40)
    assert (
        capsys.readouterr().out == f"{PREFIX}epoch 1/4, step 40/400: train/loss 1.61; 1m00s elapsed, about 9m00s left\n"
    )
    clock.now += 30
    trainer.callback_metrics.update({"val/loss": torch.tensor(0.5), "val/f1_macro": torch.tensor(0.75)})
    bar.on_validation_end(trainer, None)  # the monitored metric, not val/loss
    assert capsys.readouterr().out.endswith("step 40/400: val/f1_macro 0.75; 1m30s elapsed, about 13m30s left\n")
    clock.now += 59  # a validation line counts: the next training line is due 60 s after it
    bar.on_train_batch_end(trainer, None, None, None, 41)
    assert capsys.readouterr().out == ""
    clock.now += 1
    bar.on_train_batch_end(trainer, None, None, None, 42)
    assert "train/loss" in capsys.readouterr().out


def test_no_line_for_the_sanity_check_outside_fit_or_on_other_ranks(capsys):
    clock = FakeClock()
    bar, trainer = ProgressLines(every=60, clock=clock), _trainer(callback_metrics={"val/loss": torch.tensor(1.0)})
    bar.on_validation_end(trainer, None)  # `domainbert validate`: no fit running
    bar.on_train_start(trainer, None)
    capsys.readouterr()
    trainer.sanity_checking = True
    bar.on_validation_end(trainer, None)
    assert capsys.readouterr().out == ""
    trainer.sanity_checking = False
    bar.disable()  # Lightning disables the bar on ranks other than 0
    clock.now += 120
    bar.on_validation_end(trainer, None)
    bar.on_train_batch_end(trainer, None, None, None, 1)
    assert capsys.readouterr().out == ""


def test_the_pipeline_echoes_a_stages_progress_lines_as_the_log_grows(tmp_path):
    log = tmp_path / "finetune-baseline-seed0" / "log.txt"
    log.parent.mkdir()
    log.write_text("")
    out = io.StringIO()
    seen = threading.Event()

    def stage() -> None:
        with open(log, "a", encoding="utf-8", buffering=1) as fh:
            fh.write("INFO some library: loading\n")
            fh.write(f"{PREFIX}epoch 1/2, step 5/10: val/f1_macro 0.5; 2s elapsed, about 2s left\n")
            deadline = time.monotonic() + 10
            while "step 5/10" not in out.getvalue() and time.monotonic() < deadline:
                time.sleep(0.01)
            if "step 5/10" in out.getvalue():
                seen.set()  # echoed while the stage still runs, not only at its end
            fh.write(f"{PREFIX}epoch 2/2, step 10/10: val/f1_ma")
            fh.flush()
            fh.write("cro 0.6; 4s elapsed, about 0s left\n")

    with echoed(log, out=out, poll=0.01):
        stage()
    assert seen.is_set()
    assert out.getvalue().splitlines() == [
        "[finetune-baseline-seed0] epoch 1/2, step 5/10: val/f1_macro 0.5; 2s elapsed, about 2s left",
        "[finetune-baseline-seed0] epoch 2/2, step 10/10: val/f1_macro 0.6; 4s elapsed, about 0s left",
    ]
