"""Reading the user's own files never talks to the network."""

from __future__ import annotations

import datasets
import datasets.load
import pytest

from domainbert.data import readers


class _NoSession:
    """Stands in for ``datasets``' HTTP session: any request fails the test."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def head(self, *args, **kwargs):
        self.calls.append(args)
        raise AssertionError(f"an HTTP request while reading a local file: {args}")


@pytest.mark.parametrize("name,body", [("rows.jsonl", '{"text": "a b", "label": "x"}\n'), ("corpus.txt", "a b\nc d\n")])
def test_reading_a_local_file_sends_no_download_count(name, body, tmp_path, monkeypatch):
    session = _NoSession()
    monkeypatch.setattr(datasets.load, "get_session", lambda: session)
    monkeypatch.delenv("HF_UPDATE_DOWNLOAD_COUNTS", raising=False)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_UPDATE_DOWNLOAD_COUNTS", True)
    (tmp_path / name).write_text(body, encoding="utf-8")
    ds = readers.read(str(tmp_path / name), columns=["text"], cache_dir=str(tmp_path / "cache"))
    assert ds["text"][0] == "a b" and session.calls == []
    assert datasets.config.HF_UPDATE_DOWNLOAD_COUNTS is True  # the library's setting is restored after the read
