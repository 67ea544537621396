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
  types the label count twice. Both may be None while unknown (no training split): the model then brings its
  own (an export's ``id2label``). A datamodule with ``use_labels(names)`` takes the model's label order when
  the two differ only in order (:func:`align_labels`), so an export is never scored with a wrong mapping.
- **Optional.** ``max_length`` (int) is checked against the model's position embeddings before training.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol, runtime_checkable

from domainbert.errors import DomainBertError

log = logging.getLogger(__name__)


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
    if not missing and datamodule.label_names is not None:
        names = list(datamodule.label_names)
        if len(names) != datamodule.num_labels:
            raise DomainBertError(
                f"data: {name}.num_labels is {datamodule.num_labels} but label_names has {len(names)} names: {names}"
            )
    align_labels(datamodule, getattr(model, "label_names", None))


def align_labels(datamodule: Any, names: list[str] | None) -> None:
    """Make the data encode labels with the model's ids, or raise naming both label orders.

    A model whose label set came from its checkpoint (``id2label`` of an export) may order the labels otherwise
    than the data (the training split's sorted labels): scoring with the data's ids would silently use a wrong
    mapping. When the names agree as sets, a datamodule with ``use_labels`` switches to the model's order (and
    one whose label set is unknown takes the model's); other datamodules must give the same order.

    Raises:
        DomainBertError: the label sets differ, or the order differs and the datamodule cannot take another.
    """
    if names is None:
        return
    names = [str(x) for x in names]
    try:
        have = getattr(datamodule, "label_names", None)
    except DomainBertError:
        have = None
    have = None if have is None else [str(x) for x in have]
    if have == names:
        return
    use = getattr(datamodule, "use_labels", None)
    if have is None:
        if callable(use):
            use(names, source="the model")
        return
    if sorted(have) != sorted(names):
        raise DomainBertError(
            f"the model's labels {names} differ from the data's {have}; leave model.label_names unset (the CLI "
            "links the data's), or evaluate on data with the model's label set"
        )
    if not callable(use):
        raise DomainBertError(
            f"the model's label order {names} differs from the data's {have} ({type(datamodule).__name__} cannot "
            "take another order): give the labels in the model's order"
        )
    log.info("labels encoded in the model's order %s (the data's order was %s)", names, have)
    use(names, source="the model")


def _readable(obj: Any, attr: str) -> bool:
    try:
        getattr(obj, attr)
    except (AttributeError, DomainBertError):
        return False
    return True
