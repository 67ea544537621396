"""The parts of domainbert's own types that ``core`` reads, declared where ``core`` may name them.

``core`` sits below ``modules`` and ``adapt`` (its callbacks and model card cannot import their classes), so it
reads them through these protocols: :class:`~domainbert.modules.base.HFModule` is :class:`Exportable`;
:class:`~domainbert.core.callbacks.HFExport` and :class:`~domainbert.adapt.watch.ProbeWatch` are
:class:`RestoresBest`. A user's LightningModule or callback is neither unless it declares the same members.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

import torch


@runtime_checkable
class Exportable(Protocol):
    """A module that writes a Hugging Face folder (domainbert's ``HFModule``)."""

    serves_predictions: bool
    """Whether its export serves predictions (then it records how its test pass scored)."""
    evaluated_metrics: dict | None
    """The metrics of its latest validation and test, for the model card."""

    def hf_model(self) -> torch.nn.Module:
        """The Hugging Face model its export writes."""
        ...

    def export_hf(self, out_dir: str | Path) -> Path:
        """Write the Hugging Face folder ``out_dir``."""
        ...


@runtime_checkable
class RestoresBest(Protocol):
    """A callback that loads the best checkpoint's weights back when training ends (or does not: ``False``)."""

    restore_best: bool
    """Whether it restores the best weights."""
