"""A sweep trial without a fit: parsing the fit config seeds nothing, and how a trial's failures come out."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import torch
from lightning.pytorch.cli import LightningCLI

from domainbert.errors import DomainBertError
from domainbert.sweep import trial
from domainbert.sweep.trial import broadcast_params, parse_fit

FIT = Path(__file__).resolve().parents[1] / "fixtures" / "sweep_fit.yaml"


def test_lightning_cli_still_seeds_through_the_private_method_the_parse_overrides():
    """``parse_fit`` relies on ``LightningCLI.__init__`` seeding through ``self._set_seed()`` (no public switch)."""
    assert callable(getattr(LightningCLI, "_set_seed", None))
    assert "self._set_seed()" in inspect.getsource(LightningCLI.__init__)
    assert trial._ParseOnlyCLI._set_seed is not LightningCLI._set_seed


def test_parsing_a_fit_config_seeds_nothing_and_keeps_seed_everything_as_written():
    torch.manual_seed(1234)
    expected = torch.rand(3)
    torch.manual_seed(1234)
    _, cfg = parse_fit(["--config", str(FIT), "--seed_everything", "true"])
    assert torch.equal(torch.rand(3), expected)  # the global generator was not reseeded
    assert cfg["seed_everything"] is True  # not the random seed Lightning would have drawn
    _, cfg = parse_fit(["--config", str(FIT)])
    assert cfg["seed_everything"] == 0


def test_a_fit_config_that_does_not_parse_is_a_domainbert_error(tmp_path):
    with pytest.raises(DomainBertError, match="does not parse"):
        parse_fit(["--config", str(FIT), "--trainer.max_stepz", "3"])


def test_a_fit_that_exits_is_a_domainbert_error(monkeypatch):
    def exits(args, callbacks=()):
        raise SystemExit(2)

    monkeypatch.setattr(trial, "run_fit", exits)
    with pytest.raises(DomainBertError, match="exited with status 2"):
        trial.run_trial(None, ["--config", str(FIT)], "val/loss", maximize=False)


def test_broadcast_params_is_a_no_op_in_one_process():
    params = {"model.learning_rate": 3e-5, "model.hidden_dropout": 0.1}
    assert broadcast_params(params) is params
