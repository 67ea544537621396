"""Atomic writes: nothing the user had is overwritten or lost on a crash or a full disk.

- :func:`atomic_dir` builds a folder beside its target and swaps it in; it replaces only a folder that it
  created itself (one holding the :data:`MARKER` file), so a mistyped name can never wipe a run folder or a
  folder of the user's.
- :func:`atomic_write_text` and :func:`atomic_file` write a file through a temporary file in the same folder,
  ``fsync`` it, then rename it.
- Every file and folder gets the modes the user's umask gives (``tempfile`` would make them private).
- A full disk is one line naming what was being written, where, the free space and the last good checkpoint.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from domainbert.errors import DomainBertError

#: The file inside every folder that :func:`atomic_dir` wrote: only such folders may be replaced.
MARKER = ".domainbert-output"


def cache_root() -> Path:
    """The cache folder: ``$DOMAINBERT_CACHE``, else ``$XDG_CACHE_HOME/domainbert``, else ``~/.cache/domainbert``.

    The ``--help`` texts (:mod:`domainbert.cli.help_cache`) and the tensors kept between stages
    (:mod:`domainbert.core.cache_store`) live under it.
    """
    if os.environ.get("DOMAINBERT_CACHE"):
        return Path(os.environ["DOMAINBERT_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "domainbert"


def umask() -> int:
    """The process's umask (read without changing it for longer than two calls)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def plain_name(name: str, what: str) -> str:
    """Return ``name`` if it is a plain file or folder name (no separator, not ``.``/``..``, not empty).

    Raises:
        DomainBertError: naming the option ``what`` and the value.
    """
    text = str(name)
    if not text.strip() or text in (".", "..") or any(c in text for c in ("/", "\\", "\0")) or text != text.strip():
        raise DomainBertError(f"{what}={text!r}: expected a plain folder name (no '/', not '.', '..' or empty)")
    return text


def fmt_bytes(n: float) -> str:
    """``n`` bytes in B, kB, MB, GB or TB (powers of 1000)."""
    for unit in ("B", "kB", "MB", "GB"):
        if abs(n) < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def free_space(folder: Path) -> str:
    """The free space on the file system of ``folder`` (or of its nearest existing parent)."""
    folder = Path(folder)
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        return fmt_bytes(shutil.disk_usage(folder).free)
    except OSError:
        return "unknown"


def newest_checkpoint(folder: Path, pattern: str = "*.ckpt") -> Path | None:
    """The most recently written file matching ``pattern`` in ``folder`` (temporary files excluded), if any."""
    try:
        found = [p for p in Path(folder).glob(pattern) if p.is_file() and not p.name.startswith(".")]
    except OSError:
        return None
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def write_error(err: OSError, what: str, path: Path, last_good: Path | str | None = None) -> DomainBertError:
    """One line for a failed write: what, where, why, the free space on a full disk, and the last good file."""
    path = Path(path)
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        last = f"; last good checkpoint: {last_good}" if last_good else "; no earlier checkpoint"
        return DomainBertError(
            f"no space left on the device writing {what} {path}: {free_space(path.parent)} free in {path.parent}"
            f"{last}. {path.name} was not changed; free some space and rerun"
        )
    return DomainBertError(f"could not write {what} {path}: {err.strerror or err}; earlier outputs are intact")


def disk_full_in(err: BaseException) -> OSError | None:
    """An ENOSPC ``OSError`` when ``err`` is a library's wrapping of a full disk (safetensors, say), else None."""
    text = str(err)
    if not isinstance(err, DomainBertError) and ("No space left on device" in text or "os error 28" in text):
        return OSError(errno.ENOSPC, "No space left on device")
    return None


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` of this machine is running (a zombie counts as dead)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError):  # a zombie is dead
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][:1] != "Z"
    return True


def _leftovers(target: Path, kind: str) -> Iterator[Path]:
    """Temporary (``tmp``) or replaced (``old``) folders of ``target`` left by processes that were killed."""
    for p in target.parent.glob(f".{target.name}.{kind}-*"):
        pid = p.name[len(f".{target.name}.{kind}-") :].split("-", 1)[0]
        if p.is_dir() and (p / MARKER).is_file() and pid.isdigit() and not pid_alive(int(pid)):
            yield p


def clean_leftovers(target: str | os.PathLike) -> None:
    """Recover from a process killed inside :func:`atomic_dir`.

    A temporary folder left by a dead process is removed. A killed swap (the old folder moved aside, the new one
    not yet in place) is undone: the old folder goes back under its name.
    """
    target = Path(target)
    for old in _leftovers(target, "old"):
        if not target.exists():
            os.replace(old, target)
        else:
            shutil.rmtree(old, ignore_errors=True)
    for tmp in _leftovers(target, "tmp"):
        shutil.rmtree(tmp, ignore_errors=True)


def clean_tmp_files(folder: str | os.PathLike, dead_only: bool = True) -> list[Path]:
    """Remove the temporary files (``.<name>.tmp-<pid>-*``) that killed processes left in ``folder``.

    Returns:
        The files removed.
    """
    removed = []
    for p in Path(folder).glob(".*.tmp-*"):
        pid = p.name.rsplit(".tmp-", 1)[1].split("-", 1)[0]
        if p.is_file() and pid.isdigit() and not (dead_only and pid_alive(int(pid))):
            with contextlib.suppress(OSError):
                p.unlink()
                removed.append(p)
    return removed


def _check_protected(target: Path, what: str = "") -> None:
    """Raise, naming ``what`` and ``target``, when ``target`` is the root, a home or a project folder."""
    from domainbert.core.protected import protected

    reason = protected(target)
    if reason is not None:
        where = f"{what}: " if what else ""
        raise DomainBertError(
            f"{where}{target}: {reason}; it is never an output, even with --overwrite: name a new folder"
        )


def check_replaceable(target: Path, replace_foreign: bool = False) -> None:
    """Raise unless ``target`` is absent, an empty folder, or a folder that :func:`atomic_dir` wrote.

    Never the root, a home or a project folder (:func:`~domainbert.core.protected.protected`), whatever it holds.

    Args:
        target: the folder to be replaced.
        replace_foreign: also accept any other folder (the user asked for it, e.g. ``--overwrite true``), except
            one holding the working directory.

    Raises:
        DomainBertError: naming ``target``.
    """
    _check_protected(target)
    if not target.exists() and not target.is_symlink():
        return
    if target.is_symlink() or not target.is_dir():
        raise DomainBertError(f"{target} exists and is not a folder domainbert wrote; choose another name")
    if (target / MARKER).is_file() or not any(target.iterdir()):
        return
    if Path.cwd().resolve().is_relative_to(target.resolve()):
        raise DomainBertError(f"{target} holds the working directory; it is never replaced: choose another name")
    if replace_foreign:
        return
    raise DomainBertError(
        f"{target} exists and was not written by domainbert (no {MARKER} in it); it is left untouched: "
        "choose another output name or move it away"
    )


@contextlib.contextmanager
def atomic_dir(
    target: str | os.PathLike, what: str = "the folder", last_good: Path | None = None, replace_foreign: bool = False
) -> Iterator[Path]:
    """Yield a temporary folder beside ``target``; on success, swap it into place.

    An existing ``target`` is kept until the new one is complete, then replaced; it must be a folder this function
    wrote earlier (it holds :data:`MARKER`) or an empty one. On any error the temporary folder is removed and
    ``target`` is left exactly as it was. Leftovers of a killed earlier run are cleaned up first.

    Args:
        target: the folder to write.
        what: what is written, for the error message (``"the hf/ export"``).
        last_good: the last good checkpoint, named in the message of a full disk.
        replace_foreign: replace ``target`` even if domainbert did not write it (only on the user's explicit
            request, such as ``--overwrite true``); a folder holding the working directory is still refused.

    Raises:
        DomainBertError: when ``target`` is not ours to replace, or cannot be written (denied, disk full).
    """
    target = Path(os.path.abspath(target))
    mode = 0o777 & ~umask()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        clean_leftovers(target)
        check_replaceable(target, replace_foreign)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-{os.getpid()}-", dir=target.parent))
        os.chmod(tmp, mode)  # mkdtemp makes 0700; exports get the usual permissions
        (tmp / MARKER).write_text("written by domainbert; this folder may be replaced by its next export\n")
    except OSError as err:
        raise write_error(err, what, target, last_good) from err
    try:
        yield tmp
        fix_modes(tmp)
        old = None
        if target.exists():
            check_replaceable(target, replace_foreign)
            old = target.with_name(f".{target.name}.old-{os.getpid()}")
            os.replace(target, old)
        os.replace(tmp, target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except OSError as err:
        shutil.rmtree(tmp, ignore_errors=True)
        raise write_error(err, what, target, last_good) from err
    except BaseException as err:
        shutil.rmtree(tmp, ignore_errors=True)
        full = disk_full_in(err)
        if full is not None:
            raise write_error(full, what, target, last_good) from err
        raise


def fix_modes(folder: Path) -> None:
    """Give every file under ``folder`` ``0o666 & ~umask`` and every folder ``0o777 & ~umask``.

    Libraries write some files through ``tempfile`` (mode 0600); outputs follow the user's umask instead.
    """
    mask = umask()
    for root, dirs, files in os.walk(folder):
        for d in dirs:
            os.chmod(os.path.join(root, d), 0o777 & ~mask)
        for f in files:
            p = os.path.join(root, f)
            if not os.path.islink(p):
                os.chmod(p, 0o666 & ~mask)


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike, what: str = "the file", last_good: Path | str | None = None) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; once the block wrote it, fsync it and rename it to ``path``.

    The file gets ``0o666 & ~umask``. On any error the temporary file is removed and ``path`` is unchanged.

    Raises:
        DomainBertError: when the file cannot be written (one line; on a full disk with the free space).
    """
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.tmp-{os.getpid()}-", dir=path.parent)
        os.close(fd)
        tmp = Path(name)
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~umask())
        os.replace(tmp, path)
        tmp = None
    except OSError as err:
        raise write_error(err, what, path, last_good) from err
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                tmp.unlink()


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename (mode ``0o666 & ~umask``)."""
    with atomic_file(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def check_not_input(out: str | os.PathLike, inputs: Iterable[str | os.PathLike | None], what: str = "--out") -> None:
    """Raise unless the output ``out`` is none of ``inputs``, holds none of them and lies inside none of them.

    A tool's output must never be one of its own inputs: ``soup --out A`` with ``A`` among ``--models``, ``select
    --out F`` where the corpus is ``F/corpus.jsonl``, or ``vocab extend --out M/new`` inside its ``--model M`` would
    replace or change what the user gave it.

    Args:
        out: the output file or folder.
        inputs: the command's input files and folders (``None`` entries are skipped).
        what: the option that names ``out``, for the message.

    Raises:
        DomainBertError: naming the option, the output and the input it would overwrite.
    """
    target = Path(os.path.abspath(os.path.expanduser(out))).resolve()
    for given in inputs:
        if given is None or str(given) == "":
            continue
        source = Path(os.path.abspath(os.path.expanduser(given))).resolve()
        if source == target or source.is_relative_to(target):
            raise DomainBertError(
                f"{what} {out} would overwrite the input {given}: a command's output is never one of its inputs; "
                "choose a new output path"
            )
        if target.is_relative_to(source) and source.is_dir():
            raise DomainBertError(
                f"{what} {out} lies inside the input {given}: a command's output is never written into one of its "
                "inputs; choose a new output path"
            )


def check_named(out: str | os.PathLike | None, what: str, hint: str) -> None:
    """Raise unless the output ``out`` names something: not null (YAML's ``~``), not empty text.

    Args:
        out: the output path as given.
        what: the option or field that names it, for the message.
        hint: what to do instead (``name a new folder for the outputs``).

    Raises:
        DomainBertError: one line naming ``what``.
    """
    if out is None:
        raise DomainBertError(f"{what} is null (in YAML, `~` and `null` mean no value, not the home folder): {hint}")
    if str(out).strip() == "":
        raise DomainBertError(f"{what} is empty: {hint}")


def check_output(
    out: str | os.PathLike,
    inputs: Iterable[str | os.PathLike | None] = (),
    what: str = "--out",
    overwrite: bool = False,
) -> Path:
    """The one rule of every command's output folder, checked before any work; the folder's absolute path.

    The output is new, empty, or marked as domainbert's (it holds :data:`MARKER`); with ``overwrite`` (the user's
    ``--overwrite true``) any other folder too. Whatever the options, it is never one of the command's inputs, nor
    inside one or holding one, never the root, a home folder or a project folder
    (:func:`~domainbert.core.protected.protected`), never a file, and never a folder holding the working directory
    when it would be replaced; the nearest existing folder on its path must be writable. Nothing is created.

    Args:
        out: the output folder (``~`` is the home folder).
        inputs: the command's input files and folders (``None`` entries and hub names are skipped).
        what: the option or field that names ``out``, for the message (``export: --out``).
        overwrite: accept a folder domainbert did not write (it will be replaced).

    Raises:
        DomainBertError: one line naming ``what``, ``out`` and what is wrong.
    """
    check_named(out, what, "name a new folder for the outputs")
    target = Path(os.path.abspath(os.path.expanduser(out)))
    _check_protected(target, what)  # first: the root or a home holds every input too
    check_not_input(out, inputs, what)
    try:
        check_replaceable(target, replace_foreign=overwrite)
    except DomainBertError as err:
        raise DomainBertError(f"{what}: {err}") from None
    existing = target
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:  # a read-only disk, a denied folder or a file in the way: one line now, not a traceback after the work
        if not existing.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, f"{existing} is a file, not a folder")
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as err:
        raise write_error(err, f"{what} folder", target) from err
    return target


def claim_folder(
    out: str | os.PathLike,
    inputs: Iterable[str | os.PathLike | None] = (),
    what: str = "out",
    recognise: Callable[[Path], bool] | None = None,
) -> Path:
    """Create or reuse the output folder ``out`` of a command that writes into it piece by piece; return it.

    The folder follows :func:`check_output` (new, empty, or marked as domainbert's: it holds :data:`MARKER`; never
    an input, the root, a home or a project folder); it is then marked, so that a rerun (a resumed pipeline) may use
    it again.

    Args:
        out: the output folder.
        inputs: the command's input files and folders; ``out`` may be none of them and hold none of them.
        what: the option or field that names ``out``, for the message.
        recognise: whether an unmarked folder is the command's own all the same, by a mark of its own that no
            user's folder carries (a sweep's study in its ``study.db``); such a folder is marked and reused.

    Raises:
        DomainBertError: when ``out`` is null or empty text, a folder of the user's, or would overwrite an input.
    """
    folder = check_claim(out, inputs, what, recognise)
    _mark(folder)
    return folder


def check_claim(
    out: str | os.PathLike,
    inputs: Iterable[str | os.PathLike | None] = (),
    what: str = "out",
    recognise: Callable[[Path], bool] | None = None,
) -> Path:
    """What :func:`claim_folder` checks, with nothing created or marked: ``out`` as given (``~`` expanded).

    A command whose other checks are slow (parsing a fit config imports Lightning) calls it first, so that a wrong
    ``out`` is refused at once, then claims the folder once the rest has passed.

    Args:
        out: the output folder.
        inputs: the command's input files and folders.
        what: the option or field that names ``out``, for the message.
        recognise: as for :func:`claim_folder`.

    Raises:
        DomainBertError: as :func:`claim_folder` does.
    """
    check_named(out, what, "name a new folder for the outputs (for example runs/pipeline)")
    folder = Path(os.path.expanduser(out))  # relative stays relative: a rerun names the same paths
    own = recognise is not None and folder.is_dir() and not (folder / MARKER).exists() and recognise(folder)
    check_output(out, inputs, what, overwrite=own)  # the root, a home, an input: refused even when recognised
    return folder


def _mark(folder: Path) -> None:
    """Create ``folder`` if needed and mark it as domainbert's (:data:`MARKER`), so that a rerun may use it again."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        marker = folder / MARKER
        if not marker.is_file():
            marker.write_text("written by domainbert; a rerun of the same command may write here again\n")
    except OSError as err:
        raise write_error(err, "the output folder", folder) from err
