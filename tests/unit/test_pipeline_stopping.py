"""A pipeline stopped by SIGTERM, SIGHUP or Ctrl-C (domainbert.pipeline.stopping): an exception, then one line."""

from __future__ import annotations

import os
import signal

import pytest

from domainbert.pipeline import stopping


def test_sigterm_raises_stopped_once_and_the_handlers_come_back():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(stopping.Stopped) as caught, stopping.stopped_by_signals():
        os.kill(os.getpid(), signal.SIGTERM)
        signal.sigtimedwait([], 1)  # the handler runs before this returns
    assert caught.value.signum == signal.SIGTERM and isinstance(caught.value, KeyboardInterrupt)
    assert signal.getsignal(signal.SIGTERM) is before and stopping.received() is None

    previous = signal.signal(signal.SIGHUP, signal.SIG_DFL)  # as on a terminal (under nohup it stays ignored)
    try:
        with stopping.stopped_by_signals():  # a second signal while the stage ends is recorded, not raised again
            with pytest.raises(stopping.Stopped):
                os.kill(os.getpid(), signal.SIGHUP)
                signal.sigtimedwait([], 1)
            os.kill(os.getpid(), signal.SIGTERM)
            signal.sigtimedwait([], 1)
            assert stopping.received() == signal.SIGHUP
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_an_ignored_signal_stays_ignored(monkeypatch):
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as under nohup
    try:
        with stopping.stopped_by_signals():
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGHUP)
            signal.sigtimedwait([], 1)
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_the_line_names_the_signal_the_stage_and_the_folder():
    err = stopping.Stopped(signal.SIGTERM, "finetune-baseline-seed0")
    assert stopping.one_line(err, "runs/p") == (
        "domainbert: pipeline stopped by SIGTERM during stage 'finetune-baseline-seed0'; its stages and server ended "
        "with it. Run the same command again to resume runs/p: finished stages are skipped",
        143,
    )
    assert stopping.one_line(KeyboardInterrupt(), "p")[1] == 130  # Ctrl-C outside the handlers
