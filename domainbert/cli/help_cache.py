"""The ``--help`` texts of ``fit``/``validate``/``test``/``predict``, kept once built.

Building them imports Lightning, transformers and torchmetrics (seconds on 2 cores) for a text that only changes when
its inputs change. The first ``domainbert fit --help`` builds the text and keeps it under the cache folder; later
calls print it without importing Lightning. ``python -m domainbert.cli.help_cache`` builds all four in one process
(``make setup`` ends with it), so even the first call after an install is served.

A kept text is served only while every input is unchanged, so a stale text is never shown, and an entry that is not
one this module wrote (edited, cut short) is built again; a served text is printed without terminal escape sequences:

- the domainbert source files the build imported (path, size, modification time), recorded with the text: an
  edit of any other file (a training module, the pipeline) keeps it;
- the versions of Python and of the libraries whose signatures it shows, and the datamodule plugins' entry points.

The text is built at a fixed width (:data:`WIDTH` columns), whatever the terminal, so one text serves every
terminal. Only a bare ``<command> --help`` is served from the cache; any other option builds the parser.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import sys
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path

#: The commands whose bare ``--help`` is cached (LightningCLI's subcommands).
COMMANDS = ("fit", "validate", "test", "predict")

#: The libraries whose signatures and docstrings the help text shows (omegaconf: the parser mode).
LIBRARIES = ("lightning", "transformers", "torchmetrics", "jsonargparse", "torch", "peft", "omegaconf")

#: The width, in columns, every kept text is built at.
WIDTH = 100

#: The layout of a kept entry; a change makes older entries absent.
FORMAT = 2

#: The ``domainbert`` package folder, whose imported files are the text's inputs.
PACKAGE = Path(__file__).resolve().parents[1]


def folder() -> Path:
    """Where the texts are kept: ``help/`` in the cache folder (:func:`domainbert.core.files.cache_root`)."""
    from domainbert.core.files import cache_root

    return cache_root() / "help"


def is_bare_help(argv: list[str]) -> bool:
    """Whether ``argv`` is ``<command> --help`` (or ``-h``) for one of :data:`COMMANDS`, with nothing else."""
    return len(argv) == 2 and argv[0] in COMMANDS and argv[1] in ("--help", "-h")


def key(command: str) -> str:
    """The digest of the inputs of ``command``'s text outside domainbert's files (see the module's docstring)."""
    h = hashlib.sha256(f"{command}:{FORMAT}:{WIDTH}:{sys.version}".encode())
    for name in LIBRARIES:
        with contextlib.suppress(metadata.PackageNotFoundError):
            h.update(f"{name}=={metadata.version(name)}".encode())
    for ep in sorted(metadata.entry_points(group="domainbert.datamodules"), key=lambda e: e.name):
        h.update(f"{ep.name}={ep.value}".encode())
    return h.hexdigest()[:24]


def _stamp(relative: str) -> list | None:
    """``[relative path, size, modification time]`` of a file of the package; None when it is gone."""
    try:
        st = (PACKAGE / relative).stat()
    except OSError:
        return None
    return [relative, st.st_size, st.st_mtime_ns]


def sources() -> list[list]:
    """The stamps of every domainbert source file imported in this process (the inputs of a text built in it)."""
    files = set()
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if path is None or PACKAGE.name not in str(path):  # resolving every library's file took 0.5 s
            continue
        with contextlib.suppress(TypeError, ValueError):
            files.add(Path(path).resolve().relative_to(PACKAGE).as_posix())
    return [s for s in map(_stamp, sorted(files)) if s is not None]


def _entry(command: str) -> Path:
    return folder() / f"{command}.json"


def cached(command: str) -> str | None:
    """The kept help text of ``command``; None when none is kept, an input changed, or the entry is malformed.

    A malformed entry (not the JSON :func:`store` writes: edited, cut short) is never trusted: the text is built
    again and replaces it.
    """
    try:
        entry = json.loads(_entry(command).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not _well_formed(entry) or entry["key"] != key(command):
        return None
    if all(_stamp(s[0]) == s for s in entry["sources"]):
        return entry["text"]
    return None


def _well_formed(entry: object) -> bool:
    """Whether ``entry`` is ``{"key": str, "sources": [[str, int, int], ...], "text": str}``, as stored."""
    if not isinstance(entry, dict) or not isinstance(entry.get("key"), str) or not isinstance(entry.get("text"), str):
        return False
    sources = entry.get("sources")
    return isinstance(sources, list) and all(
        isinstance(s, list)
        and len(s) == 3
        and isinstance(s[0], str)
        and s[0] != ""
        and all(isinstance(n, int) and not isinstance(n, bool) for n in s[1:])
        for s in sources
    )


#: Terminal control sequences (CSI, OSC, other escapes) and control characters but tab and newline.
_CONTROL = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves, clearing
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: window titles, hyperlinks, clipboard
    r"|\x1b[@-_]?"  # other escapes
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]"  # control characters (tab and newline kept)
)


def plain(text: str) -> str:
    """``text`` without terminal escape sequences or control characters (tabs and newlines kept).

    A backspace after a space (jsonargparse writes one before ``--print_config``'s ``[=flags]``) takes the space
    with it, as a terminal shows it.
    """
    return _CONTROL.sub("", text.replace(" \b", ""))


def store(command: str, text: str, inputs: list[list]) -> None:
    """Keep ``text`` as ``command``'s help, built from the source files ``inputs`` (a read-only folder is no error)."""
    target = _entry(command)
    entry = {"key": key(command), "sources": inputs, "text": text}
    with contextlib.suppress(OSError):
        target.parent.mkdir(parents=True, exist_ok=True)
        for old in target.parent.glob(f"{command}-*.txt"):  # the layout before FORMAT 2
            old.unlink()
        tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
        tmp.write_text(json.dumps(entry), encoding="utf-8")
        os.replace(tmp, target)


@contextlib.contextmanager
def fixed_width() -> Iterator[None]:
    """Format help texts at :data:`WIDTH` columns (argparse reads ``$COLUMNS``), whatever the terminal."""
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(WIDTH)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = before


def build_text(argv: list[str], build: Callable[[list[str]], None]) -> tuple[str, int | str | None]:
    """What ``build(argv)`` prints at :data:`WIDTH` columns, and the code it exits with (None: it returned)."""
    out = io.StringIO()
    code: int | str | None = None
    with fixed_width(), contextlib.redirect_stdout(out):
        try:
            build(argv)
        except SystemExit as done:
            code = done.code
    return out.getvalue(), code


def serve(argv: list[str], build: Callable[[list[str]], None]) -> None:
    """Print ``argv``'s help from the cache, or ``build`` it (it exits, as argparse does) and keep what it printed.

    Raises:
        SystemExit: always, with the code ``build`` exited with (0 after a served text).
    """
    command = argv[0]
    text = cached(command)
    if text is not None:
        text = plain(text)  # a kept file is data: it never moves the cursor or retitles the terminal
    else:
        text, code = build_text(argv, build)
        text = plain(text)  # the same text a later served copy prints
        if code not in (0, None):
            sys.stdout.write(text)
            raise SystemExit(code)
        if text:
            store(command, text, sources())
    sys.stdout.write(text)
    raise SystemExit(0)


def build_lightning(argv: list[str]) -> None:
    """Run the LightningCLI subcommand ``argv[0]`` with the options after it (``--help``: print its help, exit)."""
    from domainbert.cli.lightning_cli import cli_main

    cli_main(argv)


def warm(commands: tuple[str, ...] = COMMANDS) -> list[str]:
    """Build and keep the text of every command in ``commands`` not kept yet (one Lightning import for all).

    Returns:
        the commands whose text was built now.
    """
    built = []
    for command in commands:
        if cached(command) is not None:
            continue
        text, code = build_text([command, "--help"], build_lightning)
        if code in (0, None) and text:
            store(command, text, sources())
            built.append(command)
    return built


if __name__ == "__main__":
    done = warm()
    print(f"domainbert: --help texts of {', '.join(done) or 'no command'} built, in {folder()}", file=sys.stderr)
