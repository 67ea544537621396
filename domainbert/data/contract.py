"""The datamodule contract: what any ``LightningDataModule`` must offer to run under ``domainbert``.

A datamodule needs no domainbert base class. The CLI checks these protocols right after it builds the model
and the data, and names what is missing:

- **Every stage.** ``train_dataloader`` / ``val_dataloader`` / ``test_dataloader`` / ``predict_dataloader``
  (those the subcommand uses) yield dicts of tensors named as the model's ``forward`` takes them
  (``input_ids``, ``attention_mask``, optionally ``token_type_ids``), padded by the datamodule's own collate
  step, plus the task's targets (``labels``; for QA ``start_positions``/``end_positions``).
- **The tokenizer is handed over, not looked up.** If the datamodule has ``connect(tokenizer)``, the CLI calls
  it once, after instantiation, with the model's tokenizer (:class:`TakesTokenizer`). A datamodule never
  reaches into the model or the trainer for it.
- **Labelled tasks** (classification, tagging): ``num_labels`` (int) and ``label_names`` (list of str, in id
  order) must be readable right after ``__init__`` (:class:`HasLabels`). The CLI links them into the model
  (``link_arguments``), which writes ``id2label``/``label2id`` into the exported config, so the user never
  types the label count twice.
- **Optional.** ``max_length`` (int) is checked against the model's position embeddings before training.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from domainbert.errors import DomainBertError


@runtime_checkable
class TakesTokenizer(Protocol):
    """A datamodule that receives the model's tokenizer from the CLI."""

    def connect(self, tokenizer: Any) -> None:
        """Receive the model's tokenizer (called once, after the model and the data are built)."""


@runtime_checkable
class HasLabels(Protocol):
    """A datamodule of a labelled task: its label set is known from ``__init__``."""

    num_labels: int
    label_names: list[str]


def check_datamodule(datamodule: Any, model: Any) -> None:
    """Raise a clear error when ``datamodule`` misses what ``model`` needs from it.

    A model whose hyperparameters include ``num_labels`` is a labelled task: the datamodule must satisfy
    :class:`HasLabels`, and its labels must agree with the model's.
    """
    hparams = getattr(model, "hparams", {}) or {}
    if "num_labels" not in hparams:
        return
    name = type(datamodule).__name__
    missing = [a for a in ("num_labels", "label_names") if not _readable(datamodule, a)]
    if missing and hparams.get("num_labels") is None:
        raise DomainBertError(
            f"data: {name} has no {' or '.join(missing)}; a datamodule for {type(model).__name__} must expose "
            "num_labels and label_names from __init__ (see domainbert.data.contract), or give model.num_labels"
        )
    if not missing:
        names = list(datamodule.label_names)
        if len(names) != datamodule.num_labels:
            raise DomainBertError(
                f"data: {name}.num_labels is {datamodule.num_labels} but label_names has {len(names)} names: {names}"
            )


def _readable(obj: Any, attr: str) -> bool:
    try:
        getattr(obj, attr)
    except (AttributeError, DomainBertError):
        return False
    return True
