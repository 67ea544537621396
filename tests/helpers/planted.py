"""Planted code for the checkpoint-trust tests: a class that leaves a mark when built, and a model folder whose
``auto_map`` code leaves one when imported (``examples/redteam/fixtures.py``). The marks must never appear."""

from __future__ import annotations

from pathlib import Path

import pytest
from torch import nn

from examples.redteam.fixtures import plant_auto_map

#: Where a class built from a checkpoint leaves its mark (set by the ``marker`` fixture).
BUILT: list[Path] = []


class Recorder(nn.Module):
    """An ``nn.Module`` that is no ``LossTerm``; building it creates each file of :data:`BUILT`."""

    def __init__(self, **kwargs) -> None:
        super().__init__()
        for path in BUILT:
            path.touch()


#: The class path a crafted checkpoint names for :class:`Recorder`.
RECORDER = f"{__name__}.Recorder"


@pytest.fixture
def marker(tmp_path) -> Path:
    path = tmp_path / "code_ran"
    BUILT[:] = [path]
    yield path
    BUILT.clear()


@pytest.fixture
def planted(tiny_bert, tmp_path, marker) -> Path:
    """The tiny BERT with an ``auto_map`` to ``evil_code.py``, which creates ``marker`` when imported."""
    return plant_auto_map(Path(tiny_bert), tmp_path / "planted", marker)
