"""Training stages in processes forked from a server that imported torch, Lightning and transformers once.

A training stage gets a process of its own (a crash ends the stage, not the pipeline; its memory goes back when it
ends). Started as a new interpreter (``python -m domainbert.pipeline --worker ...``), each such process spends
about 5 s of a 2-core CPU importing the same libraries. On Linux, the pipeline starts Python's ``forkserver``
once, which imports :data:`PRELOAD` while the pipeline goes on (its probe, for one), and each training stage is a
process forked from it: a new process, with memory of its own, that finds the libraries imported. What the stage
does is the same as in a new interpreter:

- its output goes to its log at the level of file descriptors 1 and 2 (C/C++ output included), line by line;
- its environment (with ``PYTHONUNBUFFERED=1``), working directory (first on ``sys.path``) and command line
  (``sys.argv``, and ``__main__`` as ``python -m domainbert.pipeline`` has it, so Lightning's multi-device launcher
  starts the same worker) are the pipeline's at the stage's start; the caller's own ``__main__`` (a user's script)
  is not run again in it. Libraries read some variables when imported (``HF_HUB_OFFLINE``, cache folders), so the
  server is started again when the pipeline's environment changed since it started;
- its exit status is the worker's (:func:`domainbert.pipeline.worker.main`); a signal that kills it gives the
  negative signal number, as ``subprocess`` reports it.

A forked stage's standard input is ``/dev/null`` (as every ``multiprocessing`` child's), so a ``breakpoint()`` in one
needs ``DOMAINBERT_FORK=0``, which starts every stage as a new interpreter instead; so do macOS and Windows. The
pipeline stops the server when it ends.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib.util
import multiprocessing
import os
import signal
import sys
import threading
import types
from pathlib import Path

#: what the server imports once: the worker, the CLI it runs, and transformers' model loading
PRELOAD = ("domainbert.pipeline.worker", "domainbert.core.lightning_cli", "transformers.modeling_utils")

_server_env: dict[str, str] | None = None
"""The environment the running server was started with (None: not started by this process)."""


def enabled() -> bool:
    """Whether training stages are forked from the server: on Linux, unless ``DOMAINBERT_FORK=0``.

    Not on macOS, where forking a process that loaded torch and the system's frameworks is unsafe (CPython's
    default start method there is ``spawn``), nor on Windows, which has no ``fork``.
    """
    return os.environ.get("DOMAINBERT_FORK", "1") != "0" and sys.platform.startswith("linux")


def start() -> None:
    """Start the server now (it imports :data:`PRELOAD` in the background), or again if the environment changed."""
    global _server_env
    from multiprocessing import forkserver

    env = dict(os.environ)
    if _server_env is not None and env != _server_env:
        stop()  # started with another environment: its imports may have read it
    if _server_env is None:
        forkserver.set_forkserver_preload(list(PRELOAD))
        _server_env = env
    forkserver.ensure_running()  # at once when it runs; started again when it died


def stop() -> None:
    """Stop the server this process started, if it runs (the pipeline does when it ends)."""
    global _server_env
    if _server_env is not None:
        from multiprocessing import forkserver

        pid = forkserver._forkserver._forkserver_pid
        if pid is not None:  # it exits when the last copy of its pipe closes: a stage's stray child may hold one
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
        forkserver._forkserver._stop()
        _server_env = None


def run(argv: list[str], log: Path) -> int:
    """Run the stage worker with ``argv`` (``--worker RESULT [--test|--evaluate] <fit args>``) in a forked process.

    Args:
        argv: the worker's arguments (``python -m domainbert.pipeline``'s).
        log: the stage's log file, written from the start (created here, so a process that dies before it writes
            leaves an empty log, not an earlier run's).

    Returns:
        The process's exit status (negative: the signal that ended it).
    """
    start()
    Path(log).write_bytes(b"")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # as a new interpreter's: DDP ranks and subprocesses inherit it
    ctx = multiprocessing.get_context("forkserver")
    proc = ctx.Process(target=_stage, args=(list(argv), str(log), env, os.getcwd()), name="stage")
    caller = sys.modules["__main__"]
    # the child prepares itself from the parent's __main__: a module named ``*.__main__`` is never run again there,
    # while a user's script would be (and an unguarded one would start its pipeline again)
    sys.modules["__main__"] = _worker_main()
    try:
        proc.start()
    finally:
        sys.modules["__main__"] = caller
    try:
        proc.join()
    except BaseException:  # Ctrl-C in the pipeline: the stage goes too, killed if it does not stop in a few seconds
        proc.terminate()
        proc.join(5)
        if proc.exitcode is None:
            proc.kill()
            proc.join()
        raise
    return int(proc.exitcode if proc.exitcode is not None else 1)


def _worker_main() -> types.ModuleType:
    """A stand-in ``__main__`` that is ``python -m domainbert.pipeline``'s (no code runs to make it)."""
    spec = importlib.util.find_spec("domainbert.pipeline.__main__")
    main = types.ModuleType("__main__")
    main.__spec__, main.__file__ = spec, spec.origin
    return main


def _stage(argv: list[str], log: str, env: dict[str, str], cwd: str) -> None:
    """The forked process: become ``python -m domainbert.pipeline <argv>`` writing to ``log``, run it, exit.

    The exit is a new interpreter's: threads that are not daemons are waited for, a collection runs (skipped after a
    success, through ``gc.freeze``, unless ``DOMAINBERT_QUICK_EXIT=0``: :func:`domainbert.cli._quick_exit`), then
    the ``atexit`` handlers (logging's flush among them).
    """
    fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    for stream, target in ((sys.stdout, 1), (sys.stderr, 2)):
        stream.flush()
        os.dup2(fd, target)
    os.close(fd)
    sys.stdout.reconfigure(line_buffering=True)
    sys.stderr.reconfigure(line_buffering=True)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    main = _worker_main()
    sys.modules["__main__"] = main
    sys.argv = [main.__file__, *argv]
    sys.path.insert(0, cwd)  # ``python -m`` puts the working directory first
    from domainbert.pipeline.worker import main as worker_main

    code = 1
    try:
        code = worker_main(argv)
    finally:
        threading._shutdown()  # waits for threads that are not daemons, as an interpreter's exit does
        if code == 0 and env.get("DOMAINBERT_QUICK_EXIT", "1") != "0":
            gc.freeze()
        else:
            gc.collect()
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
