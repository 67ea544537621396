"""Replay the red-team table against this checkout, from the command line, and print its verdicts.

    python examples/redteam/replay.py [--jobs 2] [--only soup,pipeline] [--keep]

Every attack is a real ``python -m domainbert ...`` (or ``python -c``) process in a folder of its own under a fresh
temporary folder, against tiny models built there first (nothing downloads). Each row is judged OK or DEF (see
``verdict.py``); the table is markdown, and the last line is ``rows=N ok=N def=N skip=N``. The exit status is 1
when any row is DEF.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the repository root on the path, for ``examples.redteam``
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from examples.redteam import (  # noqa: E402
    attacks_folders,
    attacks_inputs,
    attacks_outputs,
    attacks_runs,
    attacks_safety,
    attacks_shipped,
    fixtures,
)
from examples.redteam.verdict import Attack, run  # noqa: E402


def attacks() -> list[Attack]:
    """Every row, in table order."""
    return [
        *attacks_outputs.item12(),
        *attacks_outputs.item13(),
        *attacks_runs.item14(),
        *attacks_runs.items_1_3_8(),
        *attacks_runs.leftovers(),
        *attacks_inputs.data_files(),
        *attacks_inputs.options(),
        *attacks_inputs.tools(),
        *attacks_safety.safety(),
        *attacks_inputs.plugins(),
        *attacks_folders.folders(),
        *attacks_shipped.shipped(),
    ]


def _cell(text: str, width: int = 160) -> str:
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text if len(text) <= width else text[: width - 1] + "…"


def _command(attack: Attack) -> str:
    if attack.python and attack.argv[0] != "-c":  # a script: its path and arguments as given
        return "python " + " ".join(attack.argv)
    if attack.python and "transformers" not in attack.argv[1]:  # a script of the replay's own
        return f"python -c <the {attack.id} script>"
    if attack.python:
        return "python -c <" + ("plain transformers load" if "said" in attack.argv[1] else "remote-code logits") + ">"
    return "domainbert " + " ".join(a if a and " " not in a else repr(a) for a in attack.argv)


def run_all(chosen: list[Attack], values: dict, root: Path, jobs: int) -> dict[str, tuple[str, str]]:
    """Run the attacks phase by phase; those sharing a folder one after another. ``{id: (verdict, got)}``."""
    verdicts: dict[str, tuple[str, str]] = {}

    def group(items: list[Attack]) -> None:
        for attack in items:
            start = time.monotonic()
            verdict, got, _ = run(attack, values, root)
            verdicts[attack.id] = (verdict, got)
            seconds = time.monotonic() - start
            print(f"[{verdict:>4}] {attack.id} ({seconds:.0f} s): {_cell(got, 200)}", file=sys.stderr, flush=True)

    for phase in sorted({a.phase for a in chosen}):
        groups: dict[str, list[Attack]] = defaultdict(list)
        for attack in (a for a in chosen if a.phase == phase):
            groups[attack.folder or attack.id].append(attack)
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            list(pool.map(group, groups.values()))
    return verdicts


def table(chosen: list[Attack], verdicts: dict[str, tuple[str, str]]) -> str:
    """The markdown table and the closing ``key=value`` line."""
    lines = ["| id | item | command | expected | got | verdict |", "|---|---|---|---|---|---|"]
    for a in chosen:
        verdict, got = verdicts[a.id]
        command = _cell(_command(a), 150)
        lines.append(f"| {a.id} | {a.item} | `{command}` | {_cell(a.expected)} | {_cell(got)} | {verdict} |")
    counts = {k: sum(1 for v, _ in verdicts.values() if v == k) for k in ("OK", "DEF", "SKIP")}
    lines.append("")
    lines.append(f"rows={len(verdicts)} ok={counts['OK']} def={counts['DEF']} skip={counts['SKIP']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Build the fixtures, run the chosen attacks, print the table; 1 when a row is DEF."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2, help="attacks run side by side (default 2)")
    parser.add_argument("--only", default="", help="comma-separated substrings of the ids to run")
    parser.add_argument("--skip", default="", help="comma-separated ids not to run (rows already judged)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (its path is printed)")
    ns = parser.parse_args(argv)
    wanted = [w for w in ns.only.split(",") if w]
    skipped = set(ns.skip.split(","))
    chosen = [a for a in attacks() if (not wanted or any(w in a.id for w in wanted)) and a.id not in skipped]
    chosen_ids = {a.id for a in chosen}
    chosen += [a for a in attacks() if a.id not in chosen_ids and any(a.id == c.folder for c in chosen)]
    root = Path(tempfile.mkdtemp(prefix="domainbert-redteam-"))
    try:
        start = time.monotonic()
        values = fixtures.build(root)
        verdicts = run_all(chosen, values, root, ns.jobs)
        order = [a for a in attacks() if a.id in verdicts]
        print(table(order, verdicts))
        print(f"replay: {time.monotonic() - start:.0f} s, folder {root}", file=sys.stderr)
    finally:
        if not ns.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 1 if any(v == "DEF" for v, _ in verdicts.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
