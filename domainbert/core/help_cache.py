"""The ``--help`` texts of ``fit``/``validate``/``test``/``predict``, kept once built.

Building them imports Lightning, transformers and torchmetrics (seconds on 2 cores) for a text that only changes when
domainbert's code, an installed library, a plugin or the terminal width changes. The first ``domainbert fit --help``
builds the text and keeps it under the cache folder; later calls print it without importing Lightning. The key
covers every input of the text: domainbert's source files (path, size, modification time), the versions of the
libraries whose signatures it shows, the datamodule plugins' entry points and the terminal width, so a stale text is
never shown. Only a bare ``<command> --help`` is served from the cache; any other option builds the parser.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import sys
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

#: The commands whose bare ``--help`` is cached (LightningCLI's subcommands).
COMMANDS = ("fit", "validate", "test", "predict")

#: The libraries whose signatures and docstrings the help text shows.
LIBRARIES = ("lightning", "transformers", "torchmetrics", "jsonargparse", "torch", "peft")


def folder() -> Path:
    """Where the texts are kept: ``$DOMAINBERT_CACHE``, else ``$XDG_CACHE_HOME/domainbert``, else ``~/.cache``."""
    if os.environ.get("DOMAINBERT_CACHE"):
        return Path(os.environ["DOMAINBERT_CACHE"]) / "help"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "domainbert" / "help"


def is_bare_help(argv: list[str]) -> bool:
    """Whether ``argv`` is ``<command> --help`` (or ``-h``) for one of :data:`COMMANDS`, with nothing else."""
    return len(argv) == 2 and argv[0] in COMMANDS and argv[1] in ("--help", "-h")


def key(command: str) -> str:
    """The digest of every input of ``command``'s help text (see the module's docstring)."""
    h = hashlib.sha256(command.encode())
    package = Path(__file__).resolve().parents[1]
    for path in sorted(package.rglob("*.py")):
        st = path.stat()
        h.update(f"{path.relative_to(package)}:{st.st_size}:{st.st_mtime_ns}".encode())
    for name in LIBRARIES:
        with contextlib.suppress(metadata.PackageNotFoundError):
            h.update(f"{name}=={metadata.version(name)}".encode())
    for ep in sorted(metadata.entry_points(group="domainbert.datamodules"), key=lambda e: e.name):
        h.update(f"{ep.name}={ep.value}".encode())
    h.update(f"columns={shutil.get_terminal_size().columns}".encode())
    return h.hexdigest()[:24]


def cached(command: str) -> str | None:
    """The kept help text of ``command`` for the current key, or None."""
    with contextlib.suppress(OSError):
        return (folder() / f"{command}-{key(command)}.txt").read_text(encoding="utf-8")
    return None


def store(command: str, text: str) -> None:
    """Keep ``text`` as ``command``'s help for the current key (a read-only cache folder is no error)."""
    target = folder() / f"{command}-{key(command)}.txt"
    with contextlib.suppress(OSError):
        target.parent.mkdir(parents=True, exist_ok=True)
        for old in target.parent.glob(f"{command}-*.txt"):
            old.unlink()
        tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, target)


def serve(argv: list[str], build: Callable[[list[str]], None]) -> None:
    """Print ``argv``'s help from the cache, or ``build`` it (it exits, as argparse does) and keep what it printed.

    Raises:
        SystemExit: always, with the code ``build`` exited with (0 after a served text).
    """
    command = argv[0]
    text = cached(command)
    if text is not None:
        sys.stdout.write(text)
        raise SystemExit(0)
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            build(argv)
    except SystemExit as done:
        sys.stdout.write(out.getvalue())
        if done.code in (0, None) and out.getvalue():
            store(command, out.getvalue())
        raise
    sys.stdout.write(out.getvalue())
    raise SystemExit(0)
