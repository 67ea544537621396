"""Every private API of another library that domainbert uses, each behind one small documented function or mixin.

A library's private attribute or hook may change in any release. Each use lives here, names the version it was
checked against and the public API that is missing, and is pinned by ``tests/unit/test_compat.py``: a release that
moves it fails there, not in a training run. Nothing else in ``domainbert`` reads or writes another library's
private attribute.

Checked against: lightning 2.6.6, optuna 5.0.0, datasets 5.2.0, transformers 5.24.0 and 5.25.0, torch 2.13.0, and
Python 3.11's ``argparse``, ``multiprocessing``, ``threading`` and ``atexit``. Nothing heavy is imported here: every
library comes from the object it is handed (only standard-library modules are imported, inside the functions).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import argparse
    from multiprocessing.connection import Connection

    import lightning.pytorch as L
    import optuna
    from lightning.pytorch.loggers import CSVLogger


# -- lightning: LightningModule ---------------------------------------------------------------------------------------


def attached_trainer(module: Any) -> L.Trainer | None:
    """The trainer ``module`` is attached to, or None (also for an object that is no LightningModule).

    Lightning 2.6.6: ``LightningModule.trainer`` raises ``RuntimeError`` when no trainer is attached, and there is
    no public way to ask whether one is; the property reads the private ``_trainer``, which is read here.
    """
    return getattr(module, "_trainer", None)


# -- lightning: strategies and loaders --------------------------------------------------------------------------------


def ddp_kwargs(strategy: Any) -> dict[str, Any] | None:
    """The keyword arguments ``strategy`` hands to ``DistributedDataParallel``; None for a strategy that is no DDP.

    Lightning 2.6.6 keeps them (``find_unused_parameters`` among them) in the private ``DDPStrategy._ddp_kwargs``;
    there is no public attribute to read them back.
    """
    return getattr(strategy, "_ddp_kwargs", None)


def wrapped_sampler(dataset: Any) -> Any:
    """The sampler that Lightning's sampler wrapper ``dataset`` shares out under DDP; None for any other object.

    Lightning 2.6.6: ``UnrepeatedDistributedSamplerWrapper`` (the predict loader's sampler under DDP) splits a
    ``_DatasetSamplerWrapper`` (its ``dataset``), which keeps the original sampler in its private ``_sampler``.
    """
    return getattr(dataset, "_sampler", None)


# -- lightning: LightningCLI ------------------------------------------------------------------------------------------


def only_subcommands(cli: Any, subcommands: dict[str, set[str]]) -> None:
    """Make the ``LightningCLI`` ``cli`` build the parsers of ``subcommands`` only (call before its ``__init__``).

    Lightning 2.6.6 takes the subcommands from the static method ``subcommands()``, called on the instance
    (``self.subcommands()`` in ``_setup_parser_kwargs``, ``_add_subcommands`` and ``_prepare_subcommand_parser``),
    and has no argument to choose them per call. An attribute of the instance shadows the static method for that
    instance only; the class keeps all of them.
    """
    cli.subcommands = lambda: subcommands


def subcommand_parsers(cli: Any) -> dict[str, Any]:
    """The parser of each subcommand ``cli`` built (``{}`` before they are built, or with ``run=False``).

    Lightning 2.6.6 keeps them in the private ``LightningCLI._subcommand_parsers``; its public ``parser`` is the
    main parser only.
    """
    return getattr(cli, "_subcommand_parsers", None) or {}


class SkipSeeding:
    """Mixin for a ``LightningCLI`` subclass (put it first) that parses without seeding any generator.

    Lightning 2.6.6 seeds every global generator in ``LightningCLI.__init__`` through the private
    ``self._set_seed()``, also with ``run=False``, and writes the seed it drew for ``seed_everything: true`` into the
    config; there is no public switch. This mixin's ``_set_seed`` does nothing.
    """

    def _set_seed(self) -> None:
        pass


# -- lightning: CSVLogger and its writer ------------------------------------------------------------------------------


def set_csv_writer(logger: CSVLogger, make: Callable[[], Any]) -> None:
    """Give ``logger`` the writer ``make()`` builds, unless it has built its own already.

    Lightning 2.6.6: ``CSVLogger.experiment`` builds a plain ``ExperimentWriter`` into the private ``_experiment``
    the first time it is read, and offers no public way to choose the writer's class.
    """
    if logger._experiment is None:
        logger._experiment = make()


class AppendToMetricsFile:
    """Mixin for Lightning's ``ExperimentWriter`` (put it first): keep an existing ``metrics.csv`` and its columns.

    Lightning 2.6.6: ``_ExperimentWriter.__init__`` calls the private ``_check_log_dir_exists``, which deletes a
    ``metrics.csv`` already in the folder; there is no public option to append. Here it reads that file's header
    instead, so new rows go under the same columns.
    """

    metrics_file_path: str
    metrics_keys: list[str]

    def _check_log_dir_exists(self) -> None:
        from pathlib import Path

        path = Path(self.metrics_file_path)
        if path.is_file():
            with path.open(encoding="utf-8") as f:
                header = f.readline().strip()
            self.metrics_keys = sorted(k for k in header.split(",") if k)


class TrainDescription:
    """Mixin for Lightning's ``RichProgressBar`` (put it first): its epoch text comes from ``train_description``.

    Lightning 2.6.6: the bar asks its private ``_get_train_description(current_epoch)`` for the text before the
    training bar, and has no public hook for it. A subclass defines ``train_description(current_epoch) -> str``.
    """

    def _get_train_description(self, current_epoch: int) -> str:
        return self.train_description(current_epoch)

    def train_description(self, current_epoch: int) -> str:
        """The text shown before the training bar in epoch ``current_epoch``."""
        raise NotImplementedError


# -- torch ------------------------------------------------------------------------------------------------------------


def unscales_itself(optimizer: Any) -> bool:
    """Whether ``optimizer`` unscales its gradients itself in ``step`` (a fused ``AdamW``, for one).

    Torch 2.13.0: such an optimizer sets the private ``_step_supports_amp_scaling``, which ``GradScaler`` and
    Lightning's mixed-precision plugin read; there is no public flag.
    """
    return getattr(optimizer, "_step_supports_amp_scaling", False)


# -- Python: multiprocessing, threading, atexit -----------------------------------------------------------------------


def connection_over(fd: int) -> Connection:
    """A ``multiprocessing`` connection (``send``/``recv`` of pickled objects) over the socket descriptor ``fd``.

    Python 3.11: ``multiprocessing.connection.Connection(handle)`` is not in the module's ``__all__`` nor in its
    documentation, which makes connections through ``Pipe``, ``Client`` and ``Listener`` only (each opens its own
    socket or pipe).
    """
    from multiprocessing.connection import Connection

    return Connection(fd)


def prove_key_as_client(conn: Connection, key: bytes) -> None:
    """Prove to the other end of ``conn`` that this end holds ``key``, then have it prove the same.

    Python 3.11: the HMAC handshake of ``multiprocessing.connection.Client(authkey=...)`` is the undocumented
    ``answer_challenge`` then ``deliver_challenge``, not in the module's ``__all__``; ``Client`` does it on a
    connection it opens itself only.

    Raises:
        multiprocessing.AuthenticationError: the other end does not hold ``key``.
    """
    from multiprocessing.connection import answer_challenge, deliver_challenge

    answer_challenge(conn, key)
    deliver_challenge(conn, key)


def prove_key_as_server(conn: Connection, key: bytes) -> None:
    """Have the other end of ``conn`` prove that it holds ``key``, then prove the same to it.

    Python 3.11: the HMAC handshake of ``multiprocessing.connection.Listener.accept`` is the undocumented
    ``deliver_challenge`` then ``answer_challenge``; ``Listener`` does it on a connection it accepted itself only.

    Raises:
        multiprocessing.AuthenticationError: the other end does not hold ``key``.
    """
    from multiprocessing.connection import answer_challenge, deliver_challenge

    deliver_challenge(conn, key)
    answer_challenge(conn, key)


def join_non_daemon_threads() -> None:
    """Wait for every thread that is not a daemon to end, as the interpreter does when it exits.

    Python 3.11 does it in the private ``threading._shutdown()``; a forked process that ends with ``os._exit``
    (no interpreter exit) has no public way to.
    """
    import threading

    threading._shutdown()


def run_exit_handlers() -> None:
    """Run (and clear) the functions registered with ``atexit``, as the interpreter does when it exits.

    Python 3.11 does it in the private ``atexit._run_exitfuncs()``; a forked process that ends with ``os._exit``
    (no interpreter exit) has no public way to.
    """
    import atexit

    atexit._run_exitfuncs()


# -- argparse (and jsonargparse, which builds on it) ------------------------------------------------------------------


def parser_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """Every option of ``parser``, in the order they were added (their ``help`` may be rewritten in place).

    Python 3.11's ``argparse`` keeps them in the private ``ArgumentParser._actions``; there is no public list
    (jsonargparse 4.53.0's parser inherits it).
    """
    return parser._actions


# -- optuna -----------------------------------------------------------------------------------------------------------


def study_storage(study: optuna.Study) -> optuna.storages.BaseStorage:
    """The storage behind ``study``: the object that can change a trial's state by its id.

    Optuna 5.0.0 keeps it in the private ``Study._storage``; a study offers no public way to fail another process's
    running trial, which the storage's public ``set_trial_state_values`` does.
    """
    return study._storage


def trial_id(trial: optuna.trial.FrozenTrial | optuna.Trial) -> int:
    """The storage's id of ``trial`` (unique across the storage's studies; not ``trial.number``).

    Optuna 5.0.0 keeps it in the private ``_trial_id`` of ``Trial`` and ``FrozenTrial``; the storage's public methods
    (``get_trial``, ``set_trial_state_values``) take it.
    """
    return trial._trial_id


# -- datasets ---------------------------------------------------------------------------------------------------------


def dataset_fingerprint(ds: Any) -> str:
    """The fingerprint ``datasets`` gave ``ds`` (a ``Dataset``): what it names the cache files of ``ds.map`` by.

    Datasets 5.2.0 keeps it in the private ``Dataset._fingerprint``; ``map(new_fingerprint=...)`` takes one, but none
    is readable through a public attribute.
    """
    return ds._fingerprint


# -- transformers -----------------------------------------------------------------------------------------------------


def set_backend_tokenizer(tokenizer: Any, backend: Any) -> None:
    """Make the fast tokenizer ``tokenizer`` (in place) use the Rust ``tokenizers.Tokenizer`` ``backend``.

    Transformers 5.24.0: a fast tokenizer (``TokenizersBackend``) keeps all its vocabulary state in the Rust
    tokenizer that ``backend_tokenizer`` returns, a read-only property over the private ``_tokenizer``; there is no
    public setter.
    """
    tokenizer._tokenizer = backend


def attn_implementation(config: Any) -> str | None:
    """The attention implementation (``sdpa``, ``eager``...) the model of ``config`` uses; None for no such config.

    Transformers 5.25.0 keeps it behind the private ``PretrainedConfig._attn_implementation`` property; the public
    ``set_attn_implementation`` of a model writes it, and nothing public reads it.
    """
    return getattr(config, "_attn_implementation", None)


def can_set_attn_implementation(model_class: type) -> bool:
    """Whether the ``PreTrainedModel`` subclass ``model_class`` accepts ``set_attn_implementation``.

    Transformers 5.25.0 answers through the private classmethod ``_can_set_attn_implementation()`` (it reads the
    class's module source: False where its attention does not dispatch through transformers' attention interface,
    or where the source cannot be read); there is no public question.
    """
    return model_class._can_set_attn_implementation()
