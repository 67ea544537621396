"""Read user data files into ``datasets.Dataset`` objects, with errors that name the file and column.

Accepted: ``.txt`` (one record a line, or blank-line separated paragraphs), ``.jsonl``/``.json``,
``.csv``/``.tsv``, ``.parquet``, globs and folders of those, and folders written by
``Dataset.save_to_disk``. Arrow files are memory-mapped, so data larger than RAM works.
"""

from __future__ import annotations

import contextlib
import glob
import json
import logging
import lzma
import os
import threading
import zlib
from collections.abc import Sequence
from pathlib import Path

import datasets

from domainbert.core.digest import files_digest
from domainbert.errors import DomainBertError

log = logging.getLogger(__name__)

FORMATS = {
    ".txt": "text",
    ".text": "text",
    ".jsonl": "json",
    ".json": "json",
    ".csv": "csv",
    ".tsv": "csv",
    ".parquet": "parquet",
}

PathSpec = str | Sequence[str]


def suffix(p: Path) -> str:
    """The data suffix of ``p``, looking through a trailing ``.gz``/``.bz2``/``.xz``/``.zst``."""
    sfx = [x.lower() for x in p.suffixes]
    if sfx and sfx[-1] in (".gz", ".bz2", ".xz", ".zst"):
        sfx = sfx[:-1]
    return sfx[-1] if sfx else ""


def _open_binary(path: Path):
    s = path.suffix.lower()
    if s == ".gz":
        import gzip

        return gzip.open(path, "rb")
    if s == ".bz2":
        import bz2

        return bz2.open(path, "rb")
    if s == ".xz":
        import lzma

        return lzma.open(path, "rb")
    return open(path, "rb")


def _is_saved_dataset(p: Path) -> bool:
    return p.is_dir() and (
        (p / "dataset_info.json").exists() or (p / "dataset_dict.json").exists() or (p / "state.json").exists()
    )


def expand(spec: PathSpec) -> list[Path]:
    """Expand files, globs and folders into a sorted list of data files (or one saved-dataset folder).

    Raises:
        DomainBertError: a path that matches nothing, or a folder with no known data files.
    """
    items = [spec] if isinstance(spec, (str, os.PathLike)) else list(spec)
    if not items:
        raise DomainBertError("no data path given")
    out: list[Path] = []
    for item in items:
        item = os.path.expanduser(str(item))
        if any(c in item for c in "*?["):
            hits = sorted(Path(p) for p in glob.glob(item, recursive=True) if Path(p).is_file())
            if not hits:
                raise DomainBertError(f"{item}: the pattern matches no file")
            out += hits
            continue
        p = Path(item)
        if not p.exists():
            raise DomainBertError(f"{item}: no such file or folder")
        if _is_saved_dataset(p):
            out.append(p)
        elif p.is_dir():
            hits = sorted(f for f in p.rglob("*") if f.is_file() and suffix(f) in FORMATS)
            if not hits:
                raise DomainBertError(f"{item}: the folder holds no {', '.join(sorted(FORMATS))} file")
            out += hits
        else:
            out.append(p)
    return out


def is_plain_text(spec: PathSpec) -> bool:
    """True when ``spec`` names only plain-text files (``.txt``, compressed or not)."""
    try:
        files = expand(spec)
    except DomainBertError:
        return False
    return all(not _is_saved_dataset(f) and FORMATS.get(suffix(f)) == "text" for f in files)


#: what a damaged compressed file raises while it is read (truncated stream, wrong format, bad data).
_DECOMPRESS_ERRORS = (EOFError, OSError, zlib.error, lzma.LZMAError)


def _decompress_error(path: Path, err: BaseException, lines: int) -> DomainBertError:
    """A clear error for a compressed file that cannot be read to its end, naming where it broke off."""
    sfx = path.suffix.lower().lstrip(".")
    kind = {"gz": "gzip", "bz2": "bzip2"}.get(sfx, sfx)
    if isinstance(err, EOFError):
        what = f"the {kind} file is truncated: its text breaks off after line {lines} (copy or download it again)"
    elif lines == 0 and isinstance(err, OSError):
        what = f"line 1: not a {kind} file ({err}); rename it without .{sfx}, or compress it with {kind}"
    else:
        what = f"line {lines + 1}: the {kind} data is damaged ({err})"
    return DomainBertError(f"{path}: {what}")


def check_utf8(path: Path, chunk: int = 1 << 20) -> None:
    """Raise naming the line and byte offset of the first byte sequence that is not UTF-8.

    A compressed file is read to its end, so a truncated or damaged one is an error naming the line where it
    breaks off, rather than a traceback from the decompressor.
    """
    import codecs

    dec = codecs.getincrementaldecoder("utf-8")()
    offset = lines = 0
    if path.suffix.lower() in (".gz", ".bz2", ".xz"):
        chunk = min(chunk, 1 << 14)  # small reads: a truncated stream is reported near where it breaks off
    with _open_binary(path) as fh:
        while True:
            try:
                block = fh.read(chunk)
            except _DECOMPRESS_ERRORS as err:
                raise _decompress_error(path, err, lines) from None
            if not block:
                break
            lines += block.count(b"\n")
            try:
                dec.decode(block)
            except UnicodeDecodeError as err:
                bad = offset + err.start
                with _open_binary(path) as again:
                    head = again.read(bad)
                lineno = head.count(b"\n") + 1
                raise DomainBertError(
                    f"{path}: line {lineno}: bytes at offset {bad} are not valid UTF-8 "
                    f"({block[err.start : err.start + 4]!r}); re-encode the file as UTF-8 "
                    "(e.g. `iconv -f latin1 -t utf-8`)"
                ) from None
            offset += len(block)
    try:
        dec.decode(b"", final=True)
    except UnicodeDecodeError:
        raise DomainBertError(f"{path}: ends in the middle of a UTF-8 character") from None


def check_parquet(path: Path) -> None:
    """Refuse a file that does not begin and end with Parquet's ``PAR1`` (a cut-off download, or not Parquet).

    Its metadata sit at its end: a Parquet file cut off anywhere has lost them, and no row of it can be trusted.
    """
    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(4)
        fh.seek(max(size - 4, 0))
        tail = fh.read(4)
    if head != b"PAR1":
        raise DomainBertError(f"{path}: not a Parquet file (it does not start with PAR1)")
    if size < 12 or tail != b"PAR1":
        raise DomainBertError(
            f"{path}: the Parquet file is truncated: it lacks its footer (PAR1) after {size} bytes "
            "(copy or download it again)"
        )


def read(
    spec: PathSpec,
    columns: Sequence[str] = (),
    text_mode: str = "line",
    split: str = "train",
    cache_dir: str | None = None,
) -> datasets.Dataset:
    """Read ``spec`` into one ``Dataset``.

    Args:
        spec: a file, glob, folder, list of those, or a saved ``datasets`` folder.
        columns: columns that must exist; plain text files have the single column ``text``.
        text_mode: for ``.txt``: ``line`` (one record a line) or ``paragraph`` (blank-line separated).
        split: the split to take from a saved ``DatasetDict``.
        cache_dir: where ``datasets`` keeps its arrow cache.
    """
    files = expand(spec)
    if len(files) == 1 and _is_saved_dataset(files[0]):
        ds = datasets.load_from_disk(str(files[0]))
        if isinstance(ds, datasets.DatasetDict):
            if split not in ds:
                raise DomainBertError(f"{files[0]}: no split {split!r}; it has {sorted(ds)}")
            ds = ds[split]
        _check_columns(ds, columns, files[0])
        return ds
    kinds = {FORMATS.get(suffix(f)) for f in files}
    if None in kinds:
        bad = next(f for f in files if suffix(f) not in FORMATS)
        raise DomainBertError(f"{bad}: unknown file type {suffix(bad)!r}; expected one of {sorted(FORMATS)}")
    if len(kinds) > 1:
        raise DomainBertError(f"{spec}: mixes file types {sorted(kinds)}; give one type per split")
    kind = kinds.pop()
    for f in files:
        if f.stat().st_size == 0:
            raise DomainBertError(f"{f}: the file is empty")
        if kind in ("text", "json", "csv"):
            check_utf8(f)
        elif kind == "parquet" and f.suffix.lower() == ".parquet":  # compressed: the decompressor checks
            check_parquet(f)
    kwargs = {}
    if kind == "text":
        kwargs["sample_by"] = {"line": "line", "paragraph": "paragraph"}[text_mode]
    if kind == "csv" and any(suffix(f) == ".tsv" for f in files):
        kwargs["sep"] = "\t"
    content = files_digest(files)  # the cache is keyed by the bytes: an edit with its mtime restored is read anew
    try:
        with _no_download_counts():
            ds = datasets.load_dataset(
                kind,
                name=f"content-{content}",
                data_files=[str(f) for f in files],
                split="train",
                cache_dir=cache_dir,
                **kwargs,
            )
    except Exception as err:  # noqa: BLE001 - datasets raises many types; name the files
        if "corresponds to no data" in str(err):  # e.g. a CSV with a header only, a JSONL of blank lines
            raise DomainBertError(
                f"{', '.join(map(str, files))}: no rows (the file holds only a header or blank lines)"
            ) from err
        if kind == "json":
            for f in files:
                check_json_lines(f)
        msg = str(err).splitlines()[0] if str(err) else type(err).__name__
        cause = err.__cause__
        detail = f" ({cause})" if cause else ""
        raise DomainBertError(f"could not read {', '.join(map(str, files))} as {kind}: {msg}{detail}") from err
    _check_columns(ds, columns, files[0] if len(files) == 1 else spec)
    return ds


#: Held while ``datasets``' download-count setting is switched off (see :func:`_no_download_counts`).
_COUNTS_LOCK = threading.Lock()


@contextlib.contextmanager
def _no_download_counts():
    """Keep ``datasets`` from reporting a "download" of its json/csv/text builder to the hub inside the block.

    ``load_dataset("json", data_files=...)`` sends an HTTP HEAD request (3 s timeout) to count a download
    unless ``HF_UPDATE_DOWNLOAD_COUNTS`` is off. Reading the user's own files is no download: on a machine
    whose firewall drops the request, every read would wait out the timeout. An explicit
    ``HF_UPDATE_DOWNLOAD_COUNTS`` in the environment is respected.
    """
    if "HF_UPDATE_DOWNLOAD_COUNTS" in os.environ:
        yield
        return
    with _COUNTS_LOCK:  # reads in several threads restore the library's setting in the right order
        old = datasets.config.HF_UPDATE_DOWNLOAD_COUNTS
        datasets.config.HF_UPDATE_DOWNLOAD_COUNTS = False
        try:
            yield
        finally:
            datasets.config.HF_UPDATE_DOWNLOAD_COUNTS = old


def check_json_lines(path: Path) -> None:
    """Raise naming the first line of a JSON Lines file that is not one JSON object (1-based, as editors count).

    A ``.json`` file holding a single document (an array or an object over several lines) is not checked.
    """
    with _open_binary(path) as fh:
        text = fh.read().decode("utf-8", errors="replace")
    try:
        json.loads(text)
        return  # one JSON document, not JSON Lines
    except ValueError:
        pass
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError as err:
            msg = getattr(err, "msg", str(err))
            col = getattr(err, "colno", None)
            where = f" at column {col}" if col else ""
            raise DomainBertError(
                f"{path}: line {lineno}: not valid JSON ({msg}{where}); each line must hold one JSON object"
            ) from None
        if not isinstance(value, dict):
            raise DomainBertError(
                f"{path}: line {lineno}: expected a JSON object ({{...}}), found {type(value).__name__}"
            )


def _check_columns(ds: datasets.Dataset, columns: Sequence[str], where) -> None:
    """Refuse a file that lacks any of ``columns``, naming every missing one at once and the columns it has."""
    missing = [col for col in columns if col and col not in ds.column_names]
    if missing:
        named = ", ".join(repr(col) for col in missing)
        raise DomainBertError(f"{where}: no column {named}; the columns are {ds.column_names}")
