"""The parts of domainbert's own types that ``core`` reads, declared where ``core`` may name them.

``core`` sits below ``modules`` and ``adapt`` (its callbacks and model card cannot import their classes), so it
reads them through these protocols: :class:`~domainbert.modules.base.HFModule` is :class:`Exportable`;
:class:`~domainbert.core.callbacks.HFExport` and :class:`~domainbert.adapt.watch.ProbeWatch` are
:class:`RestoresBest`. A user's LightningModule or callback is neither unless it declares the same members.

It also holds the part of the datamodule contract (:mod:`domainbert.data.contract`, which re-exports it) that
``core`` reads: :func:`data_max_length`, :func:`data_paths`, :class:`Describes` and :class:`StreamsTrainTokens`.
Any ``LightningDataModule`` may be handed in; these are the only places that read an optional member off one.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

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


@runtime_checkable
class Describes(Protocol):
    """A datamodule that describes its data in one line (for model cards)."""

    def describe(self) -> str:
        """One line: the data's files and sizes."""
        ...


@runtime_checkable
class StreamsTrainTokens(Protocol):
    """A datamodule that gives its tokenized training split's ids unbatched (domainbert's corpus)."""

    def train_token_ids(self, max_tokens: int) -> Iterator[Any] | None:
        """Arrays of token ids, about ``max_tokens`` in all; None when the split is not tokenized that way."""
        ...


def data_max_length(datamodule: Any) -> int | None:
    """A datamodule's ``max_length`` (its longest tokenized input); None without one or when it is not an int."""
    value = getattr(datamodule, "max_length", None)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def data_paths(datamodule: Any) -> dict[str, Any]:
    """Split name -> the file spec(s) a datamodule reads (``train``, ``validation``, ...); empty when it does not say.

    domainbert's datamodules declare ``paths``. Another datamodule may name its training files by ``train_spec``,
    ``train`` or a ``train`` hyperparameter (``save_hyperparameters``).
    """
    declared = getattr(datamodule, "paths", None)
    if isinstance(declared, Mapping):
        return dict(declared)
    hparams = getattr(datamodule, "hparams", None)
    hparams = hparams if isinstance(hparams, Mapping) else {}
    train = getattr(datamodule, "train_spec", None) or getattr(datamodule, "train", None) or hparams.get("train")
    return {"train": train} if train else {}
