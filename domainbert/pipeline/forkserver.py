"""The fork server's own process: ``python -m domainbert.pipeline.forkserver FD PARENT``, started by the pipeline.

It reads a key from its standard input, imports :data:`~domainbert.pipeline.forks.PRELOAD`, proves to the pipeline
over the socket ``FD`` (one end of a socket pair, inherited: it has no name in the file system, so no other process
can connect to it) that it holds the key and has the pipeline prove the same (``multiprocessing``'s HMAC challenge),
then serves one request at a time: ``("run", argv, log, env, cwd)`` forks a stage (:func:`stage`), answers
``("pid", pid)``, waits for it and answers ``("exit", status)``. It ends when the pipeline closes the socket, and
with the pipeline however the pipeline ends (``PR_SET_PDEATHSIG``); each stage ends with it the same way.
"""

from __future__ import annotations

import gc
import importlib
import importlib.util
import os
import signal
import sys
import types

from domainbert.core.compat import connection_over, join_non_daemon_threads, prove_key_as_server, run_exit_handlers

#: the bytes of the key the pipeline writes to the server's standard input
KEY_BYTES = 32


def main(argv: list[str]) -> int:
    """Serve the pipeline: ``argv`` is ``[FD, PARENT]`` (the socket's descriptor, the pipeline's pid)."""
    from domainbert.core.lifetime import die_with_parent
    from domainbert.pipeline.forks import PRELOAD

    fd, parent = int(argv[0]), int(argv[1])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C at the terminal is the pipeline's to handle
    die_with_parent(signal.SIGKILL, parent)
    key = sys.stdin.buffer.read(KEY_BYTES)
    sys.stdin.close()
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    conn = connection_over(fd)
    try:
        for name in PRELOAD:
            importlib.import_module(name)
    except Exception:  # noqa: BLE001 - a broken install: the stages start as new interpreters and say why
        return 1
    try:
        prove_key_as_server(conn, key)  # the pipeline holds the key, and so does this server
    except Exception:  # noqa: BLE001 - a failed or broken handshake: serve nothing
        return 1
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return 0
        if not (isinstance(request, tuple) and len(request) == 5 and request[0] == "run"):
            return 1
        _, stage_argv, log, env, cwd = request
        server = os.getpid()
        pid = os.fork()
        if pid == 0:
            conn.close()
            stage(stage_argv, log, env, cwd, server)
        try:
            os.setpgid(pid, pid)  # as the stage does itself: whichever runs first, the group exists at once
        except OSError:
            pass
        try:
            conn.send(("pid", pid))
            _, status = os.waitpid(pid, 0)
            conn.send(("exit", os.waitstatus_to_exitcode(status)))
        except (EOFError, OSError):  # the pipeline is gone: so is the stage (it ends with this server)
            return 0


def _worker_main() -> types.ModuleType:
    """A stand-in ``__main__`` that is ``python -m domainbert.pipeline``'s (no code runs to make it)."""
    spec = importlib.util.find_spec("domainbert.pipeline.__main__")
    main = types.ModuleType("__main__")
    main.__spec__, main.__file__ = spec, spec.origin
    return main


def stage(argv: list[str], log: str, env: dict[str, str], cwd: str, server: int) -> None:
    """The forked process: become ``python -m domainbert.pipeline <argv>`` writing to ``log``, run it, exit.

    It leads a process group of its own (its DDP ranks join it: the pipeline ends them all at once), ends when the
    server ends, takes Ctrl-C and ``SIGTERM`` as a new interpreter does, and reads ``/dev/null``. The exit is a new
    interpreter's: threads that are not daemons are waited for, a collection runs (skipped after a success, through
    ``gc.freeze``, unless ``DOMAINBERT_QUICK_EXIT=0``: :func:`domainbert.cli._quick_exit`), then the ``atexit``
    handlers (logging's flush among them).
    """
    from domainbert.core.lifetime import die_with_parent

    code = 1
    try:
        os.setpgid(0, 0)
        die_with_parent(signal.SIGKILL, server)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
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

        code = worker_main(argv)
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    except BaseException:  # noqa: BLE001 - as an interpreter: the traceback, then exit 1
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        join_non_daemon_threads()  # waits for threads that are not daemons, as an interpreter's exit does
        if code == 0 and os.environ.get("DOMAINBERT_QUICK_EXIT", "1") != "0":
            gc.freeze()
        else:
            gc.collect()
        run_exit_handlers()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
