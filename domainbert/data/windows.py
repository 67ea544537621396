"""Long texts as overlapping windows (``data.long_text: windows``): the settings, the encoding, the mean, the record.

By default a classification text is cut at ``max_length`` tokens (``truncate``). With ``windows`` the tokenizer cuts
it into windows of ``max_length`` tokens (special tokens included) that overlap by ``stride`` tokens, through its own
overflow mechanism (``return_overflowing_tokens``, as QA's windows in :mod:`domainbert.data.qa`); at most
``max_windows`` windows are kept per text, the first ones. A batch holds texts, each row its windows
(:class:`~domainbert.data.batching.Collator` pads the window axis and adds :data:`WINDOW_MASK`); the model runs on
the real windows and averages them per text (:func:`window_mean`) before the loss, in training, validation, test and
prediction alike.

Which vectors are averaged: the head of every classifier ends in a linear layer (``classifier``/``out_proj``) over a
pooled vector (the mean of the token states, BERT's ``[CLS]`` pooler, RoBERTa's dense+tanh over ``<s>``). A linear
layer commutes with the mean, so the mean of the windows' logits *is* the head applied to the mean of the windows'
pooled vectors, exactly (dropout, in training, drops each window's vector on its own). Averaging the logits keeps
every family's own head, LoRA and activation checkpointing untouched.

A model fine-tuned with windows records them in its config (:data:`CONFIG_KEY`, written into the export's
``config.json``); a datamodule left at ``long_text: null`` takes them from the model (:func:`align_windows`), so
``domainbert predict`` on that export windows again. Plain transformers (``pipeline()``) knows nothing of it and
truncates.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

import torch

from domainbert.data.contract import TakesWindows
from domainbert.errors import DomainBertError

log = logging.getLogger(__name__)

#: the values of ``data.long_text``
LONG_TEXT = ("truncate", "windows")
#: the batch key of the (texts, windows) mask: True where a row has a window
WINDOW_MASK = "window_mask"
#: the config attribute (``config.json`` key) of a model fine-tuned with windows
CONFIG_KEY = "domainbert_long_text"
#: the default cap of windows per text
MAX_WINDOWS = 8


def default_stride(max_length: int) -> int:
    """The default overlap, a quarter of a window (32 tokens of 128).

    A text cut at a window's edge is seen whole, up to a sentence or so (about 20 words), in the next window; the
    windows then advance by about three quarters of their length, so a long text costs about a third more windows
    than without overlap. QA overlaps more (128 of 384), since an answer must fit inside one window; here the mean
    over the windows tolerates a cut.
    """
    return max_length // 4


@dataclass(frozen=True)
class Windows:
    """How long texts are windowed.

    Attributes:
        max_length: tokens per window, special tokens included (``data.max_length``).
        stride: tokens of overlap between consecutive windows.
        max_windows: windows kept per text (the first ones).
    """

    max_length: int
    stride: int
    max_windows: int

    def record(self) -> dict:
        """The config entry of a model fine-tuned with these windows."""
        return {"long_text": "windows", **dataclasses.asdict(self)}


def window_settings(
    long_text: str | None, max_length: int, stride: int | None, max_windows: int | None, pair: str | None = None
) -> Windows | None:
    """The windows of ``data.long_text``/``stride``/``max_windows``; None for ``truncate`` (and unset, ``None``).

    Raises:
        DomainBertError: an unknown ``long_text``, a negative ``stride`` or one not below ``max_length``, a
            ``max_windows`` below 1, or windows over text pairs (``pair``, the pair column).
    """
    if long_text is not None and long_text not in LONG_TEXT:
        raise DomainBertError(f"data.long_text={long_text!r}: expected truncate or windows")
    if stride is not None and not 0 <= stride < max_length:
        raise DomainBertError(f"data.stride={stride}: expected 0 <= stride < data.max_length ({max_length})")
    if max_windows is not None and max_windows < 1:
        raise DomainBertError(f"data.max_windows={max_windows}: expected at least 1 window per text")
    if long_text != "windows":
        return None
    if pair:
        raise DomainBertError(f"data.long_text=windows does not take text pairs (data.text_pair_column={pair!r})")
    stride = default_stride(max_length) if stride is None else stride
    return Windows(max_length, stride, MAX_WINDOWS if max_windows is None else max_windows)


def tokenize_windows(tokenizer, texts: list[str], windows: Windows) -> dict[str, list]:
    """Each text's windows: per model input, one list of windows (token lists) per text.

    Raises:
        DomainBertError: ``stride`` leaves a window no room for new tokens (the special tokens count too).
    """
    room = windows.max_length - tokenizer.num_special_tokens_to_add(pair=False)
    if windows.stride >= room:
        raise DomainBertError(
            f"data.stride={windows.stride}: a window of {windows.max_length} tokens holds {room} tokens of text; "
            "give a stride below that"
        )
    enc = tokenizer(
        texts,
        truncation=True,
        max_length=windows.max_length,
        stride=windows.stride,
        return_overflowing_tokens=True,
    )
    keys = [k for k in tokenizer.model_input_names if k in enc]
    out: dict[str, list] = {k: [[] for _ in texts] for k in keys}
    for i, text in enumerate(enc["overflow_to_sample_mapping"]):
        if len(out[keys[0]][text]) < windows.max_windows:
            for k in keys:
                out[k][text].append(enc[k][i])
    return out


def window_mean(values: torch.Tensor, window_mask: torch.Tensor) -> torch.Tensor:
    """The mean per text of the windows' rows ``values`` (windows, ...), in float32.

    Args:
        values: one row per real window, in the order of ``window_mask``'s True entries (row by row).
        window_mask: (texts, windows) bool, True where a text has a window; every text has at least one.
    """
    mask = window_mask.to(values.device)
    full = values.new_zeros((*mask.shape, *values.shape[1:]), dtype=torch.float32)
    full[mask] = values.float()
    weight = mask.to(torch.float32).view(*mask.shape, *([1] * (values.dim() - 1)))
    return full.sum(1) / weight.sum(1).clamp(min=1.0)


def recorded(config) -> Windows | None:
    """The windows a model's config records (:data:`CONFIG_KEY`); None for a model fine-tuned on truncated texts."""
    entry = getattr(config, CONFIG_KEY, None)
    if not isinstance(entry, dict) or entry.get("long_text") != "windows":
        return None
    try:
        return Windows(int(entry["max_length"]), int(entry["stride"]), int(entry["max_windows"]))
    except (KeyError, TypeError, ValueError):
        raise DomainBertError(
            f"config {CONFIG_KEY}={entry!r}: expected long_text, max_length, stride and max_windows"
        ) from None


def record(config, windows: Windows | None) -> None:
    """Write ``windows`` into a model's config (None: remove an earlier record), so its export carries them."""
    if windows is not None:
        setattr(config, CONFIG_KEY, windows.record())
    elif hasattr(config, CONFIG_KEY):
        delattr(config, CONFIG_KEY)


def align_windows(datamodule, config, fit: bool) -> Windows | None:
    """At the model's ``setup``: a datamodule left at ``long_text: null`` takes the model's recorded windows.

    Args:
        datamodule: the trainer's datamodule; one that is not :class:`~domainbert.data.contract.TakesWindows` (QA, a
            custom one) is left alone.
        config: the model's config.
        fit: a fit records the data's windows in ``config`` (or removes an earlier record), for the export.

    Returns:
        The windows the data uses (None: it truncates).
    """
    if not isinstance(datamodule, TakesWindows):
        return None
    own = recorded(config)
    if datamodule.long_text is None and own is not None:
        datamodule.use_windows(own)
    windows = datamodule.windows
    if fit:
        record(config, windows)
    return windows
