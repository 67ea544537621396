"""One formula for every per-step random stream: masks, dropout reseeding, distillation masks.

A stream that is a function of ``(seed, step)`` makes a resumed run draw exactly what an uninterrupted one would.
"""

from __future__ import annotations

import torch

_PRIME = 1_000_003


def step_seed(seed: int, step: int) -> int:
    """The seed of step ``step`` of a run seeded with ``seed``: distinct per step, the same on every resume."""
    return (int(seed) * _PRIME + int(step)) % (2**63)


def step_generator(seed: int, step: int, device: torch.device | str = "cpu") -> torch.Generator:
    """A ``torch.Generator`` on ``device`` seeded with :func:`step_seed`."""
    g = torch.Generator(device=device)
    g.manual_seed(step_seed(seed, step))
    return g
