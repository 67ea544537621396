"""Progress lines: what a fit says as it goes when its output is not a terminal, and how a pipeline shows them.

A live progress bar drawn into a file (a pipeline stage's ``log.txt``, a pipe, a CI log) shows nothing until it
ends. :class:`domainbert.core.callbacks.ProgressLines` prints plain lines instead, each flushed at once::

    Progress: epoch 2/4, step 120/372: val/f1_macro 0.7312; 4m10s elapsed, about 8m45s left

and the pipeline, whose stages write to their logs, echoes those lines on its own terminal while a stage runs
(:func:`echoed`), under the stage's name::

    [finetune-baseline-seed0] epoch 2/4, step 120/372: val/f1_macro 0.7312; 4m10s elapsed, about 8m45s left

Nothing here imports torch or Lightning: the pipeline's own process reads logs with it.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

#: How a progress line starts in a log; the pipeline echoes the lines that start so.
PREFIX = "Progress: "

#: Seconds of training between two lines at most (a validation line counts).
EVERY = 60.0


def duration(seconds: float) -> str:
    """``42s``, ``4m10s`` or ``1h05m``: a length of time in the fewest units that say it."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    minutes, secs = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def progress_line(
    epoch: int,
    max_epochs: int | None,
    step: int,
    total: float | None,
    metrics: dict[str, float],
    elapsed: float,
) -> str:
    """One progress line (with :data:`PREFIX`): where training is, what it scores, how long it took and will take.

    Args:
        epoch: the current epoch, counted from 0 (shown from 1).
        max_epochs: the epoch limit (None or below 1: none, so none is shown).
        step: optimizer steps done.
        total: optimizer steps the fit will take (``trainer.estimated_stepping_batches``); None or infinite when
            unknown, and then no remaining time is given.
        metrics: the values to show, by name, in the given order.
        elapsed: seconds since training started.
    """
    where = f"epoch {epoch + 1}" + (f"/{max_epochs}" if max_epochs and max_epochs > 0 else "")
    known = total is not None and math.isfinite(total) and total > 0
    where += f", step {step}" + (f"/{int(total)}" if known else "")
    shown = ", ".join(f"{name} {value:.4g}" for name, value in metrics.items())
    timing = f"{duration(elapsed)} elapsed"
    if known and 0 < step <= total:
        timing += f", about {duration(elapsed * (total - step) / step)} left"
    return f"{PREFIX}{where}" + (f": {shown}" if shown else "") + f"; {timing}"


class Throttle:
    """Says when a line is due: at most ``every`` seconds after the last one, on ``clock``'s time."""

    def __init__(self, every: float = EVERY, clock: Callable[[], float] | None = None) -> None:
        self.every = every
        self.clock = clock or time.monotonic
        self.last: float | None = None

    def said(self) -> float:
        """A line was just printed: the next one is due ``every`` seconds from now. Returns now."""
        self.last = self.clock()
        return self.last

    def due(self) -> bool:
        """Whether ``every`` seconds have passed since the last line (True before the first)."""
        return self.last is None or self.clock() - self.last >= self.every


def echo_lines(chunk: bytes, label: str, out: IO[str]) -> None:
    """Write each progress line of ``chunk`` (complete lines of a log) to ``out`` as ``[label] <line>``."""
    for raw in chunk.split(b"\n"):
        line = raw.decode("utf-8", errors="replace").rstrip("\r")
        if line.startswith(PREFIX):
            with contextlib.suppress(OSError, ValueError):  # a closed console: the log still has the line
                out.write(f"[{label}] {line[len(PREFIX) :]}\n")
                out.flush()


def _follow(log: Path, label: str, out: IO[str], stop: threading.Event, poll: float) -> None:
    """Read ``log`` as it grows, echoing its progress lines, until ``stop`` is set (then read it to its end)."""
    fh, partial = None, b""
    try:
        while True:
            finished = stop.wait(poll)
            if fh is None:
                with contextlib.suppress(OSError):
                    fh = open(log, "rb")  # noqa: SIM115 - kept open while the stage writes
            if fh is not None:
                if os.fstat(fh.fileno()).st_size < fh.tell():  # the log was started anew
                    fh.seek(0)
                    partial = b""
                partial += fh.read()
                complete, _, partial = partial.rpartition(b"\n")
                if complete:
                    echo_lines(complete, label, out)
            if finished:
                return
    finally:
        if fh is not None:
            fh.close()


@contextlib.contextmanager
def echoed(log: Path, label: str | None = None, out: IO[str] | None = None, poll: float = 0.5) -> Iterator[None]:
    """While the block runs, echo the progress lines written to ``log`` on ``out`` as ``[label] ...``.

    For a pipeline stage, whose output goes to its log: its progress reaches the pipeline's terminal too. A thread
    reads the log every ``poll`` seconds; when the block ends, what is left in the log is read before returning.

    Args:
        log: the stage's log (it may not exist yet).
        label: the name before each line; default the log's folder (the stage's name).
        out: where the lines go; default ``sys.stdout`` as it is when the block starts (a stage run in the
            pipeline's own process redirects ``sys.stdout`` to its log afterwards).
        poll: seconds between two reads.
    """
    log = Path(log)
    out = out if out is not None else sys.stdout
    stop = threading.Event()
    args = (log, label or log.parent.name, out, stop, poll)
    thread = threading.Thread(target=_follow, args=args, name="domainbert-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
