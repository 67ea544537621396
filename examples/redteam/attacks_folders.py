"""A folder of the user's taken for a command's own; outputs that are null, under a file or on a read-only mount.

The rows of the folder round: a folder holding a ``state.json`` of ``{}`` (and the user's ``report.md`` and
``config.yaml``) as a pipeline's ``out``; ``out: ~`` (YAML's null) in a pipeline config; ``get_mpnet.py --out``
under a file or on a read-only mount; ``sweep --out`` on a home, a folder of the user's or one holding its own
config. Each must be refused in one line, before any work, the user's files untouched.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from examples.redteam.attacks_outputs import PIPE, _mount_read_only, _unmount, _user_file, _write
from examples.redteam.verdict import Attack, Result

#: what a pipeline writes when it starts, which must not appear in a folder it refused
STARTED = [".domainbert-output", ".pipeline.lock", "finetune-baseline-seed0", "plots"]
#: a sweep of the tiny classification config on the shared data (its shipped data paths are the repository's)
SWEEP = [
    "sweep", "--config", "{cfg_cls}", "--sweep", "{sweep_lr}", "--n_trials", "1", "--model.init_from", "{bert}",
    "--data.train", "{train}", "--data.val", "{val}", "--data.test", "null", "--data.predict", "null",
]  # fmt: skip
#: what a sweep writes when it starts, which must not appear in a folder it refused
SWEPT = ["study.db", ".domainbert-output", ".claim.lock", "trial_000"]


def _state_folder(work: Path, values: dict) -> None:
    """A folder of the user's: ``state.json`` of ``{}``, a ``report.md`` and a ``config.yaml`` (no marker)."""
    (work / "mine").mkdir(exist_ok=True)
    (work / "mine" / "state.json").write_text("{}")
    (work / "mine" / "report.md").write_text("# my report\n")
    (work / "mine" / "config.yaml").write_text("mine: true\n")


def _home(work: Path, values: dict) -> None:
    (work / "home" / "docs").mkdir(parents=True, exist_ok=True)
    (work / "home" / "docs" / "thesis.tex").write_text("years of work\n")


def _user_folder(work: Path, values: dict) -> None:
    (work / "mine").mkdir(exist_ok=True)
    (work / "mine" / "notes.txt").write_text("the user's notes\n")


def _config_folder(work: Path, values: dict) -> None:
    (work / "cfg").mkdir(exist_ok=True)
    shutil.copy(values["cfg_cls"], work / "cfg" / "fit.yaml")


def _script_refused(*names: str):
    """A check: the script exited 1 with one ``get_mpnet:`` line naming each of ``names`` (placeholders filled)."""

    def check(res: Result) -> tuple[bool, str]:
        said = [line for line in res.out.splitlines() if line.startswith("get_mpnet:")]
        line = said[-1] if said else (res.out.strip().splitlines() or ["(no output)"])[-1]
        wanted = [n.format(**res.values) for n in names]
        return res.rc == 1 and len(said) == 1 and all(n in line for n in wanted), f"rc {res.rc}: {line}"

    return check


def folders() -> list[Attack]:
    """Items 3 and 4 of the folder round: a user's folder taken for a command's, null and unwritable outputs."""
    mpnet = ["{get_mpnet}", "--from-dir", "{work}/no-pieces", "--out"]
    return [
        Attack("pipeline-out-state-json-empty", "R3", [*PIPE, "--out", "mine"],
               "refused: state.json {} is no pipeline's mark; report.md and config.yaml untouched",
               names=["mine", "not written by domainbert"], setup=_state_folder, protect=["{work}/mine"],
               absent=[f"{{work}}/mine/{p}" for p in STARTED]),
        Attack("pipeline-out-null", "R4", ["pipeline", "--config", "p.yaml", *PIPE[1:]],
               "one line: out is null (YAML's ~), not a TypeError", names=["out is null"],
               setup=_write("p.yaml", "out: ~\n"), absent=["{work}/None", "{work}/state.json"]),
        Attack("get-mpnet-out-under-a-file", "R4", [*mpnet, "notes.txt/mpnet"],
               "one line before any download: a file on the path; the file untouched", expect="custom",
               check=_script_refused("notes.txt is a file, not a folder"), python=True,
               setup=_user_file("notes.txt"), protect=["{work}/notes.txt"]),
        Attack("get-mpnet-out-read-only", "R4", [*mpnet, "ro/mpnet"], "one line before any download: read-only",
               expect="custom", check=_script_refused("ro/mpnet", "Read-only file system"), python=True,
               setup=_mount_read_only, teardown=_unmount),
        Attack("sweep-out-home", "R4", [*SWEEP, "--out", "~"], "refused: a home folder; the home untouched",
               names=["--out", "home folder"], setup=_home, env={"HOME": "{work}/home"},
               protect=["{work}/home"], absent=[f"{{work}}/home/{p}" for p in SWEPT]),
        Attack("sweep-out-user-folder", "R4", [*SWEEP, "--out", "mine"], "refused; the user's folder untouched",
               names=["--out", "mine", "not written by domainbert"], setup=_user_folder, protect=["{work}/mine"],
               absent=[f"{{work}}/mine/{p}" for p in SWEPT]),
        Attack("sweep-out-its-config", "R4", [*SWEEP[:2], "cfg/fit.yaml", *SWEEP[3:], "--out", "cfg"],
               "refused: the folder holds its own fit config", names=["would overwrite the input cfg/fit.yaml"],
               setup=_config_folder, protect=["{work}/cfg"], absent=[f"{{work}}/cfg/{p}" for p in SWEPT]),
    ]  # fmt: skip
