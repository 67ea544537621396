"""``examples/redteam/replay.py`` runs in the suite: one fast row, so a broken replay fails CI.

The whole table (75 rows, several minutes) is not run here; one row that needs no training checks the replay's
fixtures, its process runner, its verdict and its table end to end.
"""

from __future__ import annotations

from examples.redteam import replay


def test_one_row_of_the_replay_runs_and_is_judged_ok(capsys):
    assert replay.main(["--only", "pipeline-unknown-key", "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert "pipeline-unknown-key" in out
    assert out.strip().splitlines()[-1].startswith("rows=1 ok=1 def=0")
