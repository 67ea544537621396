"""``examples/redteam/replay.py`` runs in the suite: the rows that guard a fixed defect, so a regression fails CI.

The whole table (several minutes) is not run here. The default tier replays the rows that need no training, one
process each (a refusal before any work, or a prediction by a model built in the row's folder); the slow tier the
rows that train, run a pipeline or rebuild the ``--help`` cache. Each row must be judged OK (a read-only mount may be
SKIP where none can be mounted).
"""

from __future__ import annotations

import pytest

from examples.redteam import replay

#: rows that refuse before any work: a user's folder taken for a pipeline's or a sweep's, a null ``out``,
#: ``get_mpnet.py --out`` under a file or on a read-only mount, ``vocab extend --out`` on a home or its own model
#: with ``--overwrite``, a ``--help`` cache entry with escape sequences, an unknown pipeline key; what is shipped: a
#: distillation checkpoint whose loss entry would run a folder's code or build any class (``validate --ckpt_path``,
#: ``load_from_checkpoint``; ``losses`` and 0.1.0's ``extra_losses``), a classifier folder without its head or with
#: no weights given to ``export``, and ``predict`` and ``classify`` of a row longer than the export was scored at (no
#: training either)
FAST = [
    "pipeline-unknown-key",
    "pipeline-out-state-json-empty",
    "pipeline-out-null",
    "get-mpnet-out-under-a-file",
    "get-mpnet-out-read-only",
    "sweep-out-home",
    "sweep-out-user-folder",
    "sweep-out-its-config",
    "vocab-out-home-overwrite",
    "vocab-out-its-model-overwrite",
    "fit-help-cache-escapes",
    "ckpt-planted-loss-validate",
    "ckpt-planted-loss-load",
    "ckpt-loss-any-class",
    "ckpt-released-loss-any-class",
    "export-headless-classifier",
    "export-empty-safetensors",
    "predict-longer-than-scored",
    "classify-longer-than-scored",
]
#: rows that fit, run a pipeline or rebuild the help: a long ``$TMPDIR``, two pipelines on one ``out``, tokenized
#: splits cut short or replaced by another split's, a data file edited with its modification time restored, a
#: ``--help`` cache entry with an empty source or of the wrong shape
SLOW = [
    "pipeline-long-tmpdir",
    "pipeline-twice-on-one-out",
    "fit-token-cache-cut-short",
    "fit-token-cache-foreign",
    "fit-data-edited-mtime-restored",
    "fit-help-cache-empty-source",
    "fit-help-cache-malformed",
]
#: rows that need what a machine may lack (mounting a file system): SKIP is accepted there
MAY_SKIP = {"get-mpnet-out-read-only"}


def _verdicts(ids: list[str], capsys) -> tuple[int, dict[str, str], str]:
    """Replay exactly the rows ``ids``: the exit status, ``{id: verdict}`` from the table, its last line."""
    code = replay.main(["--only", ",".join(ids), "--jobs", "2"])
    lines = capsys.readouterr().out.strip().splitlines()
    rows = [line.split(" | ") for line in lines if line.startswith("| ") and not line.startswith("| id ")]
    return code, {cells[0].lstrip("| ").strip(): cells[-1].rstrip("|").strip() for cells in rows}, lines[-1]


def _check(ids: list[str], capsys) -> None:
    code, verdicts, last = _verdicts(ids, capsys)
    assert sorted(verdicts) == sorted(ids), last
    wrong = {i: v for i, v in verdicts.items() if v != "OK" and not (v == "SKIP" and i in MAY_SKIP)}
    assert not wrong, wrong
    assert code == 0 and last.startswith(f"rows={len(ids)} ") and " def=0 " in last


def test_the_rows_that_refuse_before_any_work_are_ok(capsys):
    _check(FAST, capsys)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_the_rows_that_train_or_run_a_pipeline_are_ok(capsys):
    _check(SLOW, capsys)
