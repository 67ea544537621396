"""Paths in one-line messages ([cache] lines, the final checkpoint): short, and still enough to find the file."""

from __future__ import annotations

import doctest
import os
from pathlib import Path

from domainbert.core import cache_store, shown
from domainbert.core.shown import short_path
from domainbert.data import token_cache


def test_the_docstring_examples_hold():
    assert doctest.testmod(shown).failed == 0


def test_a_path_under_the_working_folder_is_relative(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert short_path(tmp_path / "runs" / "cls" / "version_0" / "checkpoints" / "last.ckpt") == (
        "runs/cls/version_0/checkpoints/last.ckpt"
    )
    assert short_path(tmp_path) == "."


def test_a_datasets_cache_file_keeps_its_first_folders_and_a_cut_name(monkeypatch, tmp_path):
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    path = home / ".cache/huggingface/datasets/json/default-4e7a1b2c3d4e5f60/0.0.0" / ("ab" * 32)
    file = path / ("cache-" + "1f2e" * 8 + ".arrow")
    assert token_cache.shown([file]) == "~/.cache/huggingface/datasets/…/cache-1f2e1f2e1f2e….arrow"
    assert len(token_cache.shown([file])) < 60


def test_a_short_path_outside_stays_whole(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert short_path("/opt/models/bert/config.json") == "/opt/models/bert/config.json"
    long = "/opt/" + "/".join(["folder"] * 12) + "/run/checkpoints/last.ckpt"
    assert short_path(long, None) == long


def test_the_embedding_cache_entry_is_relative_when_the_cache_is_under_the_working_folder(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DOMAINBERT_CACHE", str(tmp_path / "cache"))
    assert cache_store.shown("embeddings", "0123456789abcdef" * 4) == os.path.join(
        "cache", "embeddings", "0123456789ab…"
    )
    assert Path(cache_store.root()) == tmp_path / "cache"
