"""Run a pipeline stage in the pipeline's own process as if it had a process of its own.

A new Python process costs every stage 11-15 s of start-up (interpreter, torch, Lightning, transformers). A stage
run here instead (``Runner(isolate=...)``) behaves, to the pipeline, like that process:

- its output goes to the stage's log only: ``sys.stdout`` and ``sys.stderr`` are redirected, logging handlers that
  wrote to the console write to the log, and the root logger gets a handler on the log at ``DOMAINBERT_LOG``
  (default ``INFO``), the level a stage process logs at; its progress lines are echoed on the console as a stage
  process's are (:func:`domainbert.core.progress.echoed`);
- its exit status is the one the process would have had: 0, the code of a ``SystemExit``, 2 for a user error
  (:class:`~domainbert.errors.DomainBertError`, found however deep a library wrapped it; its message is written to
  the log as ``domainbert: error: ...``), 1 for any other exception (its traceback is written to the log);
- what it changed of the process's global state is put back: the working directory, ``sys.argv``, environment
  variables, logging handlers and the root level, warning filters, and torch's intra-op threads, deterministic
  algorithms, float32 matmul precision and default dtype.

What only a process of its own gives: output written by C/C++ code straight to file descriptors 1 and 2 reaches
the console, not the log; a crash of the interpreter (a segfault, the out-of-memory killer) ends the pipeline; and
Lightning's multi-device (DDP) launcher relaunches the command line of a process, so a stage that trains on several
devices needs its own process.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import sys
import traceback
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

#: The log format of a stage process (``domainbert.cli.main`` and ``python -m domainbert.pipeline``).
LOG_FORMAT = "%(levelname)s %(name)s: %(message)s"


def run_in_process(fn: Callable[[], Any], log: Path, argv: list[str]) -> int:
    """Call ``fn`` with its output going to ``log`` (a new file), as a process would; its exit status.

    Args:
        fn: the stage (takes no argument).
        log: the stage's log file, written from the start.
        argv: the stage's command line, ``sys.argv`` while it runs.

    Returns:
        0 when ``fn`` returned, else what the stage's process would have exited with (see the module's docstring).
    """
    from domainbert.core.progress import echoed

    with open(log, "w", encoding="utf-8", buffering=1) as fh, echoed(log):  # progress lines: on the console too
        with _process_state(argv), _logging_to(fh), contextlib.redirect_stdout(fh), contextlib.redirect_stderr(fh):
            code = exit_status(fn)
    _free_memory()
    return code


@contextlib.contextmanager
def output_to(log: Path) -> Iterator[None]:
    """Send the block's output (``sys.stdout``, ``sys.stderr``, logging) to the end of ``log``, as a stage's.

    For the pipeline's own steps that belong to a stage that has run (the probe's export as a classifier): what
    they say goes to that stage's log, not between the pipeline's stage lines.
    """
    with open(log, "a", encoding="utf-8", buffering=1) as fh:
        with _logging_to(fh), contextlib.redirect_stdout(fh), contextlib.redirect_stderr(fh):
            yield


def exit_status(fn: Callable[[], Any]) -> int:
    """Run ``fn``; the exit status its process would have had, with the error written to ``sys.stderr``."""
    from domainbert.errors import user_error

    try:
        fn()
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)  # sys.exit("message"): Python prints it and exits with 1
        return 1
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # noqa: BLE001 - a stage's failure is its exit status, as in a process of its own
        user = user_error(exc)
        if user is not None:
            print(f"domainbert: error: {user}", file=sys.stderr)
            return 2
        traceback.print_exc()
        return 1
    return 0


@contextlib.contextmanager
def _process_state(argv: list[str]) -> Iterator[None]:
    """Set ``sys.argv`` to ``argv``; afterwards restore it and the rest of the process's state.

    That is the working directory, the environment, the warning filters and torch's settings.
    """
    cwd, saved_argv, env = os.getcwd(), sys.argv[:], dict(os.environ)
    torch_state = _torch_state()
    sys.argv = list(argv)
    try:
        with warnings.catch_warnings():  # the warning filters come back as they were
            yield
    finally:
        sys.argv = saved_argv
        os.chdir(cwd)
        for key in [k for k in os.environ if k not in env]:
            del os.environ[key]
        for key, value in env.items():
            if os.environ.get(key) != value:
                os.environ[key] = value
        _restore_torch(torch_state)


def _torch_state() -> dict | None:
    """The torch settings a stage may change (None when torch is not imported yet: nothing to restore)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    return {
        "threads": torch.get_num_threads(),
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
        "matmul": torch.get_float32_matmul_precision(),
        "dtype": torch.get_default_dtype(),
    }


def _restore_torch(state: dict | None) -> None:
    if state is None:
        return
    import torch

    if torch.get_num_threads() != state["threads"]:
        torch.set_num_threads(state["threads"])
    torch.use_deterministic_algorithms(state["deterministic"], warn_only=state["warn_only"])
    torch.set_float32_matmul_precision(state["matmul"])
    torch.set_default_dtype(state["dtype"])


def _loggers() -> list[logging.Logger]:
    """The root logger and every logger created so far."""
    found = [logging.getLogger(name) for name, obj in logging.root.manager.loggerDict.items()]
    return [logging.root, *(lg for lg in found if isinstance(lg, logging.Logger))]


@contextlib.contextmanager
def _logging_to(fh: IO[str]) -> Iterator[None]:
    """Send every logging record to ``fh``: console handlers write there, the root logger gets a handler on it.

    Afterwards the root logger's handlers and level are restored, and handlers writing to ``fh`` (moved there, or
    created during the stage while ``sys.stderr`` was ``fh``) write where they wrote before (a new one: to the
    console's ``stderr``).
    """
    consoles = {id(s) for s in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__) if s is not None}
    stderr = sys.stderr
    root = logging.root
    saved_handlers, saved_level = root.handlers[:], root.level
    moved: dict[logging.StreamHandler, Any] = {}
    for logger in _loggers()[1:]:
        for handler in logger.handlers:
            if _writes_to(handler, consoles) and _settable(handler):
                moved[handler] = _set_stream(handler, fh)
    own = logging.StreamHandler(fh)
    own.setFormatter(logging.Formatter(LOG_FORMAT))
    root.handlers = [h for h in saved_handlers if not _writes_to(h, consoles)] + [own]
    root.setLevel(os.environ.get("DOMAINBERT_LOG", "INFO"))
    try:
        yield
    finally:
        root.handlers = saved_handlers
        root.setLevel(saved_level)
        for logger in _loggers()[1:]:
            for handler in logger.handlers:
                if _writes_to(handler, {id(fh)}) and _settable(handler):
                    _set_stream(handler, moved.get(handler, stderr))


def _writes_to(handler: logging.Handler, streams: set[int]) -> bool:
    """Whether ``handler`` is a stream handler (not a file's) writing to one of ``streams`` (their ids)."""
    return (
        isinstance(handler, logging.StreamHandler)
        and not isinstance(handler, logging.FileHandler)
        and id(getattr(handler, "stream", None)) in streams
    )


def _set_stream(handler: logging.StreamHandler, stream: IO[str]) -> IO[str] | None:
    """``handler.setStream(stream)``, its own ``flush`` following; the stream it wrote to (None: unchanged).

    transformers binds its handler's ``flush`` to the stream the handler was made with (``handler.flush =
    sys.stderr.flush``): made during a stage, that is the stage's log, closed once the stage is over, and the next
    ``setStream`` (which flushes) would fail on it. A ``flush`` bound to the old stream is bound to the new one.
    """
    old = handler.stream
    own = handler.__dict__.pop("flush", None)
    try:
        handler.setStream(stream)
    finally:
        if own is not None:
            handler.flush = stream.flush if getattr(own, "__self__", None) is old else own
    return None if old is stream else old


def _settable(handler: logging.StreamHandler) -> bool:
    """Whether the handler's stream can be set (``logging``'s last-resort handler reads ``sys.stderr`` each time)."""
    return not isinstance(getattr(type(handler), "stream", None), property)


def _free_memory() -> None:
    """Collect what the stage left behind, and hand the GPU memory it cached back to the device."""
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
