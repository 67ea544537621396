"""The example packages under ``examples/``, installed for a test into a throwaway folder, never the environment."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def install_example(name: str, root: Path, skip: tuple[str, ...] = ()) -> Path:
    """``pip install examples/<name>`` into ``root/site`` (returned), offline.

    No network: no index, no build isolation, no deps. It is built from a copy under ``root``, so the build leaves
    nothing (``build/``, ``*.egg-info``) in the source tree; ``--no-cache-dir`` keeps pip's wheel cache untouched.
    Subprocesses see the package with the folder on their ``PYTHONPATH`` (its entry points come with it).

    Args:
        name: the folder under ``examples/``.
        root: a fresh temporary folder.
        skip: more names the copy leaves out (a sample data folder).
    """
    copy, target = root / name, root / "site"
    ignore = shutil.ignore_patterns("build", "*.egg-info", "__pycache__", *skip)
    shutil.copytree(ROOT / "examples" / name, copy, ignore=ignore)
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-build-isolation"]
    pip += ["--no-cache-dir", "--disable-pip-version-check", "--target", str(target), str(copy)]
    done = subprocess.run(pip, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return target


def run_with_path(*args: str, path: Path) -> subprocess.CompletedProcess:
    """``python *args`` from the project root, with ``path`` on the subprocess's ``PYTHONPATH``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(path), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
