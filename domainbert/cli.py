"""The ``domainbert`` command: LightningCLI for fit/validate/test/predict, plus the tool subcommands.

``domainbert fit --config configs/<stage>/<model>_<data>.yaml`` trains any LightningModule with any
LightningDataModule given by ``class_path``. The other subcommands (``vocab``, ``sweep``, ``export``,
``pipeline``, ``datamodules``) live in their own modules and are dispatched from :func:`main`.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from typing import Any

from domainbert.errors import DomainBertError

#: Subcommands outside LightningCLI, and the module whose ``main(argv)`` runs each.
TOOLS = {
    "vocab": "domainbert.vocab",
    "sweep": "domainbert.sweep",
    "export": "domainbert.deploy",
    "pipeline": "domainbert.pipeline",
    "datamodules": "domainbert.data.registry",
}

#: Names served lazily from :mod:`domainbert.lightning_cli`, so that the tool subcommands and ``--help`` start
#: without importing Lightning.
_LAZY = ("DomainBertCLI", "cli_main", "TRAINER_DEFAULTS")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from domainbert import lightning_cli

        return getattr(lightning_cli, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _user_error(err: BaseException) -> DomainBertError | None:
    """Find a DomainBertError in an exception's chain (jsonargparse and Lightning may wrap it)."""
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, DomainBertError):
            return err
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return None


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``domainbert`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=os.environ.get("DOMAINBERT_LOG", "INFO"), format="%(levelname)s %(name)s: %(message)s")
    for noisy in ("httpx", "urllib3", "filelock", "torchao"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        if argv and argv[0] in TOOLS:
            importlib.import_module(TOOLS[argv[0]]).main(argv[1:])
        else:
            from domainbert.lightning_cli import cli_main

            cli_main(argv)
    except Exception as err:  # noqa: BLE001 - user errors are printed cleanly, the rest re-raised
        user = _user_error(err)
        if user is None:
            raise
        print(f"domainbert: error: {user}", file=sys.stderr)
        sys.exit(2)
