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
- **Optional.** ``max_length`` (int) is checked against the model's position embeddings before training. What
  else domainbert reads when a datamodule has it is declared here, each with the value assumed when it does not
  (domainbert's own datamodules declare them all): :func:`data_max_length`, :func:`data_paths` (the files, for the
  model card and the teacher cache), :class:`Describes`, :func:`windows`, :func:`text_pair_column`,
  :func:`soft_label_column`, :func:`multi_label`, :func:`transfer`, :func:`batch_size`, :func:`nsp`,
  :func:`packing`, and the capabilities :class:`TakesLabels`, :class:`TakesWindows`, :class:`CountsLabels`,
  :class:`LabelledFiles`, :class:`StreamsTrainTokens`. The rest of the package reads a datamodule only through
  these (``tests/unit/test_datamodule_reads.py`` holds it).

Label agreement has one home, here: :func:`model_labels` makes a module's label set from the data's and its head's
(a fine-tuning checkpoint's or a distillation teacher's), :func:`check_datamodule` checks a datamodule when the CLI
builds it, and :func:`check_agreement` checks it again at ``setup`` (Python API runs included), re-encoding the data
in the model's label order where it can (:func:`align_labels`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from domainbert.core.protocols import Describes, StreamsTrainTokens, data_max_length, data_paths
from domainbert.errors import DomainBertError

if TYPE_CHECKING:
    import datasets

    from domainbert.data.transfer import TransferSet

__all__ = [
    "CountsLabels",
    "Describes",
    "HasLabels",
    "LabelledFiles",
    "StreamsTrainTokens",
    "TakesLabels",
    "TakesTokenizer",
    "TakesWindows",
    "align_labels",
    "batch_size",
    "check_agreement",
    "check_datamodule",
    "check_label_count",
    "data_max_length",
    "data_paths",
    "is_generic",
    "label_names",
    "model_labels",
    "multi_label",
    "nsp",
    "packing",
    "soft_label_column",
    "text_pair_column",
    "transfer",
    "windows",
]

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


@runtime_checkable
class TakesLabels(Protocol):
    """A datamodule that can encode its labels in another order (the model's), see :func:`align_labels`."""

    def use_labels(self, names: list[str], source: str) -> None:
        """Encode the labels ``names`` in this order from now on; ``source`` names where the order comes from."""


@runtime_checkable
class TakesWindows(Protocol):
    """A datamodule that can read long texts in the model's windows (classification's ``long_text``).

    ``windows`` are :class:`~domainbert.data.windows.Windows` (which imports this module: not named here).
    """

    long_text: str | None
    windows: Any

    def use_windows(self, windows: Any) -> None:
        """Read long texts in ``windows`` (those the model was trained with)."""


@runtime_checkable
class CountsLabels(Protocol):
    """A datamodule that counts each label's rows in a split (for ``class_weights: balanced``)."""

    def label_counts(self) -> list[int]:
        """Rows per label id in the training split."""

    def raw(self, split: str) -> datasets.Dataset:
        """The split's rows as read."""


@runtime_checkable
class LabelledFiles(Protocol):
    """A single-text classification datamodule whose rows can be read as text and label (``head_init: probe``)."""

    paths: dict[str, Any]
    text_column: str
    label_column: str
    label2id: dict[str, int]

    def raw(self, split: str) -> datasets.Dataset:
        """The split's rows as read."""


def windows(datamodule: Any) -> Any:
    """The :class:`~domainbert.data.windows.Windows` a datamodule reads long texts in; None: it truncates them."""
    return getattr(datamodule, "windows", None)


def text_pair_column(datamodule: Any) -> str | None:
    """The column of each row's second text; None: single texts."""
    return getattr(datamodule, "text_pair_column", None)


def soft_label_column(datamodule: Any) -> str | None:
    """The column of each row's soft targets (a teacher's probabilities); None: hard labels only."""
    return getattr(datamodule, "soft_label_column", None)


def multi_label(datamodule: Any) -> bool:
    """Whether a row may hold several labels; False for a datamodule that does not say."""
    return bool(getattr(datamodule, "multi_label", False))


def transfer(datamodule: Any) -> TransferSet | None:
    """The unlabelled documents a datamodule adds for a teacher to label (``data.transfer``); None: none."""
    return getattr(datamodule, "transfer", None)


def batch_size(datamodule: Any) -> int | None:
    """Training examples per batch; None when the datamodule does not say (or not as an int)."""
    value = getattr(datamodule, "batch_size", None)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def nsp(datamodule: Any) -> bool | None:
    """Whether the data is sentence pairs (the corpus's ``nsp`` hyperparameter); None when it does not say."""
    return _hparams(datamodule).get("nsp")


def packing(datamodule: Any) -> bool | None:
    """Whether examples are blocks of concatenated documents (the corpus's ``packing``); None: it does not say."""
    return _hparams(datamodule).get("packing")


def label_names(datamodule: Any) -> list[str] | None:
    """The data's labels in id order, as strings; None while unknown (or for a datamodule without labels)."""
    try:
        names = getattr(datamodule, "label_names", None)
    except DomainBertError:  # a label set read from a training split that cannot be read
        return None
    return None if names is None else [str(x) for x in names]


def _hparams(datamodule: Any) -> Mapping:
    """A datamodule's ``save_hyperparameters`` record; empty without one."""
    hparams = getattr(datamodule, "hparams", None)
    return hparams if isinstance(hparams, Mapping) else {}


def check_datamodule(datamodule: Any, model: Any) -> None:
    """Raise a clear error when ``datamodule`` misses what ``model`` needs from it.

    A model whose hyperparameters include ``num_labels`` is a labelled task (unless its ``label_names`` is None, as
    a distillation module's for QA or masked-LM): the datamodule must satisfy :class:`HasLabels`, and its labels
    must agree with the model's.
    """
    hparams = getattr(model, "hparams", {}) or {}
    if "num_labels" not in hparams or (hasattr(model, "label_names") and model.label_names is None):
        return
    name = type(datamodule).__name__
    missing = [a for a in ("num_labels", "label_names") if not _readable(datamodule, a)]
    if missing and hparams.get("num_labels") is None:
        raise DomainBertError(
            f"data: {name} has no {' or '.join(missing)}; a datamodule for {type(model).__name__} must expose "
            "num_labels and label_names from __init__ (see domainbert.data.contract), or give model.num_labels"
        )
    if not missing and datamodule.label_names is not None:
        check_label_count(datamodule.num_labels, list(datamodule.label_names), f"data: {name}.")
    align_labels(datamodule, getattr(model, "label_names", None))


def check_agreement(datamodule: Any, label_names: list[str] | None, settings: dict | None = None, owner="model"):
    """At ``setup``: the data's ``settings`` (``multi_label``) equal the model's, and it encodes the model's labels.

    Args:
        datamodule: the trainer's datamodule; None (plain dataloaders) checks nothing.
        label_names: the model's labels in id order; None for a task without labels.
        settings: ``{attribute: the model's value}`` that a datamodule with that attribute must share.
        owner: how messages name the model's side (``model``, ``model.teacher``).

    Raises:
        DomainBertError: a setting or the label set differs (see :func:`align_labels`).
    """
    if datamodule is None:
        return
    for attr, want in (settings or {}).items():
        have = getattr(datamodule, attr, want)
        if have != want:
            raise DomainBertError(f"data.{attr}={have} but {owner}.{attr}={want}; set both the same")
    align_labels(datamodule, label_names)


def check_label_count(num_labels: int | None, label_names: list[str] | None, where: str = "") -> None:
    """Raise when both a label count and label names are given and disagree; ``where`` prefixes the message."""
    if num_labels is not None and label_names is not None and len(label_names) != num_labels:
        raise DomainBertError(
            f"{where}num_labels is {num_labels} but label_names has {len(label_names)} names: {list(label_names)}"
        )


def is_generic(names: list[str]) -> bool:
    """True for ``transformers``' default names ``LABEL_0, LABEL_1, ...``: a label count, not a label set."""
    return list(names) == [f"LABEL_{i}" for i in range(len(names))]


def model_labels(
    num_labels: int | None,
    label_names: list[str] | None,
    own: list[str] | None = None,
    *,
    source: str = "the checkpoint",
    fixed: bool = False,
) -> list[str]:
    """A module's label names in id order, from the data's (linked by the CLI) and its head's own.

    Args:
        num_labels: the data's label count; None when unknown.
        label_names: the data's labels in id order (or the user's ``model.label_names``); None when unknown.
        own: the labels of the head the module starts from (its checkpoint's ``id2label``); None for none.
            Generic names (``LABEL_i``) count as a size only.
        source: how messages name that head's owner (a checkpoint path, ``the teacher``).
        fixed: the head stays as it is (a distillation teacher's): the data must have its labels, in its order.
            Otherwise (fine-tuning) the data's label set wins: the checkpoint's order is kept when the two sets
            are equal (the datamodule then takes it, see :func:`align_labels`), and another set gets a new head.

    Raises:
        DomainBertError: the count and the names disagree; the data's labels are not a fixed head's; or no label
            set is known at all.
    """
    names = None if label_names is None else [str(x) for x in label_names]
    check_label_count(num_labels, names, "model.")
    if fixed:
        return _fixed_head_labels(num_labels, names, [str(x) for x in own or []], source)
    own = None if own is None or is_generic(own) else [str(x) for x in own]
    if names is not None:
        if own is not None and own != names and sorted(own) == sorted(names):
            log.info("%s: keeping the checkpoint's label order %s (the data's is %s)", source, own, names)
            return own
        if own is not None and own != names:
            log.warning(
                "%s has a head for the labels %s, but the labels here are %s: the head is %s",
                source,
                own,
                names,
                "kept under the new names" if len(own) == len(names) else "replaced by a random one",
            )
        return names
    if own is not None and num_labels in (None, len(own)):
        return own
    if num_labels is None:
        raise DomainBertError(
            "the number of labels is unknown: give data.train or data.labels (the CLI links them into the model), "
            "or model.num_labels / model.label_names, or model.init_from a fine-tuned export (its id2label)"
        )
    return [f"LABEL_{i}" for i in range(num_labels)]


def _fixed_head_labels(num_labels: int | None, names: list[str] | None, own: list[str], source: str) -> list[str]:
    """The labels of a head that cannot change (see :func:`model_labels`)."""
    if num_labels is not None and num_labels != len(own):
        raise DomainBertError(
            f"the data has {num_labels} labels but {source}'s head has {len(own)}: distil on the data {source} was "
            "fine-tuned on"
        )
    if names is None:
        return own
    if len(names) != len(own):
        raise DomainBertError(f"{len(names)} label_names but {source}'s head has {len(own)} outputs")
    if not is_generic(own) and names != own:
        raise DomainBertError(
            f"the data's labels {names} differ from {source}'s {own} (order matters: {source}'s output i is label i); "
            f"give data.labels in {source}'s order"
        )
    return names


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
    have = label_names(datamodule)
    if have == names:
        return
    takes = isinstance(datamodule, TakesLabels)
    if have is None:
        if takes:
            datamodule.use_labels(names, source="the model")
        return
    if sorted(have) != sorted(names):
        raise DomainBertError(
            f"the model's labels {names} differ from the data's {have}; leave model.label_names unset (the CLI "
            "links the data's), or evaluate on data with the model's label set"
        )
    if not takes:
        raise DomainBertError(
            f"the model's label order {names} differs from the data's {have} ({type(datamodule).__name__} cannot "
            "take another order): give the labels in the model's order"
        )
    log.info("labels encoded in the model's order %s (the data's order was %s)", names, have)
    datamodule.use_labels(names, source="the model")


def _readable(obj: Any, attr: str) -> bool:
    try:
        getattr(obj, attr)
    except (AttributeError, DomainBertError):
        return False
    return True
