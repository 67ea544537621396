"""The example export format plugin (examples/plugin_export/): found through its entry point, written by
``export(formats=["fp16"])``, loaded back by ``load_variant``.

Nothing is pip-installed here: the package is imported from its source folder, and its entry point comes from a
``dist-info`` folder written from the example's own pyproject.toml (tests/integration/test_export_plugin.py installs
it for real and runs the command).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from domainbert.deploy import formats
from domainbert.deploy.classifier import classify
from domainbert.deploy.command import export
from domainbert.deploy.folders import VARIANT_FILE
from domainbert.deploy.load import load_variant
from domainbert.deploy.sample import sample_classifier

PLUGIN = Path(__file__).resolve().parents[2] / "examples" / "plugin_export"


def _entry_points() -> str:
    """The ``entry_points.txt`` that installing the example writes, from its pyproject.toml."""
    tomllib = pytest.importorskip("tomllib")
    groups = tomllib.loads((PLUGIN / "pyproject.toml").read_text(encoding="utf-8"))["project"]["entry-points"]
    lines = []
    for group, entries in groups.items():
        lines += [f"[{group}]", *(f"{name} = {target}" for name, target in entries.items()), ""]
    return "\n".join(lines)


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """The example on ``sys.path`` with its entry points, for one test; the table is read afresh around it."""
    info = tmp_path / "site" / "domainbert_fp16_format-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: domainbert-fp16-format\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(_entry_points())
    monkeypatch.syspath_prepend(str(PLUGIN))
    monkeypatch.syspath_prepend(str(info.parent))
    monkeypatch.delitem(sys.modules, "fp16_format", raising=False)
    formats.FORMATS.refresh()
    yield
    monkeypatch.undo()
    sys.modules.pop("fp16_format", None)
    formats.FORMATS.refresh()


def test_without_the_plugin_there_is_no_fp16_format():
    assert "fp16" not in formats.table(refresh=True)


def test_the_table_finds_the_example_format_under_its_entry_point_after_the_built_ins(installed):
    table = formats.table()
    assert list(table) == [*formats.built_in(), "fp16"]
    fmt = table["fp16"]
    assert type(fmt).__module__ == "fp16_format" and type(fmt).__name__ == "Fp16Weights"
    assert (fmt.option, fmt.needs, fmt.teacher, fmt.available()) == (None, (), False, [])
    assert [f.name for f in formats.enabled({"int8": False}, ["fp16"])] == ["fp16"]
    assert formats.enabled({"bf16": True}) == [formats.built_in()["bf16"]]  # only --formats [fp16] turns it on


def test_export_writes_the_fp16_folder_at_half_the_size_and_load_variant_reads_it_as_float32(installed, tmp_path):
    model_dir = sample_classifier(tmp_path / "model", labels=["graphics", "network"], seed=3, layers=2)
    out = tmp_path / "out"
    result = export(str(model_dir), str(out), formats=["fp16"], latency_examples=4, repeats=1, limit=4)

    rows = {row["variant"]: row for row in result["variants"]}
    assert rows["fp16"]["format"] == "fp16" and rows["fp16"]["runtime"] == "float16 weights run in float32"
    folder = out / "fp16"
    assert json.loads((folder / VARIANT_FILE).read_text()) == {"variant": "fp16", "stored": "float16"}
    stored = load_file(str(folder / "model.safetensors"))
    assert {t.dtype for t in stored.values()} == {torch.float16}
    size, full = (folder / "model.safetensors").stat().st_size, (out / "student" / "model.safetensors").stat().st_size
    assert size < 0.7 * full

    original, tokenizer, _ = load_variant(model_dir)
    loaded, loaded_tokenizer, info = load_variant(folder)
    assert info == {"variant": "fp16", "stored": "float16"} and not loaded.training
    assert loaded_tokenizer.get_vocab() == tokenizer.get_vocab()
    want = {k: v.half().float() for k, v in original.state_dict().items() if v.is_floating_point()}
    got = loaded.state_dict()
    assert all(got[k].dtype == torch.float32 and torch.equal(got[k], v) for k, v in want.items())
    assert any(not torch.equal(want[k], v) for k, v in original.state_dict().items() if k in want)  # it rounded
    texts = ["a library for fonts", "a daemon that serves files"]
    rows = zip(classify(loaded, tokenizer, texts), classify(original, tokenizer, texts), strict=True)
    for fp16_row, fp32_row in rows:
        probs = fp32_row["probabilities"]
        assert all(abs(p - probs[name]) < 1e-3 for name, p in fp16_row["probabilities"].items())


def test_the_written_model_is_the_one_load_gives_and_the_given_model_is_left_as_it_was(installed, tmp_path):
    original, _, _ = load_variant(sample_classifier(tmp_path / "model"))
    before = {k: v.clone() for k, v in original.state_dict().items()}
    folder = tmp_path / "fp16"
    folder.mkdir()
    fmt = formats.get("fp16")
    written = fmt.write(original, folder, ctx=None)
    assert all(torch.equal(before[k], v) and v.dtype == torch.float32 for k, v in original.state_dict().items())
    loaded = fmt.load(folder, original.config, {"variant": "fp16", **written.info})
    inputs = {"input_ids": torch.tensor([[2, 8, 9, 3]]), "attention_mask": torch.ones(1, 4, dtype=torch.long)}
    with torch.no_grad():
        assert torch.equal(written.model(**inputs).logits, loaded(**inputs).logits)
