"""Shared fixtures (tiny checkpoints of every family, built once per session), an offline environment, the plugins."""

from __future__ import annotations

import atexit
import gc
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
#: under pytest-xdist (``make test`` runs a process per core) each worker, and every process it starts, computes on
#: one thread: two workers of two threads each on two cores wait on each other's threads
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if "torch" in sys.modules:  # imported before this file (by a plugin): its thread count is set already
        sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

#: the ``datasets`` cache of the whole session (and of the CLI subprocesses the tests start): a temporary folder,
#: never ``~/.cache/huggingface/datasets``. ``datasets.config`` reads ``HF_DATASETS_CACHE`` once, when ``datasets``
#: is first imported, so the variable is set here, before any test module imports it; a ``datasets`` imported
#: earlier (by a plugin) is pointed at the folder through its config.
DATASETS_CACHE = Path(tempfile.mkdtemp(prefix="domainbert-tests-datasets-"))
os.environ["HF_DATASETS_CACHE"] = str(DATASETS_CACHE)
atexit.register(shutil.rmtree, DATASETS_CACHE, ignore_errors=True)
#: the ``--help`` cache (domainbert.cli.help_cache) of code that runs outside a test (session fixtures); each test
#: gets an empty one of its own (``_empty_help_cache``), never ``~/.cache/domainbert``
os.environ["DOMAINBERT_CACHE"] = tempfile.mkdtemp(prefix="domainbert-tests-cache-")
atexit.register(shutil.rmtree, os.environ["DOMAINBERT_CACHE"], ignore_errors=True)
if "datasets.config" in sys.modules:
    _config = sys.modules["datasets.config"]
    _config.HF_DATASETS_CACHE = DATASETS_CACHE
    _config.DOWNLOADED_DATASETS_PATH = DATASETS_CACHE / _config.DOWNLOADED_DATASETS_DIR
    _config.EXTRACTED_DATASETS_PATH = _config.DOWNLOADED_DATASETS_PATH / _config.EXTRACTED_DATASETS_DIR

from tests.helpers.planted import marker, planted  # noqa: E402, F401 - fixtures of the checkpoint-trust tests
from tests.helpers.tiny import CORPUS, FAMILIES, make_tiny  # noqa: E402

#: the fault-injection summary; the unit tier's rule (no Trainer.fit, no subprocess under tests/unit); pytester for
#: the tests of that rule
pytest_plugins = ["tests.helpers.faults_summary", "tests.helpers.tiers", "pytester"]


@pytest.fixture(autouse=True)
def _empty_help_cache(tmp_path_factory, monkeypatch) -> None:
    """Every test (and the CLI processes it starts) begins with an empty ``--help`` cache of its own."""
    monkeypatch.setenv("DOMAINBERT_CACHE", str(tmp_path_factory.mktemp("cache")))


@pytest.fixture(autouse=True, scope="module")
def _frozen_heap() -> None:
    """Each test module starts with the objects alive then (the libraries' modules, classes and functions, the
    session's fixtures: over 400,000 objects) collected once and moved out of the collector's view (``gc.freeze``).

    A ``gc.collect()`` in the code under test (the pipeline collects after every stage run in its process) then walks
    only what the module's tests made: about 0.3-0.5 s less per call. Nothing alive is freed either way; what the
    tests leave as garbage is collected at the next module's start. A test may ``gc.unfreeze()``: the rest of its
    module then runs unfrozen.
    """
    gc.collect()
    gc.freeze()


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory) -> dict[str, Path]:
    """A tiny random MLM checkpoint per family: ``{"bert": Path, ...}``."""
    root = tmp_path_factory.mktemp("tiny")
    return {f: make_tiny(f, root / f) for f in FAMILIES}


@pytest.fixture(scope="session")
def tiny_bert(tiny_models) -> Path:
    """The tiny BERT checkpoint."""
    return tiny_models["bert"]


@pytest.fixture(scope="session")
def corpus_file() -> Path:
    """The fixture corpus: 400 short lines of software-package prose."""
    return CORPUS
