"""A callback for ``startup.py``: print the wall-clock time at the start of the first training batch, then stop.

With ``examples/benchmarks`` on ``PYTHONPATH``:

    domainbert fit --config ... --trainer.callbacks+=startup_mark.FirstStepMark

prints a line ``DOMAINBERT_FIRST_STEP=<time.time()>`` when the first training batch starts (after the
sanity validation, with the first batch in hand), and by default ends the process there: what comes after
the first step is not start-up.
"""

from __future__ import annotations

import os
import sys
import time

import lightning.pytorch as L

#: The start of the line that carries the time stamp.
MARK = "DOMAINBERT_FIRST_STEP="


class FirstStepMark(L.Callback):
    """Print ``DOMAINBERT_FIRST_STEP=<seconds since the epoch>`` at the start of the first training batch."""

    def __init__(self, exit_after: bool = True) -> None:
        """Mark the first training batch.

        Args:
            exit_after: end the process at once after the mark (``os._exit(0)``: no step, no checkpoint, no export).
        """
        self.exit_after = exit_after

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step != 0 or batch_idx != 0:
            return
        sys.stdout.write(f"\n{MARK}{time.time():.6f}\n")
        sys.stdout.flush()
        if self.exit_after:
            sys.stderr.flush()
            os._exit(0)
