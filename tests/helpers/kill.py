"""Killing a run at a known point: the run says when it is there, the test waits for that, then kills it.

A run that is to be killed writes a marker file when it reaches the point (after a given step's checkpoint is on
disk, or when a sweep's second trial starts training) and then waits to be killed, so the kill never races the
run: no sleep decides when to kill, and a slow machine only makes the wait longer.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import lightning.pytorch as L

#: how long a held run waits to be killed, and a test for the marker, before giving up
DEADLINE_S = 600.0


def hold(marker: Path, deadline_s: float = DEADLINE_S) -> None:
    """Write ``marker`` (atomically, with this process's id) and wait to be killed.

    Raises:
        RuntimeError: nobody killed this process within ``deadline_s`` seconds.
    """
    tmp = marker.with_name(f".{marker.name}.tmp")
    tmp.write_text(str(os.getpid()))
    tmp.replace(marker)
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        time.sleep(0.5)
    raise RuntimeError(f"held at {marker} for {deadline_s:.0f} s and nobody killed this process")


class HoldAfterStep(L.Callback):
    """Hold the run for a kill once the checkpoints of step ``step`` are written.

    The hold happens as the next training batch starts (``ModelCheckpoint`` saves at the end of a batch, after
    every other callback), so every checkpoint of step ``step`` is complete on disk. A run whose ``marker``
    already exists does not hold: the resumed run, given the same config, trains on.
    """

    def __init__(self, marker: str, step: int) -> None:
        """Configure the hold.

        Args:
            marker: the file to write once the run holds.
            step: the global step after whose checkpoints the run holds.
        """
        self.marker, self.step = Path(marker), step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.step and not self.marker.exists():
            hold(self.marker)


def wait_for(marker: Path, proc: subprocess.Popen, log: Path | None = None, deadline_s: float = DEADLINE_S) -> None:
    """Wait until ``proc`` has written ``marker``.

    Raises:
        AssertionError: ``proc`` ended first, or ``deadline_s`` passed; with the end of ``log`` when given.
    """
    end = time.monotonic() + deadline_s
    while not marker.exists() and proc.poll() is None and time.monotonic() < end:
        time.sleep(0.1)
    if not marker.exists():
        tail = log.read_text(errors="replace")[-3000:] if log is not None and log.exists() else ""
        state = f"ended with {proc.returncode}" if proc.poll() is not None else f"ran {deadline_s:.0f} s"
        raise AssertionError(f"the run {state} without writing {marker}\n{tail}")
