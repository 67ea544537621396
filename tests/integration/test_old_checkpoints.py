"""Checkpoints and configs saved by main before the package restructure still load and score the same.

The fixture (``tests/fixtures/old_main``) was written by main at 8af7684. Its configs name the class paths users'
saved runs name (``domainbert.modules.*``, ``domainbert.data.*``, ``domainbert.prediction.*``,
``domainbert.callbacks.*``, ``domainbert.modules.distill.*``); those whose modules are gone are read through
:mod:`domainbert.core.renames`. ``expected.json`` holds the validation loss that main computed from each checkpoint.
"""

from __future__ import annotations

import json

import pytest
import torch

from domainbert.cli.lightning_cli import cli_main
from tests.helpers import FIX

OLD = FIX / "old_main"


def _validate(kind: str, tmp_path, *extra: str) -> float:
    args = ["validate", "--config", str(OLD / kind / "config.yaml"), "--ckpt_path", str(OLD / kind / "model.ckpt")]
    cli = cli_main([*args, "--trainer.default_root_dir", str(tmp_path), "--trainer.logger", "false", *extra])
    return float(cli.trainer.callback_metrics["val/loss"])


@pytest.mark.parametrize(
    ("kind", "extra"),
    [
        ("cls", ()),
        ("mlm", ()),
        ("distill", ("--model.teacher", str(OLD / "teacher-hf"))),  # over the path the checkpoint saved
    ],
)
def test_old_checkpoint_validates_to_the_same_loss(kind, extra, tmp_path, monkeypatch):
    monkeypatch.chdir(FIX.parent.parent)
    expected = json.loads((OLD / "expected.json").read_text())[kind]
    assert _validate(kind, tmp_path, *extra) == pytest.approx(expected, rel=1e-5)


def test_old_checkpoint_weights_load_into_todays_module(monkeypatch):
    from domainbert.modules.classification import SequenceClassificationModule

    monkeypatch.chdir(FIX.parent.parent)
    ckpt = torch.load(OLD / "cls" / "model.ckpt", map_location="cpu", weights_only=True)
    module = SequenceClassificationModule.load_from_checkpoint(OLD / "cls" / "model.ckpt", weights_only=True)
    for name, value in module.state_dict().items():
        assert torch.equal(value, ckpt["state_dict"][name]), name


def test_an_old_distillation_checkpoint_loads_through_lightnings_loader(monkeypatch):
    from domainbert.distill.module import DistillationModule

    monkeypatch.chdir(FIX.parent.parent)
    ckpt = OLD / "distill" / "model.ckpt"
    with pytest.warns(FutureWarning, match="read as domainbert.distill.module.DistillationModule"):
        module = DistillationModule.load_from_checkpoint(ckpt, teacher=str(OLD / "teacher-hf"), weights_only=True)
    saved = torch.load(ckpt, map_location="cpu", weights_only=True)["state_dict"]
    for name, value in module.state_dict().items():
        if name in saved:
            assert torch.equal(value, saved[name]), name


def test_an_old_config_resolves_as_a_pipeline_stage_with_todays_paths(tmp_path, monkeypatch):
    import yaml

    from domainbert.cli.lightning_cli import resolve_config

    monkeypatch.chdir(FIX.parent.parent)
    saved = (OLD / "cls" / "config.yaml").read_text().splitlines(keepends=True)
    stage = tmp_path / "old_stage.yaml"  # a stage's config holds the fit options, not a run's ckpt_path
    stage.write_text("".join(line for line in saved if not line.startswith(("ckpt_path:", "weights_only:"))))
    with pytest.warns(FutureWarning, match="old_stage.yaml: domainbert.callbacks.EarlyStopping is deprecated"):
        text = resolve_config([str(stage)], where="stage 'old'").text()
    callbacks = [c["class_path"] for c in yaml.safe_load(text)["trainer"]["callbacks"]]
    assert callbacks[1:] == ["domainbert.core.prediction.PredictionWriter", "domainbert.core.callbacks.EarlyStopping"]
    assert "domainbert.callbacks." not in text and "domainbert.prediction." not in text
