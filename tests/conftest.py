"""Shared fixtures: tiny checkpoints of every family, built once per session, and an offline environment."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

sys.path.insert(0, str(Path(__file__).parent))

from tiny import CORPUS, FAMILIES, make_tiny  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

pytest_plugins = ["faults_summary"]


@pytest.fixture(autouse=True, scope="session")
def _datasets_cache(tmp_path_factory):
    """Keep the ``datasets`` cache of the whole session in a temporary folder."""
    os.environ["HF_DATASETS_CACHE"] = str(tmp_path_factory.mktemp("hf_datasets_cache"))


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
