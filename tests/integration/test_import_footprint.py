"""Start-up pins, not timings: what a fresh interpreter imports for ``domainbert fit`` and for the data layer.

Each check starts a new interpreter (``sys.modules`` of this one holds whatever earlier tests imported).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Packages and domainbert parts that ``domainbert fit`` never needs: tools, deployment, sweeps, other stages.
NOT_ON_THE_FIT_PATH = (
    "optuna",
    "onnx",
    "onnxruntime",
    "peft",
    "sklearn",
    "torchao",
    "domainbert.deploy",
    "domainbert.sweep",
    "domainbert.pipeline",
    "domainbert.distill",
    "domainbert.adapt.vocab",
    "domainbert.core.probe",
    "domainbert.adapt.select",
    "domainbert.adapt.pseudo",
)

# `domainbert fit --help` in a fresh interpreter, its text in `out`: the start of both scripts below
_FIT_HELP = """
import contextlib, io, json, sys
from domainbert.cli import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    try:
        main(["fit", "--help"])
    except SystemExit as exc:
        assert exc.code == 0, exc.code
"""

# ... then the modules a fine-tuning config names; the imported modules after each step, as JSON
_SCRIPT = (
    _FIT_HELP
    + """
assert "--trainer.max_steps" in out.getvalue()
after_help = sorted(sys.modules)
import domainbert.modules.classification, domainbert.core.prediction, domainbert.core.callbacks
print(json.dumps({"help": after_help, "fit": sorted(sys.modules)}))
"""
)


def _imported(names: list[str], wanted: str) -> bool:
    return any(n == wanted or n.startswith(wanted + ".") for n in names)


@pytest.fixture(scope="module")
def imported() -> dict[str, list[str]]:
    proc = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, cwd=ROOT, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", NOT_ON_THE_FIT_PATH)
def test_the_fit_path_imports_no_tool_or_optional_package(imported, name):
    assert not _imported(imported["fit"], name)


def test_fit_help_loads_no_model_code(imported):
    # the parser needs the classes' signatures, not transformers' model loading (core.hf pulls it in)
    assert "domainbert.core.hf" not in imported["help"]
    assert not _imported(imported["help"], "domainbert.modules")
    assert "domainbert.data.classification" in imported["help"]  # the plugins stay known subclasses of --data


def test_the_data_layer_imports_no_model_code():
    # an Augmenter loads its masked LM on first use (tests/unit/test_augment.py), so importing it loads no model
    code = "import sys, domainbert.data.classification; print(sorted(m for m in sys.modules if 'core.' in m))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert "domainbert.core.hf" not in out and "domainbert.core.models_local" not in out
    assert "domainbert.core." in out  # the listing is real: the data layer does import parts of domainbert.core


# `domainbert fit --help` twice in fresh interpreters sharing one cache: the text, and whether Lightning was imported
_HELP_TWICE = (
    _FIT_HELP
    + """
print(json.dumps({"text": out.getvalue(), "lightning": "lightning.pytorch" in sys.modules}))
"""
)


def test_a_second_fit_help_is_the_same_text_without_importing_lightning(tmp_path):
    env = {**os.environ, "DOMAINBERT_CACHE": str(tmp_path / "cache")}
    runs = []
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-c", _HELP_TWICE], capture_output=True, text=True, env=env, check=True)
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert runs[0]["lightning"] and "--trainer.max_steps" in runs[0]["text"]
    assert runs[1] == {"text": runs[0]["text"], "lightning": False}
