"""torch's TypedStorage notice is dropped where domainbert loads int8 weights; a stage's card names no worker line."""

from __future__ import annotations

import sys
import warnings

import pytest
import torch

from domainbert.core.card import typed_command
from domainbert.core.quiet import quiet_typed_storage


def _typed_storage_notice() -> None:
    torch.storage._reset_warn_typed_storage_removal()  # torch says it once a process
    torch.storage._warn_typed_storage_removal()


def test_the_typed_storage_notice_is_dropped_inside_the_block_only(monkeypatch):
    monkeypatch.delenv("DOMAINBERT_LOG", raising=False)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with quiet_typed_storage():
            _typed_storage_notice()
            warnings.warn("another warning", UserWarning, stacklevel=1)
        assert [str(w.message) for w in seen] == ["another warning"]
        _typed_storage_notice()
        assert "TypedStorage is deprecated" in str(seen[-1].message)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["/x/site-packages/domainbert/pipeline/__main__.py", "--worker", "r.json", "--config", "c.yaml"], None),
        (["/x/bin/domainbert", "fit", "--config", "c.yaml"], "domainbert fit --config c.yaml"),
        (["/x/site-packages/domainbert/__main__.py", "fit", "--config", "c.yaml"], "domainbert fit --config c.yaml"),
        (["/x/bin/python", "-c", "x"], None),
    ],
)
def test_the_card_quotes_only_a_command_a_user_typed(monkeypatch, argv, expected):
    monkeypatch.setattr(sys, "argv", argv)
    assert typed_command() == expected
