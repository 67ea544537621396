"""A sweep storage URL's password never shows: not after an unencoded ``@``, not in a driver's error."""

from __future__ import annotations

import pytest

from domainbert.errors import DomainBertError
from domainbert.sweep import storage
from domainbert.sweep.storage import mask_url, open_storage, storage_url


@pytest.mark.parametrize(
    "url,masked",
    [
        ("postgresql://bob:s3cr@t@db.example:5432/optuna", "postgresql://bob:***@db.example:5432/optuna"),
        ("postgresql://bob:a/b@c@h/db", "postgresql://bob:***@h/db"),
        ("postgresql://me@corp:s3cret@h/db", "postgresql://me@corp:***@h/db"),
        ("sqlite:////tmp/a@b/study.db", "sqlite:////tmp/a@b/study.db"),
        ("postgresql://me@h:5432/db", "postgresql://me@h:5432/db"),
    ],
)
def test_mask_url_hides_the_whole_password_and_nothing_else(url, masked):
    assert mask_url(url) == masked


def test_urls_inside_a_message_are_masked_too():
    text = "could not connect to 'postgresql://bob:s3cr@t@h/db' (timeout)"
    assert mask_url(text) == "could not connect to 'postgresql://bob:***@h/db' (timeout)"


@pytest.mark.faults(bad_inputs=1)
@pytest.mark.parametrize("url", ["postgresql://bob:s3cr@tpw@127.0.0.1:1/optuna", "mysql://bob:pa@ss:w0rd@h:3306/db"])
def test_an_unencoded_at_in_the_password_is_refused_without_echoing_it(tmp_path, monkeypatch, url):
    def rdb(*args, **kwargs):
        raise AssertionError("the storage was opened")

    monkeypatch.setattr(storage, "_rdb_storage", rdb)
    for call in (lambda: storage_url(url, tmp_path), lambda: open_storage(url, 60, None, 1)):
        with pytest.raises(DomainBertError) as err:
            call()
        message = str(err.value)
        assert "unencoded '@'" in message and "%40" in message and "\n" not in message
        assert "tpw" not in message and "s3cr" not in message and "ss:w0rd" not in message and "pa@" not in message


def test_a_drivers_error_is_one_line_without_the_password(monkeypatch):
    def rdb(url, *args):
        raise RuntimeError(f'connection to "h" failed for password hunter2x\n\n(Background: {url})')

    monkeypatch.setattr(storage, "_rdb_storage", rdb)
    with pytest.raises(DomainBertError) as err:
        open_storage("postgresql+psycopg2://bob:hunter2x@h/db", 60, None, 1)
    message = str(err.value)
    assert "hunter2x" not in message and "\n" not in message
    assert message.startswith("cannot open the study storage postgresql+psycopg2://bob:***@h/db: connection to")
