"""The ``domainbert`` command: one table of subcommands, read by ``domainbert --help`` and by the dispatch.

Every command is a function that takes the options after the command's name (``fn(argv)``), named in
:data:`COMMANDS` as ``"module:function"`` so that ``domainbert --help`` imports none of them. ``fit``, ``validate``,
``test`` and ``predict`` are LightningCLI's (:func:`fit` and its siblings below); ``domainbert fit --config
configs/<stage>/<model>_<data>.yaml`` trains any LightningModule with any LightningDataModule given by
``class_path``. The tools (``vocab``, ``sweep``, ``export``, ``pipeline``...) are each a ``main(argv)`` of their own
module.

The package is the command line, above the stages: ``lightning_cli`` (LightningCLI, imported only for those four
commands), ``help_cache`` (their ``--help`` texts, kept once built), ``tool_cli`` (the parser of the tools that are
one function) and ``short_names`` (``--model NAME`` and ``--data NAME``).
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from domainbert.cli.tool_cli import wants_docs
from domainbert.errors import user_error


@dataclass(frozen=True)
class Command:
    """One row of :data:`COMMANDS`.

    Attributes:
        target: ``"module:function"``; the function takes the options after the command's name.
        help: its line in ``domainbert --help``.
    """

    target: str
    help: str

    @property
    def module(self) -> str:
        """The module that holds the command's function."""
        return self.target.partition(":")[0]

    def load(self) -> Callable[[list[str]], Any]:
        """Import the command's module and return its function."""
        module, _, function = self.target.partition(":")
        return getattr(importlib.import_module(module), function)


#: Every subcommand: where its function lives and its line in ``domainbert --help``, in the help's order.
COMMANDS: dict[str, Command] = {
    "fit": Command(
        "domainbert.cli:fit",
        "train: continued pretraining, fine-tuning or distillation (--config configs/<stage>/<name>.yaml)",
    ),
    "validate": Command(
        "domainbert.cli:validate", "evaluate a checkpoint on the validation set (--ckpt_path best|last|<file>)"
    ),
    "test": Command("domainbert.cli:test", "evaluate a checkpoint on the test set (--ckpt_path best|last|<file>)"),
    "predict": Command(
        "domainbert.cli:predict", "write predictions (JSONL) of a checkpoint (--ckpt_path best|last|<file>)"
    ),
    "sweep": Command(
        "domainbert.sweep.command:main",
        "Optuna search over a fit config's hyper-parameters (--config, --sweep, --n_trials)",
    ),
    "pipeline": Command(
        "domainbert.pipeline:main",
        "the whole recipe: DAPT, fine-tuning, distillation, export and a report (--config)",
    ),
    "export": Command(
        "domainbert.deploy.command:main",
        "deployment variants of a model: pruned, int8, bf16, ONNX, with a report (--model, --out)",
    ),
    "vocab": Command(
        "domainbert.adapt.vocab_cli:main",
        "extend a tokenizer with domain words, or train a WordPiece (extend|train, --top_k)",
    ),
    "datamodules": Command(
        "domainbert.data.registry:main", "list the datamodules registered by plugins (entry points)"
    ),
    "probe": Command(
        "domainbert.adapt.probe_cmd:main",
        "logistic regression on a model's frozen embeddings: the cheapest baseline (--model, --train, --val)",
    ),
    "select": Command(
        "domainbert.adapt.select:main",
        "the corpus documents nearest a task's texts, for curated DAPT (--model, --corpus, --task, --k)",
    ),
    "pseudolabel": Command(
        "domainbert.adapt.pseudo:main",
        "label corpus documents with a fine-tuned classifier, for self-training (--model, --corpus, --task)",
    ),
    "soup": Command(
        "domainbert.adapt.soup:main",
        "average the weights of fine-tuned classifiers (seeds of one recipe) into one model (--models, --out)",
    ),
}

USAGE = "usage: domainbert <command> [options]"


def help_text() -> str:
    """The text of ``domainbert --help``: every subcommand with one line."""
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {command.help}" for name, command in COMMANDS.items()]
    return "\n".join(
        [
            USAGE,
            "",
            "Adapt BERT-family encoders to a domain, then ship a small fast model.",
            "",
            "commands:",
            *lines,
            "",
            "`domainbert <command> --help` lists a command's options. Options are written with underscores",
            "(--ckpt_path, --top_k, --n_trials); any config value can be set as --<key>.<key> (--model.learning_rate).",
        ]
    )


#: Names served lazily from :mod:`domainbert.cli.lightning_cli`, so that the tool subcommands and ``--help`` start
#: without importing Lightning.
_LAZY = ("DomainBertCLI", "cli_main", "TRAINER_DEFAULTS")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from domainbert.cli import lightning_cli

        return getattr(lightning_cli, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``domainbert`` console script (``argv`` None) and of calls from Python."""
    program = argv is None  # the process ends when this returns
    argv = list(sys.argv[1:] if argv is None else argv)
    _configure_logging()
    if not argv or argv[0] in ("-h", "--help"):
        print(help_text(), file=sys.stdout if argv else sys.stderr)
        sys.exit(0 if argv else 2)
    if not argv[0].startswith("-") and argv[0] not in COMMANDS:
        print(
            f"domainbert: error: unknown command {argv[0]!r}; expected one of: {', '.join(COMMANDS)}", file=sys.stderr
        )
        sys.exit(2)
    if not wants_docs(argv):
        from domainbert.core.quiet import quiet_libraries

        quiet_libraries()  # every command: the tools load models too (vocab, probe, export, pipeline)
    done = False
    try:
        if argv[0].startswith("-"):  # options before the command (``--config x.yaml fit``): LightningCLI's to parse
            _lightning_command(argv)
        else:
            COMMANDS[argv[0]].load()(argv[1:])
        done = True
    except Exception as err:  # noqa: BLE001 - user errors are printed cleanly, the rest re-raised
        user = user_error(err)
        if user is None:
            raise
        print(f"domainbert: error: {user}", file=sys.stderr)
        sys.exit(2)
    finally:
        if program and (wants_docs(argv) or (done and os.environ.get("DOMAINBERT_QUICK_EXIT", "1") != "0")):
            _quick_exit()


def _configure_logging() -> None:
    """One root handler at ``$DOMAINBERT_LOG`` (default INFO); the chattiest libraries only warn."""
    logging.basicConfig(level=os.environ.get("DOMAINBERT_LOG", "INFO"), format="%(levelname)s %(name)s: %(message)s")
    for noisy in ("httpx", "urllib3", "filelock", "torchao"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def fit(argv: list[str]) -> None:
    """``domainbert fit``: LightningCLI's fit subcommand."""
    _lightning_command(["fit", *argv])


def validate(argv: list[str]) -> None:
    """``domainbert validate``: LightningCLI's validate subcommand."""
    _lightning_command(["validate", *argv])


def test(argv: list[str]) -> None:
    """``domainbert test``: LightningCLI's test subcommand."""
    _lightning_command(["test", *argv])


def predict(argv: list[str]) -> None:
    """``domainbert predict``: LightningCLI's predict subcommand.

    An export given as ``--model.init_from`` reads its inputs as it was scored: at the training length it records
    (and in float32 where it was scored so), unless the command line or a ``--config`` says otherwise
    (:func:`domainbert.cli.predict_args.predict_args`).
    """
    from domainbert.cli.predict_args import predict_args

    _lightning_command(["predict", *argv, *predict_args(argv)])


def _lightning_command(argv: list[str]) -> None:
    """Run a LightningCLI subcommand; a bare ``<command> --help`` comes from :mod:`domainbert.cli.help_cache`."""
    from domainbert.cli import help_cache

    if help_cache.is_bare_help(argv):
        help_cache.serve(argv, help_cache.build_lightning)
    help_cache.build_lightning(argv)


def _quick_exit() -> None:
    """Spare a process whose command is over (or that only printed a help text or a config) the collections at exit.

    With Lightning, transformers and their imports loaded, the interpreter's shutdown spends over a second
    collecting millions of objects: a sixth of ``fit --help``, and 1.4 s after every training stage of a
    pipeline. ``gc.freeze`` moves every object alive now to the permanent generation, which those collections
    skip; streams, ``atexit`` handlers (logging's among them) and objects that no cycle holds close as usual. By
    then every file a command writes is closed: results are written whole (``core.files``), and Lightning has
    finalized its loggers. Only at the end of a process, never in one that goes on (tests call :func:`main`).
    A plugin whose objects flush files only when collected (``__del__`` in a reference cycle) would lose that
    output: ``DOMAINBERT_QUICK_EXIT=0`` keeps the collections after a command.
    """
    import gc

    gc.freeze()
