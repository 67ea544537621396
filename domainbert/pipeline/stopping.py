"""A pipeline stopped by a signal: its stage ends with it, ``state.json`` says so, and one line is printed.

While :func:`stopped_by_signals` is active, ``SIGTERM`` and ``SIGHUP`` (a batch system's cancel, a closed terminal)
raise :class:`Stopped` in the pipeline's main thread, as Ctrl-C raises ``KeyboardInterrupt``, so the stage running
is ended (:mod:`domainbert.pipeline.forks`, ``subprocess``) and recorded before the pipeline exits with
``128 + signal``. A second signal while it ends is not raised again.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

#: the signals that stop a pipeline the way Ctrl-C does
SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


class Stopped(KeyboardInterrupt):
    """The pipeline was stopped by ``signum``; ``stage``: the stage it was running (None between stages)."""

    def __init__(self, signum: int, stage: str | None = None) -> None:
        """Args: signum: the signal; stage: the stage running when it came."""
        super().__init__(signal.Signals(signum).name)
        self.signum, self.stage = signum, stage


_received: int | None = None
"""The first signal received while :func:`stopped_by_signals` was active (None: none yet)."""


def received() -> int | None:
    """The signal that is stopping the pipeline (None: it runs on)."""
    return _received


def _handler(signum: int, frame) -> None:
    global _received
    if _received is None:  # the first one stops; more, while the stage ends, are not raised again
        _received = signum
        raise Stopped(signum)


@contextlib.contextmanager
def stopped_by_signals() -> Iterator[None]:
    """Turn :data:`SIGNALS` into :class:`Stopped` inside the block (main thread only; elsewhere nothing changes).

    A signal the process ignores (``nohup`` ignores ``SIGHUP``) stays ignored.
    """
    global _received
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _received = None
    ignored = {sig for sig in SIGNALS if signal.getsignal(sig) == signal.SIG_IGN}  # ``nohup``, a background job
    before = {sig: signal.signal(sig, _handler) for sig in SIGNALS if sig not in ignored}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
        _received = None


def one_line(err: KeyboardInterrupt, out: str) -> tuple[str, int]:
    """The line a stopped pipeline prints, and its exit status (``128 + signal``)."""
    signum, stage = (err.signum, err.stage) if isinstance(err, Stopped) else (signal.SIGINT, None)
    during = f" during stage {stage!r}" if stage else ""
    line = (
        f"domainbert: pipeline stopped by {signal.Signals(signum).name}{during}; its stages and server ended with it. "
        f"Run the same command again to resume {out}: finished stages are skipped"
    )
    return line, 128 + int(signum)
