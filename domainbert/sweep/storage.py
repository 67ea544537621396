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


#: ``scheme://user:password@``, the password running to the LAST ``@`` of the word: an unencoded ``@`` in a
#: password is masked whole (over-masking a path's ``@`` is harmless; leaking the rest of a password is not).
_CREDENTIALS = re.compile(r"([\w+.-]+://[^:/\s]*):[^\s]*@")

#: How SQLAlchemy splits a URL (``sqlalchemy.engine.url._parse_url``): the password stops at the FIRST ``@``,
#: so the rest of a password holding an unencoded ``@`` becomes the host (or the port): ``host`` is both here.
_SQLALCHEMY_URL = re.compile(r"[\w+]+://(?:(?P<user>[^:/]*)(?::(?P<password>[^@]*))?@)?(?P<host>[^/?]*)")


def mask_url(url: str) -> str:
    """``url``, or any text holding URLs (an error message), with every password replaced by ``***``."""
    text = _CREDENTIALS.sub(r"\1:***@", str(url))
    return re.sub(r"((?:password|passwd|pwd)=)[^&;\s]*", r"\1***", text, flags=re.IGNORECASE)


def check_url(url: str) -> None:
    """Raise if the password of ``url`` holds an unencoded ``@`` (its rest would become the host name or port).

    The message shows the URL masked, never the password, and how to write it.
    """
    m = _SQLALCHEMY_URL.match(url)
    if m and m.group("password") is not None and "@" in m.group("host"):
        raise DomainBertError(
            f"the study storage URL {mask_url(url)} cannot be read: its password holds an unencoded '@', so the "
            "rest of the password would be taken as the host name; percent-encode it ('@' as %40, ':' as %3A, "
            "'/' as %2F: urllib.parse.quote(password, safe=''))"
        )


def _secret(url: str) -> str | None:
    """The password of ``url`` as SQLAlchemy reads it (None without one)."""
    m = _SQLALCHEMY_URL.match(url)
    return m.group("password") if m else None


def redact(text: str, url: str) -> str:
    """``text`` (a driver's error) with the URLs' passwords masked, the password of ``url`` too, on one line."""
    secret = _secret(url)
    text = mask_url(str(text))
    if secret and len(secret) >= 3:  # a shorter one would mask every such letter of the message
        text = text.replace(secret, "***")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else ""


def storage_url(storage: str | None, out: Path) -> str:
    """The RDB URL: ``storage`` if it is one, an SQLite URL for a file path, else ``<out>/study.db``.

    Raises:
        DomainBertError: a URL whose password holds an unencoded ``@`` (the password is not shown).
    """
    if storage and "://" in storage:
        check_url(storage)
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
        DomainBertError: for a URL or server that cannot be opened, on one line with the password masked.
    """
    check_url(url)
    engine = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}
    if url.startswith("postgresql://") and importlib.util.find_spec("psycopg") is None:
        url = "postgresql+psycopg2://" + url[len("postgresql://") :]  # SQLAlchemy 2.1 defaults to psycopg 3
    retries = 0
    while True:
        try:
            return _rdb_storage(url, engine, heartbeat, grace or 2 * heartbeat, max_retry)
        except Exception as err:  # noqa: BLE001 - sqlalchemy raises many types for a bad URL or server
            if retries >= SCHEMA_RACE_RETRIES or not _schema_race(err):
                raise DomainBertError(
                    f"cannot open the study storage {mask_url(url)}: {redact(str(err), url)}"
                ) from err
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
