"""The unit tier's fixtures: one PyTorch thread while its tests run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True, scope="package")
def _one_thread() -> Iterator[None]:
    """Run the unit tier with one intra-op thread, then put the thread count back (tests/integration keeps it).

    Its tensors are tiny (a hidden size of 32, a few rows): a second thread has no work worth handing it, only the
    hand-off of every operation. The unit tier, back to back on 2 cores: 79 s with two threads, 71 s with one.
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
