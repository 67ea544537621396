"""Atomic writes: nothing the user had is overwritten or lost on a crash or a full disk."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from domainbert.errors import DomainBertError


@contextlib.contextmanager
def atomic_dir(target: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary folder beside ``target``; on success, swap it into place.

    An existing ``target`` is kept until the new one is complete, then replaced. On any error the
    temporary folder is removed and ``target`` is left exactly as it was.

    Raises:
        DomainBertError: when the folder cannot be written (denied, disk full).
    """
    target = Path(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes 0700; exports get the usual permissions
    except OSError as err:
        raise DomainBertError(f"cannot write to {target.parent}: {err.strerror or err}") from err
    try:
        yield tmp
        old = None
        if target.exists():
            old = target.with_name(f".{target.name}.old-{os.getpid()}")
            os.replace(target, old)
        os.replace(tmp, target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except OSError as err:
        shutil.rmtree(tmp, ignore_errors=True)
        raise DomainBertError(f"could not write {target}: {err.strerror or err}; earlier outputs are intact") from err
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as err:
        with contextlib.suppress(Exception):
            os.unlink(tmp)  # type: ignore[possibly-undefined]
        raise DomainBertError(f"could not write {path}: {err.strerror or err}") from err
