"""Tokenized splits shared across stages and seeds: a second ``domainbert fit`` in a new process, with
another seed and the model in another folder (as a stage after DAPT loads its export), tokenizes nothing and says
where each split came from in one line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from domainbert.core.shown import short_path
from tests.helpers import ROOT, TINY_CLS


def _fit(model, seed: int, root, datasets_cache) -> list[str]:
    """The ``[cache] tokenized`` lines of a 2-step ``domainbert fit`` of the tiny classification config."""
    env = {**os.environ, "HF_DATASETS_CACHE": str(datasets_cache)}
    args = ["--config", TINY_CLS, "--model.init_from", str(model), "--seed_everything", str(seed)]
    args += ["--trainer.max_steps", "2", "--trainer.default_root_dir", str(root)]
    proc = subprocess.run(
        [sys.executable, "-m", "domainbert", "fit", *args], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return [line for line in proc.stdout.splitlines() if line.startswith("[cache] tokenized")]


def _arrow_files(folder) -> set[str]:
    return {str(p) for p in folder.rglob("cache-*.arrow")}


def test_a_second_fit_with_another_seed_and_folder_reuses_both_splits(tiny_bert, tmp_path):
    cache = tmp_path / "datasets"
    assert _fit(tiny_bert, 0, tmp_path / "a", cache) == [], "the first fit tokenizes, quietly"
    files = _arrow_files(cache)
    exported = shutil.copytree(tiny_bert, tmp_path / "exported")
    lines = _fit(exported, 1, tmp_path / "b", cache)
    assert _arrow_files(cache) == files, "nothing tokenized again"
    assert [line.split(" reused from ")[0] for line in lines] == [
        "[cache] tokenized cls_train.jsonl (60 rows, max_length 64)",
        "[cache] tokenized cls_val.jsonl (15 rows, max_length 64)",
    ]
    shown = {short_path(f) for f in files}  # the line names the cache file in its short form
    assert all(line.split(" reused from ")[1] in shown for line in lines), (lines, shown)
