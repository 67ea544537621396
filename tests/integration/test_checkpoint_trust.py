"""No code from a checkpoint through the command line: ``fit/validate/test/predict --ckpt_path``, a teacher given as a
checkpoint, ``export`` of a checkpoint.

Each crafted checkpoint names a model folder whose ``config.json`` has an ``auto_map`` to its own ``.py``, which
creates a marker file when imported (``examples/redteam/fixtures.py``): the command stops on one line and the marker
never appears. The same through ``load_from_checkpoint`` is in ``tests/unit/test_checkpoint_trust.py``.
"""

from __future__ import annotations

from pathlib import Path

import lightning
import pytest
import torch
import yaml

from domainbert.cli import main
from domainbert.cli.short_names import MODELS as SHORT_NAMES
from examples.redteam.fixtures import plant_checkpoint
from tests.helpers import ROOT, bad_input, faults_summary, tiny_mlm_args
from tests.helpers.planted import RECORDER

TINY_DISTILL = str(ROOT / "configs/distill/tiny_debug.yaml")


@pytest.fixture(scope="module")
def teacher(tmp_path_factory) -> Path:
    """A tiny 2-layer classifier labelled for the fixture task (api, graphics, network)."""
    from tests.helpers.distill_tiny import labelled_teacher

    return labelled_teacher(tmp_path_factory.mktemp("teacher"), layers=2)


def crafted(path: Path, hparams: dict) -> Path:
    """A Lightning checkpoint with no weights and these saved hyper-parameters."""
    version = {"pytorch-lightning_version": lightning.__version__}
    torch.save({"state_dict": {}, "hyper_parameters": hparams, **version}, path)
    return path


def refused(argv: list[str], marker: Path, capsys) -> str:
    """The one ``domainbert: error:`` line of ``domainbert <argv>``; no code from the planted folder ran."""
    with pytest.raises(SystemExit) as done:
        main(argv)
    faults_summary.record("code_executed", int(marker.exists()))
    assert not marker.exists(), "code from the model folder ran"
    assert done.value.code == 2
    return faults_summary.check_one_line(capsys.readouterr().err)


@bad_input
@pytest.mark.parametrize("sub", ["fit", "validate", "test", "predict"])
def test_trust_remote_code_saved_in_an_mlm_checkpoint_is_refused(sub, planted, marker, tiny_bert, corpus_file,
                                                                 tmp_path, capsys):  # fmt: skip
    hparams = {"_class_path": "domainbert.modules.mlm.MaskedLMModule", "init_from": str(planted)}
    ckpt = crafted(tmp_path / "crafted.ckpt", hparams | {"trust_remote_code": True})
    argv = [*tiny_mlm_args(sub, tiny_bert, corpus_file, tmp_path / "runs"), "--ckpt_path", str(ckpt)]
    line = refused(argv, marker, capsys)
    assert f"--ckpt_path {ckpt}: its saved hyper-parameters set trust_remote_code: true" in line
    assert "--model.trust_remote_code true" in line


@bad_input
@pytest.mark.parametrize("model", ["contrastive", "tsdae"])
def test_trust_remote_code_saved_in_a_pretraining_checkpoint_is_refused(model, planted, marker, tiny_bert,
                                                                        corpus_file, tmp_path, capsys):  # fmt: skip
    config = tmp_path / f"{model}.yaml"
    data = {"class_path": "domainbert.data.corpus.CorpusDataModule", "init_args": {"train": str(corpus_file)}}
    config.write_text(yaml.safe_dump({"model": {"init_args": {"init_from": str(tiny_bert)}}, "data": data}))
    hparams = {"_class_path": SHORT_NAMES[model], "init_from": str(planted), "trust_remote_code": True}
    ckpt = crafted(tmp_path / "crafted.ckpt", hparams)
    argv = ["validate", "--model", model, "--config", str(config), "--ckpt_path", str(ckpt)]
    line = refused([*argv, "--trainer.default_root_dir", str(tmp_path / "runs")], marker, capsys)
    assert "its saved hyper-parameters set trust_remote_code: true" in line


@bad_input
@pytest.mark.parametrize(
    ("class_path", "trust", "expected"),
    [
        ("domainbert.modules.mlm.MaskedLMModule", True, "set extra_losses[0].init_args.trust_remote_code: true"),
        ("domainbert.modules.mlm.MaskedLMModule", False, "MaskedLMModule is not a class derived from"),
        ("domainbert.modules.contrastive.ContrastiveModule", False, "ContrastiveModule is not a class derived from"),
        (RECORDER, False, "Recorder is not a class derived from domainbert.distill.losses.LossTerm"),
    ],
)
def test_a_distillation_checkpoint_rebuilds_no_class_but_a_loss_term(
    class_path, trust, expected, teacher, planted, marker, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(ROOT)
    entry = {"class_path": class_path, "init_args": {"init_from": str(planted), "trust_remote_code": trust}}
    hparams = {"_class_path": "domainbert.distill.module.DistillationModule", "teacher": str(teacher)}
    hparams |= {"student_layers": 1, "extra_losses": [entry]}
    ckpt = crafted(tmp_path / "crafted.ckpt", hparams)
    argv = ["validate", "--config", TINY_DISTILL, "--model.teacher", str(teacher), "--ckpt_path", str(ckpt)]
    line = refused([*argv, "--trainer.default_root_dir", str(tmp_path / "runs")], marker, capsys)
    assert expected in line


@bad_input
def test_a_teacher_given_as_a_checkpoint_is_refused_unread(tmp_path, marker, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    ckpt = plant_checkpoint(tmp_path / "teacher.ckpt", marker)  # unpickling it creates the marker
    argv = ["fit", "--config", TINY_DISTILL, "--model.teacher", str(ckpt), "--trainer.max_steps", "1"]
    line = refused([*argv, "--trainer.default_root_dir", str(tmp_path / "runs")], marker, capsys)
    assert str(ckpt) in line and "expected a Hugging Face model folder" in line


@bad_input
def test_export_of_a_checkpoint_is_refused_unread(tmp_path, marker, capsys):
    ckpt = plant_checkpoint(tmp_path / "model.ckpt", marker)
    line = refused(["export", "--model", str(ckpt), "--out", str(tmp_path / "out")], marker, capsys)
    assert str(ckpt) in line
