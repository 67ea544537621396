"""Training stages in processes forked from a server that imported torch, Lightning and transformers once.

A training stage gets a process of its own (a crash ends the stage, not the pipeline; its memory goes back when it
ends). Started as a new interpreter (``python -m domainbert.pipeline --worker ...``), each such process spends
about 5 s of a 2-core CPU importing the same libraries. On Linux, the pipeline starts a server once
(:mod:`domainbert.pipeline.forkserver`), which imports :data:`PRELOAD` while the pipeline goes on (its probe, for
one), and each training stage is a process forked from it: a new process, with memory of its own, that finds the
libraries imported. What the stage does is the same as in a new interpreter:

- its output goes to its log at the level of file descriptors 1 and 2 (C/C++ output included), line by line;
- its environment (with ``PYTHONUNBUFFERED=1``), working directory (first on ``sys.path``) and command line
  (``sys.argv``, and ``__main__`` as ``python -m domainbert.pipeline`` has it, so Lightning's multi-device launcher
  starts the same worker) are the pipeline's at the stage's start; the caller's own ``__main__`` (a user's script)
  is never run in it. Libraries read some variables when imported (``HF_HUB_OFFLINE``, cache folders), so the
  server is started again when the pipeline's environment changed since it started;
- its exit status is the worker's (:func:`domainbert.pipeline.worker.main`); a signal that kills it gives the
  negative signal number, as ``subprocess`` reports it.

Only the pipeline can use its server: they talk over a socket pair the server inherits (no name in the file
system, whatever ``$TMPDIR``, so no other process can connect to it), and each proves to the other that it holds
a key the pipeline drew (``multiprocessing``'s HMAC challenge) before any request is read.

The server and its stages end with the pipeline, however it ends: a stage leads a process group of its own (its
DDP ranks join it), which the pipeline ends when it is stopped (Ctrl-C, ``SIGTERM``), and each of the server, the
stage and the ranks asks the kernel to end it when its parent ends (:func:`domainbert.core.lifetime.die_with_parent`,
which covers a ``SIGKILL`` of the pipeline). A server that dies while a stage runs takes the stage with it, and
the stage is reported failed.

A forked stage's standard input is ``/dev/null``, so a ``breakpoint()`` in one needs ``DOMAINBERT_FORK=0``, which
starts every stage as a new interpreter instead; so do macOS and Windows, and a server that cannot start (one
line says so). The pipeline stops the server when it ends.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from domainbert.core.compat import connection_over, prove_key_as_client

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

#: what the server imports once: the worker, the CLI it runs, and transformers' model loading
PRELOAD = ("domainbert.pipeline.worker", "domainbert.cli.lightning_cli", "transformers.modeling_utils")

#: seconds a stopped stage gets to end after ``SIGTERM`` before its group is killed
GRACE = 5.0


@dataclass
class Server:
    """The running server, as the pipeline that started it knows it."""

    proc: subprocess.Popen
    conn: Connection
    key: bytes
    env: dict[str, str]
    trusted: bool = False
    """Whether the two proved to each other that they hold the key (done before the first request)."""


_server: Server | None = None
"""The server this process started (None: none runs)."""

_failed = False
"""Whether the server could not start in this process (it is not tried again: the line was said once)."""


def enabled() -> bool:
    """Whether training stages are forked from the server: on Linux, unless ``DOMAINBERT_FORK=0``.

    Not on macOS, where forking a process that loaded torch and the system's frameworks is unsafe (CPython's
    default start method there is ``spawn``), nor on Windows, which has no ``fork``.
    """
    return os.environ.get("DOMAINBERT_FORK", "1") != "0" and sys.platform.startswith("linux")


def start() -> bool:
    """Start the server now (it imports :data:`PRELOAD` in the background), or again if the environment changed.

    Returns:
        Whether it runs; when it cannot start, one line says so and the training stages start as new interpreters.
    """
    global _server, _failed
    env = dict(os.environ)
    if _server is not None and (env != _server.env or _server.proc.poll() is not None):
        stop()  # started with another environment (its imports may have read it), or it died
    if _server is None:
        if _failed:
            return False
        try:
            _server = _launch(env)
        except OSError as err:
            _failed = True
            print(
                f"[pipeline] the stage server could not start ({err.strerror or err}); training stages start as new "
                "interpreters",
                flush=True,
            )
            return False
    return True


def _launch(env: dict[str, str]) -> Server:
    """Start ``python -m domainbert.pipeline.forkserver`` on one end of a new socket pair, and give it the key."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    key = secrets.token_bytes(32)
    try:
        cmd = [sys.executable, "-m", "domainbert.pipeline.forkserver", str(theirs.fileno()), str(os.getpid())]
        proc = subprocess.Popen(cmd, pass_fds=(theirs.fileno(),), stdin=subprocess.PIPE, env=env)
    except OSError:
        ours.close()
        raise
    finally:
        theirs.close()
    try:
        proc.stdin.write(key)  # not in its command line or environment, which other processes may read
        proc.stdin.close()
    except OSError:
        pass  # it died at once: the first request finds out
    ours.setblocking(True)
    return Server(proc, connection_over(ours.detach()), key, env)


def stop() -> None:
    """Stop the server this process started, if it runs (the pipeline does when it ends)."""
    global _server
    server, _server = _server, None
    if server is None:
        return
    server.conn.close()  # it ends when its socket closes
    try:
        server.proc.wait(GRACE)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait()


def server_pid() -> int | None:
    """The pid of the running server (None: none runs)."""
    return _server.proc.pid if _server is not None else None


def run_stage(module: str, argv: list[str], log: Path) -> int:
    """Run ``python -m <module> <argv>`` in a process of its own, writing to ``log``; its exit status.

    The stage worker (``domainbert.pipeline``) is forked from the server where forking is on (:func:`run`), and
    started as a new interpreter where it is not, or where the server cannot start; any other module is a new
    interpreter. Either way the process is the same: its output in ``log``, its exit status returned, and its
    progress lines (:mod:`domainbert.core.progress`) echoed on the pipeline's own output as they come.
    """
    from domainbert.core.progress import echoed

    Path(log).write_bytes(b"")  # an earlier run's log is not echoed
    with echoed(log):
        if module == "domainbert.pipeline" and enabled():
            with contextlib.suppress(OSError):  # no server (it said so in one line): a new interpreter instead
                return run(argv, log)
        with open(log, "w", encoding="utf-8") as fh:
            env = {**os.environ, "PYTHONUNBUFFERED": "1"}
            cmd = [sys.executable, "-m", module, *argv]
            return subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env).returncode


def run(argv: list[str], log: Path) -> int:
    """Run the stage worker with ``argv`` (``--worker RESULT [--test|--evaluate] <fit args>``) in a forked process.

    Args:
        argv: the worker's arguments (``python -m domainbert.pipeline``'s).
        log: the stage's log file, written from the start (created here, so a process that dies before it writes
            leaves an empty log, not an earlier run's).

    Returns:
        The process's exit status (negative: the signal that ended it).

    Raises:
        KeyboardInterrupt: the pipeline was stopped (Ctrl-C, ``SIGTERM``) while the stage ran; the stage's process
            group was ended first (``SIGTERM``, then ``SIGKILL`` after :data:`GRACE` seconds).
    """
    global _failed
    Path(log).write_bytes(b"")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # as a new interpreter's: DDP ranks and subprocesses inherit it
    request = ("run", list(argv), str(log), env, os.getcwd())
    for attempt in range(2):  # a server that died between stages is started again, once
        if not start():
            raise OSError("the stage server could not start")
        server = _server
        try:
            if not server.trusted:
                prove_key_as_client(server.conn, server.key)
                server.trusted = True
            server.conn.send(request)
            pid = _expect(server.conn.recv(), "pid")
            break
        except (EOFError, OSError):
            stop()
            if attempt:  # it dies before serving: the stages start as new interpreters, which report the cause
                _failed = True
                print("[pipeline] the stage server ended at its start; training stages start as new interpreters")
                raise OSError("the stage server ended at its start") from None
    try:
        return _expect(server.conn.recv(), "exit")
    except (EOFError, OSError):
        return _server_died(log, pid)
    except BaseException:  # Ctrl-C or SIGTERM in the pipeline: the stage and its ranks go first
        _end_stage(server, pid)
        raise


def _expect(message: object, kind: str) -> int:
    """The number of a server's answer ``(kind, n)``; an ``OSError`` for anything else."""
    if isinstance(message, tuple) and len(message) == 2 and message[0] == kind and isinstance(message[1], int):
        return message[1]
    raise OSError(f"the stage server answered {message!r}")


def _kill_group(pid: int, sig: int) -> None:
    with contextlib.suppress(OSError):
        os.killpg(pid, sig)


def _server_died(log: Path, pid: int | None) -> int:
    """The stage's status when the server ended under it: its group is killed (if it lingers) and its log says so."""
    if pid is not None:
        _kill_group(pid, signal.SIGKILL)
    with contextlib.suppress(OSError), open(log, "a", encoding="utf-8") as fh:
        fh.write("domainbert: the pipeline's stage server ended while this stage ran; the stage was stopped\n")
    stop()
    return -int(signal.SIGKILL)


def _end_stage(server: Server, pid: int) -> None:
    """End the stage's process group: ``SIGTERM``, then ``SIGKILL`` when it has not ended after :data:`GRACE` s."""
    _kill_group(pid, signal.SIGTERM)
    try:
        if server.conn.poll(GRACE):
            server.conn.recv()
            return
    except (EOFError, OSError):
        pass
    _kill_group(pid, signal.SIGKILL)
    with contextlib.suppress(EOFError, OSError):
        if server.conn.poll(GRACE):
            server.conn.recv()
