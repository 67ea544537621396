"""How a path looks in a one-line message: short enough to read, enough of it to find the file."""

from __future__ import annotations

import os
import re

#: A path longer than this (after the working folder and home folder are taken off) loses its middle folders.
WIDTH = 60

#: A long run of hex digits in a name (a hash): cut to its first 12 characters.
_HASH = re.compile(r"[0-9a-f]{16,}")


def short_path(path: str | os.PathLike, width: int | None = WIDTH) -> str:
    """``path`` for a message: relative to the working folder when inside it, the home folder as ``~``.

    Outside the working folder a path longer than ``width`` (None: no limit) keeps its first three folders and its
    last part, with ``…`` for the folders between, and a hash in a name is cut to 12 characters: a cache file of
    ``datasets`` (``~/.cache/huggingface/datasets/json/default-…/0.0.0/…/cache-<32 hex>.arrow``) becomes
    ``~/.cache/huggingface/datasets/…/cache-1f2e3d4c5b6a….arrow``.

    Examples:
        >>> import os
        >>> short_path(os.path.join(os.getcwd(), "runs", "cls", "version_0"))
        'runs/cls/version_0'
        >>> short_path("/var/cache/x/json/default-0123456789abcdef/0.0.0/" + "ab" * 32 + "/cache-" + "f" * 32 + ".bin")
        '/var/cache/x/…/cache-ffffffffffff….bin'
    """
    text = os.path.abspath(os.fspath(path))
    cwd = os.getcwd()
    if text == cwd:
        return "."
    if text.startswith(cwd.rstrip(os.sep) + os.sep):
        return os.path.relpath(text, cwd)
    home = os.path.expanduser("~")
    if home not in ("", os.sep) and text.startswith(home + os.sep):
        text = "~" + text[len(home) :]
    if width is None or len(text) <= width:
        return text
    parts = text.split(os.sep)
    head = parts[:4]  # "/var/cache/x" or "~/.cache/huggingface/datasets"
    last = _HASH.sub(lambda m: m.group(0)[:12] + "…", parts[-1])
    if len(parts) <= len(head) + 1:
        return os.sep.join([*parts[:-1], last])
    return os.sep.join([*head, "…", last])
