"""Where a study lives: the storage URL, its password masked in messages, and the ``RDBStorage`` with heartbeats.

The default is the SQLite file ``<out>/study.db``; a PostgreSQL/MySQL URL takes the same code path, so
heartbeats and the retry of a dead worker's trial behave the same on one machine and on many.
"""

from __future__ import annotations

import importlib.util
import random
import re
import time
import warnings
from pathlib import Path

import optuna

from domainbert.errors import DomainBertError

#: The environment variable that carries the storage URL (to spawned workers, and optionally from the user).
STORAGE_ENV = "DOMAINBERT_SWEEP_STORAGE"

#: How often :func:`open_storage` reopens a fresh database whose schema another worker is creating.
SCHEMA_RACE_RETRIES = 5


def mask_url(url: str) -> str:
    """``url`` with any password replaced by ``***``."""
    url = re.sub(r"^([\w+.-]+://[^:@/]*):.*@", r"\1:***@", url)  # up to the last '@': over-mask, never leak
    return re.sub(r"((?:password|passwd|pwd)=)[^&;\s]*", r"\1***", url, flags=re.IGNORECASE)


def storage_url(storage: str | None, out: Path) -> str:
    """The RDB URL: ``storage`` if it is one, an SQLite URL for a file path, else ``<out>/study.db``."""
    if storage and "://" in storage:
        return storage
    path = Path(storage) if storage else out / "study.db"
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path.resolve()}"


def open_storage(url: str, heartbeat: int, grace: int | None, max_retry: int) -> optuna.storages.RDBStorage:
    """An ``RDBStorage`` with heartbeats; a trial whose worker died goes back in the queue.

    Args:
        url: the RDB URL (see :func:`storage_url`).
        heartbeat: seconds between a running trial's heartbeats.
        grace: seconds without a heartbeat before a trial counts as dead (default ``2 * heartbeat``).
        max_retry: how often the trial of a dead worker is retried.

    Raises:
        DomainBertError: for a URL or server that cannot be opened (with the password masked).
    """
    engine = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}
    if url.startswith("postgresql://") and importlib.util.find_spec("psycopg") is None:
        url = "postgresql+psycopg2://" + url[len("postgresql://") :]  # SQLAlchemy 2.1 defaults to psycopg 3
    retries = 0
    while True:
        try:
            return _rdb_storage(url, engine, heartbeat, grace or 2 * heartbeat, max_retry)
        except Exception as err:  # noqa: BLE001 - sqlalchemy raises many types for a bad URL or server
            if retries >= SCHEMA_RACE_RETRIES or not _schema_race(err):
                raise DomainBertError(f"cannot open the study storage {mask_url(url)}: {mask_url(str(err))}") from err
        # another worker is creating Optuna's tables in this fresh database: wait, then reopen
        retries += 1
        time.sleep(random.uniform(0.2, 1.0))


def _rdb_storage(url: str, engine: dict, heartbeat: int, grace: int, max_retry: int) -> optuna.storages.RDBStorage:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.storages.RDBStorage(
            url,
            engine_kwargs=engine,
            heartbeat_interval=heartbeat,
            grace_period=grace,
            heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=max_retry),
        )


def _schema_race(err: BaseException) -> bool:
    """Whether ``err`` is a lost race to create Optuna's schema (a duplicate table, type or version row)."""
    text = f"{type(err).__name__}: {err}"
    return any(s in text for s in ("UniqueViolation", "IntegrityError", "already exists", "DuplicateTable"))
