"""Library output that a user does not need, silenced at its source, for the commands and the Python API alike.

A run shows what it runs, one progress bar, its final metrics and where the model is (
:class:`domainbert.core.callbacks.RunReport`). Silenced here, each by the narrowest means that reaches it:

- Lightning's advertising tips (``litlogger``, ``litmodels``), its "GPU available: False" lines for hardware that
  is absent and "Using ... Automatic Mixed Precision" (domainbert logs the precision it chose): a filter on
  Lightning's loggers that drops those records only;
- known warnings raised inside the libraries that say nothing about the user's run (:data:`KNOWN_WARNINGS`:
  deprecations, Lightning's notice that ``tensorboardX`` is not installed, its note that a checkpoint's callback
  state comes from another run folder, its warning that a fit which never validated has no monitored metric):
  ``warnings`` filters on their exact messages; onnxruntime's advice to pre-process a model before quantizing it (a
  root-logger record): a filter on the root logger that drops it only; Lightning's warning that a distillation's
  frozen teacher is in eval mode (:func:`expect_frozen_modules`), for exactly the teacher's modules; torch's
  "TypedStorage is deprecated" around the load of an int8 variant (:func:`quiet_typed_storage`);
- transformers' load report (a table with colour codes, which domainbert reports in one line itself) and other
  transformers warnings: its verbosity becomes ``error`` unless ``TRANSFORMERS_VERBOSITY`` is set;
- transformers' own progress bars ("Loading weights", "Writing model shards") around domainbert's loads and saves
  (:func:`quiet_transformers`); download bars of the Hugging Face Hub and the ``datasets`` bars stay on a terminal
  (tokenizing a large corpus takes minutes), and go when stderr is not a terminal (a log file or a pipe).

:func:`quiet_libraries` does all of this for a command (``domainbert ...``: :func:`domainbert.cli.main` and
LightningCLI's entry). The Python API gets :func:`quiet_imports` when ``domainbert`` is imported (the Lightning
filter and the warning filters, which touch nothing else), and :func:`quiet_transformers` around domainbert's own
loads and saves of models, so a user's own transformers calls keep transformers' settings.

``DOMAINBERT_LOG=DEBUG`` keeps everything.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import warnings
from collections.abc import Iterator

#: Lightning's loggers for ``rank_zero_info`` messages (both packages' copies).
LIGHTNING_LOGGERS = (
    "lightning.pytorch.utilities.rank_zero",
    "lightning.fabric.utilities.rank_zero",
    "lightning.pytorch.trainer.connectors.checkpoint_connector",
)

#: Lightning INFO records dropped: advertising, hardware that is not there, what domainbert says itself, the
#: float32 matmul advice on a GPU (``precision: auto`` trains in bf16 there).
_DROPPED = re.compile(
    r"💡 Tip|litlogger|litmodels|^(GPU|TPU|HPU|IPU) available: False|Automatic Mixed Precision \(AMP\)$"
    r"|^`weights_only` was not set"  # a checkpoint domainbert wrote and loads back itself
    r"|^You are using a CUDA device .* that has Tensor Cores"  # fp32 matmul advice; precision auto is bf16 there
)

#: (message regex, category) of library warnings that say nothing about the user's run.
KNOWN_WARNINGS: tuple[tuple[str, type[Warning]], ...] = (
    (r"`torch\.utils\._pytree\._register_pytree_node` is deprecated", FutureWarning),
    (r"`isinstance\(treespec, LeafSpec\)` is deprecated", Warning),  # lightning/pytorch/utilities/_pytree.py
    (r"'set_vital' is deprecated", UserWarning),  # torchdata's StatefulDataLoader
    # Lightning's default logger without tensorboard: domainbert's runs log to CSV in the run folder anyway
    (r"Starting from v1\.9\.0, `tensorboardX` has been removed", UserWarning),
    # a checkpoint of another run folder (test/predict --ckpt_path, fit from a .ckpt file): domainbert resolves
    # best/last itself, and a fit from a file starts a run of its own
    (r"The dirpath has changed from .* won't be reloaded", UserWarning),
    # a fit that has not validated yet (Lightning raises instead once one has): domainbert saves last.ckpt and says so
    (r"`ModelCheckpoint\(monitor=.*\)` could not find the monitored key", UserWarning),
)

#: Records on the root logger dropped (libraries that log through ``logging.warning``): onnxruntime's advice to
#: pre-process a model before quantization (for static quantization of vision models; domainbert's is dynamic).
_DROPPED_ROOT = re.compile(r"^Please consider (to run )?pre-processing before quantization")


class _DropLibraryChatter(logging.Filter):
    """Drops Lightning's tips and its lines about absent hardware."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not _DROPPED.search(record.getMessage())


class _DropRootChatter(logging.Filter):
    """Drops the library records of :data:`_DROPPED_ROOT` logged on the root logger."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not _DROPPED_ROOT.search(record.getMessage())


_FILTER = _DropLibraryChatter()
_ROOT_FILTER = _DropRootChatter()


def debug() -> bool:
    """Whether ``DOMAINBERT_LOG=DEBUG`` asks for everything the libraries say."""
    return os.environ.get("DOMAINBERT_LOG", "").upper() == "DEBUG"


def on_terminal() -> bool:
    """Whether stderr (where progress bars go) is a terminal."""
    return bool(getattr(sys.stderr, "isatty", None) and sys.stderr.isatty())


def quiet_imports() -> None:
    """The filters that cost nothing and change nothing else: Lightning's chatter and :data:`KNOWN_WARNINGS`.

    Run when ``domainbert`` is imported, so the Python API (a ``lightning.Trainer`` fitting a domainbert module)
    prints no Lightning tip and no known library warning. Safe to call twice.
    """
    if debug():
        return
    for name in LIGHTNING_LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
    if _ROOT_FILTER not in logging.root.filters:
        logging.root.addFilter(_ROOT_FILTER)
    for message, category in KNOWN_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)


def quiet_libraries() -> None:
    """Silence the libraries' chatter for a command (see the module's docstring); safe to call twice."""
    if debug():
        return
    quiet_imports()
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


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """Silence transformers' load report, warnings and own progress bars inside the block, then restore them.

    Around domainbert's own loads and saves of models, which domainbert reports itself (weights initialised at
    random, where a model was written), for the commands and the Python API alike. transformers' own bars
    ("Loading weights", "Writing model shards") go; the Hub's download bars stay as they were. Its verbosity is
    left alone when ``TRANSFORMERS_VERBOSITY`` is set (by the user, or ``error`` by :func:`quiet_libraries`);
    nothing changes under ``DOMAINBERT_LOG=DEBUG``.
    """
    if debug():
        yield
        return
    import transformers.utils.logging as tf_logging
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    level, bars, hub_off = (
        tf_logging.get_verbosity(),
        tf_logging.is_progress_bar_enabled(),
        are_progress_bars_disabled(),
    )
    if "TRANSFORMERS_VERBOSITY" not in os.environ:
        tf_logging.set_verbosity_error()
    tf_logging.disable_progress_bar()  # the Hub's bars too
    if not hub_off:
        enable_progress_bars()
    try:
        yield
    finally:
        tf_logging.set_verbosity(level)
        if bars:
            tf_logging.enable_progress_bar()
        (disable_progress_bars if hub_off else enable_progress_bars)()


def expect_frozen_modules(module) -> None:
    """Drop Lightning's "Found N module(s) in eval mode" warning when those N modules are ``module``'s.

    A distillation's teacher stays frozen in eval mode on purpose; any other module in eval mode (a count that
    differs) is still reported.
    """
    if debug():
        return
    count = sum(1 for m in module.modules() if not m.training)
    if count:
        warnings.filterwarnings("ignore", message=rf"Found {count} module\(s\) in eval mode at the start of training")


#: torch's deprecation notice on loading a pickled checkpoint that holds ``TypedStorage`` (torchao's int8 weights).
TYPED_STORAGE = r"TypedStorage is deprecated"


@contextlib.contextmanager
def quiet_typed_storage() -> Iterator[None]:
    """Drop torch's "TypedStorage is deprecated" warning inside the block, and no other.

    Around domainbert's own ``torch.load`` of an int8 variant: the notice is about the storages inside the saved
    weights, which the user cannot change. Other warnings pass as before; ``DOMAINBERT_LOG=DEBUG`` keeps it.
    """
    with warnings.catch_warnings():
        if not debug():
            warnings.filterwarnings("ignore", message=TYPED_STORAGE, category=UserWarning)
        yield
