"""Library output of ``fit``/``validate``/``test``/``predict`` that a user does not need, silenced at its source.

A run shows what it runs, one progress bar, its final metrics and where the model is (
:class:`domainbert.core.callbacks.RunReport`). Silenced here, each by the narrowest means that reaches it:

- Lightning's advertising tips (``litlogger``, ``litmodels``), its "GPU available: False" lines for hardware that
  is absent and "Using ... Automatic Mixed Precision" (domainbert logs the precision it chose): a filter on
  Lightning's loggers that drops those records only;
- known deprecation warnings raised inside the libraries (torch's ``_pytree`` from transformers, torchdata's):
  ``warnings`` filters on their exact messages;
- transformers' load report (a table with colour codes, which domainbert reports in one line itself) and other
  transformers warnings: its verbosity becomes ``error`` unless ``TRANSFORMERS_VERBOSITY`` is set;
- progress bars of transformers and ``datasets`` when stderr is not a terminal (a log file or a pipe): on a terminal
  the ``datasets`` bars stay (tokenizing a large corpus takes minutes).

``DOMAINBERT_LOG=DEBUG`` keeps everything.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import warnings

#: Lightning's loggers for ``rank_zero_info`` messages (both packages' copies).
LIGHTNING_LOGGERS = (
    "lightning.pytorch.utilities.rank_zero",
    "lightning.fabric.utilities.rank_zero",
)

#: Lightning INFO records dropped: advertising, hardware that is not there, what domainbert says itself.
_DROPPED = re.compile(
    r"💡 Tip|litlogger|litmodels|^(GPU|TPU|HPU|IPU) available: False|Automatic Mixed Precision \(AMP\)$"
)

#: (message regex, category) of library warnings that say nothing about the user's run.
KNOWN_WARNINGS: tuple[tuple[str, type[Warning]], ...] = (
    (r"`torch\.utils\._pytree\._register_pytree_node` is deprecated", FutureWarning),
    (r"`isinstance\(treespec, LeafSpec\)` is deprecated", Warning),  # lightning/pytorch/utilities/_pytree.py
    (r"'set_vital' is deprecated", UserWarning),  # torchdata's StatefulDataLoader
)


class _DropLibraryChatter(logging.Filter):
    """Drops Lightning's tips and its lines about absent hardware."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not _DROPPED.search(record.getMessage())


_FILTER = _DropLibraryChatter()


def on_terminal() -> bool:
    """Whether stderr (where progress bars go) is a terminal."""
    return bool(getattr(sys.stderr, "isatty", None) and sys.stderr.isatty())


def quiet_libraries() -> None:
    """Silence the libraries' chatter for a training command (see the module's docstring); safe to call twice."""
    if os.environ.get("DOMAINBERT_LOG", "").upper() == "DEBUG":
        return
    for name in LIGHTNING_LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
    for message, category in KNOWN_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)
    terminal = on_terminal()
    if "TRANSFORMERS_VERBOSITY" not in os.environ:
        os.environ["TRANSFORMERS_VERBOSITY"] = "error"  # read when transformers configures its logger
        if "transformers" in sys.modules:
            import transformers.utils.logging as tf_logging

            tf_logging.set_verbosity_error()
    if not terminal:
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # transformers reads it at import
        os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")  # datasets reads it at import
        if "transformers" in sys.modules:
            import transformers.utils.logging as tf_logging

            tf_logging.disable_progress_bar()
        if "datasets" in sys.modules:
            import datasets

            datasets.disable_progress_bars()
