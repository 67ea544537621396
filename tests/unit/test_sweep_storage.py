"""The study's storage: URLs, masked passwords, and the reopen after a lost race to create the schema."""

from __future__ import annotations

import pytest

from domainbert.errors import DomainBertError
from domainbert.sweep import storage
from domainbert.sweep.storage import SCHEMA_RACE_RETRIES, mask_url, open_storage, storage_url


def test_passwords_in_storage_urls_are_masked():
    assert mask_url("postgresql://bob:s3cret@db.example:5432/optuna") == "postgresql://bob:***@db.example:5432/optuna"
    assert mask_url("mysql+pymysql://bob:p@ss:w0rd@h/db") == "mysql+pymysql://bob:***@h/db"
    assert mask_url("postgresql://h/db?user=bob&password=s3cret") == "postgresql://h/db?user=bob&password=***"
    assert mask_url("sqlite:////tmp/study.db") == "sqlite:////tmp/study.db"
    with pytest.raises(DomainBertError) as err:
        open_storage("postgresql://bob:s3cret@127.0.0.1:1/optuna", 60, None, 1)
    assert "s3cret" not in str(err.value) and "bob:***@127.0.0.1" in str(err.value)


def test_storage_url_is_a_url_a_file_or_the_study_db_of_the_sweep_folder(tmp_path):
    assert storage_url("postgresql://h/db", tmp_path) == "postgresql://h/db"
    assert storage_url(str(tmp_path / "a" / "s.db"), tmp_path) == f"sqlite:///{tmp_path / 'a' / 's.db'}"
    assert storage_url(None, tmp_path / "out") == f"sqlite:///{tmp_path / 'out' / 'study.db'}"
    assert (tmp_path / "a").is_dir() and (tmp_path / "out").is_dir()


class _IntegrityError(Exception):
    """Stands for the error SQLAlchemy raises when another worker created the same table first."""


@pytest.fixture
def attempts(monkeypatch):
    """Make ``_rdb_storage`` fail with a schema race ``attempts["races"]`` times, then succeed; no sleeping."""
    state = {"races": 0, "calls": 0}

    def rdb(url, engine, heartbeat, grace, max_retry):
        state["calls"] += 1
        if state["calls"] <= state["races"]:
            raise _IntegrityError('duplicate key value violates unique constraint "alembic_version_pkc"')
        return ("storage", url, heartbeat, grace, max_retry)

    monkeypatch.setattr(storage, "_rdb_storage", rdb)
    monkeypatch.setattr(storage.time, "sleep", lambda s: None)
    return state


def test_a_lost_schema_race_is_retried(attempts):
    attempts["races"] = SCHEMA_RACE_RETRIES
    assert open_storage("postgresql+psycopg2://h/db", 7, None, 2) == ("storage", "postgresql+psycopg2://h/db", 7, 14, 2)
    assert attempts["calls"] == SCHEMA_RACE_RETRIES + 1


def test_a_schema_race_that_never_ends_is_an_error(attempts):
    attempts["races"] = SCHEMA_RACE_RETRIES + 1
    with pytest.raises(DomainBertError, match="cannot open the study storage"):
        open_storage("postgresql+psycopg2://bob:pw@h/db", 7, 9, 2)
    assert attempts["calls"] == SCHEMA_RACE_RETRIES + 1
