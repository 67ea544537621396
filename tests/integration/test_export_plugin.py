"""An export format from another package: the example installs into a throwaway folder, registers through the
``domainbert.export_formats`` entry-point group, and ``domainbert export --formats [fp16]`` writes its folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from domainbert.deploy import formats
from domainbert.deploy.sample import sample_classifier
from tests.helpers.examples import install_example, run_with_path


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The example format ``pip install``ed into a throwaway folder (returned), never into the environment."""
    target = install_example("plugin_export", tmp_path_factory.mktemp("export_format"))
    assert "fp16" not in formats.table(refresh=True)  # this environment does not have it
    return target


def test_the_installed_format_is_written_by_name_and_loads_back(installed, tmp_path):
    model = sample_classifier(tmp_path / "model", seed=1, layers=2)
    out = tmp_path / "out"
    args = ["--model", str(model), "--out", str(out), "--formats", "[fp16]", "--latency_examples", "4"]
    done = run_with_path("-m", "domainbert", "export", *args, "--repeats", "1", path=installed)
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
    loaded = run_with_path("-c", code, path=installed)
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    assert loaded.stdout.split() == ["fp16", str(torch.float32)]
