"""An export format from another package: the example installs into a throwaway folder, registers through the
``domainbert.export_formats`` entry-point group, and ``domainbert export --formats [fp16]`` writes its folder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from domainbert.deploy import formats
from domainbert.deploy.sample import sample_classifier

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "examples" / "plugin_export"


def _run(*args: str, path: Path) -> subprocess.CompletedProcess:
    """``python *args`` with ``path`` on the subprocess's ``PYTHONPATH``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(path), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The example format ``pip install``ed into a throwaway folder (returned), never into the environment."""
    root = tmp_path_factory.mktemp("export_format")
    copy, target = root / "plugin_export", root / "site"
    shutil.copytree(PLUGIN, copy, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-build-isolation"]
    pip += ["--no-cache-dir", "--disable-pip-version-check", "--target", str(target), str(copy)]
    done = subprocess.run(pip, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    formats.table.cache_clear()
    assert "fp16" not in formats.table()  # this environment does not have it
    return target


def test_the_installed_format_is_written_by_name_and_loads_back(installed, tmp_path):
    model = sample_classifier(tmp_path / "model", seed=1, layers=2)
    out = tmp_path / "out"
    args = ["--model", str(model), "--out", str(out), "--formats", "[fp16]", "--latency_examples", "4"]
    done = _run("-m", "domainbert", "export", *args, "--repeats", "1", path=installed)
    assert done.returncode == 0, done.stderr[-3000:]
    info = json.loads((out / "fp16" / "domainbert_variant.json").read_text())
    assert info == {"variant": "fp16", "stored": "float16"}
    rows = {r["variant"]: r for r in json.loads((out / "report.json").read_text())["variants"]}
    assert rows["fp16"]["format"] == "fp16" and rows["fp16"]["size_mb"] < 0.7 * rows["student"]["size_mb"]
    code = (
        "from domainbert.deploy import load_variant\n"
        f"model, _, info = load_variant({str(out / 'fp16')!r})\n"
        "print(info['variant'], next(model.parameters()).dtype)\n"
    )
    loaded = _run("-c", code, path=installed)
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    assert loaded.stdout.split() == ["fp16", str(torch.float32)]
