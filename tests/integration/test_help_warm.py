"""``python -m domainbert.cli.help_cache`` (the last step of ``make setup``): the first ``fit --help`` is served.

Each step is a fresh interpreter: whether Lightning was imported is read from its ``sys.modules``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from domainbert.cli.help_cache import COMMANDS

ROOT = Path(__file__).resolve().parents[2]

# `domainbert <command> --help` in a fresh interpreter: its text, and whether Lightning was imported
_HELP = """
import contextlib, io, json, sys
from domainbert.cli import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    try:
        main([sys.argv[1], "--help"])
    except SystemExit as exc:
        assert exc.code == 0, exc.code
print(json.dumps({"text": out.getvalue(), "lightning": "lightning.pytorch" in sys.modules}))
"""


def _help(command: str, cache: Path, columns: str) -> dict:
    env = {**os.environ, "DOMAINBERT_CACHE": str(cache), "COLUMNS": columns}
    proc = subprocess.run(
        [sys.executable, "-c", _HELP, command], capture_output=True, text=True, env=env, check=True, cwd=ROOT
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_warmed_texts_are_served_on_any_terminal_and_equal_a_build(tmp_path):
    warmed = tmp_path / "warmed"
    env = {**os.environ, "DOMAINBERT_CACHE": str(warmed)}
    subprocess.run([sys.executable, "-m", "domainbert.cli.help_cache"], check=True, env=env, cwd=ROOT)
    assert sorted(p.name for p in (warmed / "help").iterdir()) == [f"{c}.json" for c in sorted(COMMANDS)]
    served = _help("validate", warmed, columns="40")
    assert served["lightning"] is False, "the warmed text was built again"
    built = _help("validate", tmp_path / "cold", columns="200")  # a build in a process of its own
    assert built["lightning"] is True
    assert served["text"] == built["text"] and "--ckpt_path" in built["text"]
