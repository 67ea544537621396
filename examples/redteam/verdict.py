"""One attack: its command run as a subprocess in a folder of its own, and the verdict on what it did.

OK: handled (rc != 0 with exactly one ``domainbert: error:`` line naming what it must, no traceback), or the correct
behaviour (rc 0 and the attack's own check passes). DEF: a traceback, rc 0 on nonsense, a user file changed or lost
(sha256 before and after), a planted payload that ran (its marker exists), a secret echoed, a path that must stay
absent created, a hang, or an output that is silently wrong. SKIP: the attack cannot be set up on this machine.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ERROR_PREFIX = "domainbert: error:"


class Skip(Exception):
    """Raised by a setup that cannot build its attack here (no permission to mount, say)."""


@dataclass
class Result:
    """What one command did: exit status, output, seconds, its folder and the placeholders."""

    rc: int
    out: str
    seconds: float
    work: Path
    values: dict[str, str]

    def error_lines(self) -> list[str]:
        """The ``domainbert: error:`` lines of the output."""
        return [line for line in self.out.splitlines() if line.startswith(ERROR_PREFIX)]


@dataclass
class Attack:
    """One row of the table.

    Attributes:
        id: short id.
        item: the item of the red-team table it replays (``12``), or ``new`` for one of this replay's own.
        argv: ``domainbert`` arguments with ``{placeholders}`` (see ``fixtures.build``; ``{work}`` is its folder).
        expected: what a good ``domainbert`` does, for the table.
        expect: ``error`` (one line naming every string of ``names``), ``ok`` (rc 0 and ``check``), ``any`` (either;
            a refusal must be one line), or ``custom`` (``check`` alone decides).
        names: strings the error line must contain (placeholders allowed).
        setup: ``setup(work, values)`` builds the attack's files before the command.
        teardown: ``teardown(work, values)`` after it (unmount, say).
        check: ``check(result) -> (ok, note)`` for ``ok``/``any``/``custom``.
        protect: files or folders of the user's that must be byte-identical afterwards.
        absent: paths that must not exist afterwards (a payload's marker, a file written outside the output).
        secrets: strings that must never be printed.
        python: ``argv`` is ``python -c`` arguments instead of ``domainbert`` ones.
        path: folders put before the others on the command's ``PYTHONPATH`` (placeholders allowed): a planted
            plugin's distribution, say.
        phase: 1 for attacks that need the outputs of phase 0 (a fitted run).
        folder: the id of the attack whose folder this one shares (default: its own).
        timeout: seconds before the attack counts as a hang.
        env: variables set for the command (placeholders allowed), over the replay's offline environment.
    """

    id: str
    item: str
    argv: list[str]
    expected: str
    expect: str = "error"
    names: list[str] = field(default_factory=list)
    setup: Callable[[Path, dict], None] | None = None
    teardown: Callable[[Path, dict], None] | None = None
    check: Callable[[Result], tuple[bool, str]] | None = None
    protect: list[str] = field(default_factory=list)
    absent: list[str] = field(default_factory=list)
    secrets: list[str] = field(default_factory=list)
    python: bool = False
    path: list[str] = field(default_factory=list)
    phase: int = 0
    folder: str | None = None
    timeout: float = 300.0
    env: dict[str, str] = field(default_factory=dict)


def digests(paths: list[Path]) -> dict[str, str | None]:
    """sha256 of every file under ``paths`` (a missing path maps to None)."""
    found: dict[str, str | None] = {}
    for path in paths:
        if path.is_file():
            found[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
        elif path.is_dir():
            for p in sorted(path.rglob("*")):
                if p.is_file() and not p.is_symlink():
                    found[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
        else:
            found[str(path)] = None
    return found


def environment(root: Path) -> dict[str, str]:
    """An offline environment whose caches live under ``root``; the repository importable."""
    repo = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        HF_HOME=str(root / "hf_home"),
        HF_DATASETS_CACHE=str(root / "hf_datasets"),
        DOMAINBERT_CACHE=str(root / "domainbert_cache"),
        TOKENIZERS_PARALLELISM="false",
        PYTHONPATH=os.pathsep.join(p for p in (repo, env.get("PYTHONPATH", "")) if p),
    )
    return env


def run(attack: Attack, values: dict[str, str], root: Path) -> tuple[str, str, Result | None]:
    """Run ``attack``; return ``(verdict, got, result)``."""
    work = root / "rows" / (attack.folder or attack.id)
    work.mkdir(parents=True, exist_ok=True)
    values = {**values, "work": str(work)}
    try:
        if attack.setup:
            attack.setup(work, values)
    except Skip as why:
        return "SKIP", str(why), None
    protect = [Path(p.format(**values)) for p in attack.protect]
    absent = [Path(p.format(**values)) for p in attack.absent]
    existed = {p: os.path.lexists(p) for p in absent}
    before = digests(protect)
    argv = [a.format(**values) for a in attack.argv]
    cmd = [sys.executable, *argv] if attack.python else [sys.executable, "-m", "domainbert", *argv]
    env = {**environment(root), **{k: v.format(**values) for k, v in attack.env.items()}}
    env["PYTHONPATH"] = os.pathsep.join([*(p.format(**values) for p in attack.path), env["PYTHONPATH"]])
    start = time.monotonic()
    try:
        proc = subprocess.run(
            cmd, cwd=work, env=env, capture_output=True, text=True, timeout=attack.timeout, check=False
        )
        result = Result(proc.returncode, proc.stdout + proc.stderr, time.monotonic() - start, work, values)
    except subprocess.TimeoutExpired:
        return "DEF", f"no answer after {attack.timeout:.0f} s (hang)", None
    finally:
        if attack.teardown:
            attack.teardown(work, values)
    created = [p for p in absent if os.path.lexists(p) and not existed[p]]
    _remove_outside(created, root)
    changed = [k for k, v in before.items() if digests([Path(k)]).get(k) != v]
    return (*judge(attack, result, changed, created), result)


def _remove_outside(created: list[Path], root: Path) -> None:
    """Remove what an attack created outside the replay's folder (``/state.json``), after it was recorded."""
    for path in created:
        if root in path.parents:
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def judge(attack: Attack, res: Result, changed: list[str], created: list[Path]) -> tuple[str, str]:
    """The verdict and the ``got`` cell; the universal defects first, then what the attack expects."""
    if "Traceback (most recent call last)" in res.out:
        last = [line for line in res.out.splitlines() if line.strip()][-1]
        return "DEF", f"traceback (rc {res.rc}): {last}"
    if changed:
        return "DEF", f"user file changed or lost: {', '.join(changed[:3])}"
    if created:
        return "DEF", f"created what must stay absent: {', '.join(map(str, created))}"
    leaked = [s for s in attack.secrets if s in res.out]
    if leaked:
        return "DEF", f"printed the secret {leaked[0]!r}"
    errors = res.error_lines()
    if attack.expect == "custom":
        ok, note = attack.check(res)
        return ("OK" if ok else "DEF"), note
    if res.rc != 0:
        return _refusal(attack, res, errors)
    if attack.expect == "error":
        return "DEF", f"rc 0 on nonsense ({res.seconds:.0f} s)"
    ok, note = attack.check(res) if attack.check else (True, "rc 0")
    return ("OK" if ok else "DEF"), note


def _refusal(attack: Attack, res: Result, errors: list[str]) -> tuple[str, str]:
    """A command that exited non-zero: one line naming what it must, unless rc 0 was the only right answer."""
    if attack.expect == "ok":
        tail = errors[-1] if errors else (res.out.strip().splitlines() or ["(no output)"])[-1]
        return "DEF", f"rc {res.rc}: {tail}"
    if len(errors) != 1:
        tail = (res.out.strip().splitlines() or ["(no output)"])[-1]
        return "DEF", f"rc {res.rc} with {len(errors)} error lines: {tail}"
    line = errors[0][len(ERROR_PREFIX) :].strip()
    missing = [n.format(**res.values) for n in attack.names if n.format(**res.values) not in line]
    if missing:
        return "DEF", f"unclear (does not name {missing[0]!r}): {line}"
    return "OK", line
