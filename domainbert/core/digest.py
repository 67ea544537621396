"""Content digests of files, computed once per file per process: what caches of the user's data are keyed by.

A file's modification time can be restored after an edit (``touch -r``, ``rsync -t``, a checkout); its bytes
cannot lie. :func:`file_digest` reads a file in chunks (BLAKE2b) and keeps the result for the process, keyed by the
file's identity and status (size, modification and change times: a change time cannot be set back), so a file read
by several stages or splits of one run is hashed once.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable

_SEEN: dict[tuple, str] = {}
"""``{(path, inode, size, mtime_ns, ctime_ns): digest}`` of the files hashed in this process."""


def file_digest(path: str | os.PathLike) -> str:
    """The BLAKE2b digest (hex, 32 characters) of the bytes of ``path``, hashed once per process."""
    real = os.path.realpath(path)
    st = os.stat(real)
    key = (real, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if key not in _SEEN:
        with open(real, "rb") as fh:
            _SEEN[key] = hashlib.file_digest(fh, lambda: hashlib.blake2b(digest_size=16)).hexdigest()
    return _SEEN[key]


def files_digest(paths: Iterable[str | os.PathLike]) -> str:
    """One digest of the contents of ``paths``, in the order given (hex, 32 characters)."""
    h = hashlib.blake2b(digest_size=16)
    for path in paths:
        h.update(file_digest(path).encode())
    return h.hexdigest()
