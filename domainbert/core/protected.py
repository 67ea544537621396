"""Folders that no output may be, replace or hold, whatever the options: the root, a home, a project.

Every command's output goes through :func:`domainbert.core.files.check_output`, which asks :func:`protected` first:
``--overwrite true`` lets a command replace a folder of the user's, never one of these.
"""

from __future__ import annotations

import os
import pwd
from pathlib import Path

#: the files that make a folder a project's (a repository, a Python project)
PROJECT_FILES = (".git", "pyproject.toml")


#: the folders whose every child is a home folder
HOME_PARENTS = (Path("/home"), Path("/Users"))


def homes() -> set[Path]:
    """The user's home folders: ``$HOME`` and the account's own (``/root`` for root)."""
    found = {os.path.expanduser("~")}
    try:
        found.add(pwd.getpwuid(os.getuid()).pw_dir)
    except (KeyError, OSError):
        pass
    return {Path(p).resolve() for p in found if p not in ("", "/")}


def protected(path: str | os.PathLike) -> str | None:
    """Why ``path`` may never be an output (a few words), or None when it may be one.

    It may not be the root of the file system, a home folder (``$HOME``, any ``/home/<name>``) or a folder holding
    one, nor a project folder (one holding ``.git`` or ``pyproject.toml``), checked on the path with its links
    resolved.
    """
    target = Path(os.path.abspath(os.path.expanduser(path))).resolve()
    if target == Path(target.anchor):
        return "it is the root of the file system"
    for home in homes():
        if target == home:
            return "it is a home folder"
        if home.is_relative_to(target):
            return f"it holds the home folder {home}"
    for parent in HOME_PARENTS:
        if target == parent.resolve():
            return "it holds the home folders"
        if target.parent == parent.resolve():
            return "it is a home folder"
    for name in PROJECT_FILES:
        if os.path.lexists(target / name):
            return f"it is a project folder (it holds {name})"
    return None
