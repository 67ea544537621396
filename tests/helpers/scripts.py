"""Load an example script (``examples/...``) as a module, its folder on ``sys.path`` as when it runs."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "examples" / "benchmarks"


@contextmanager
def script_module(path: Path) -> Iterator[ModuleType]:
    """The script at ``path`` as a module named after it; its folder is on ``sys.path`` until the block ends."""
    folder = str(path.parent)
    sys.path.insert(0, folder)
    try:
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(folder)
