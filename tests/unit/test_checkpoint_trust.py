"""No code from a checkpoint: its saved hyper-parameters never turn ``trust_remote_code`` on, and its ``losses`` (or
0.1.0's ``extra_losses``) are rebuilt only from ``LossTerm`` subclasses.

Each crafted checkpoint names a model folder whose ``config.json`` has an ``auto_map`` to its own ``.py``, which
creates a marker file when imported (``examples/redteam/fixtures.py``); the marker must never appear.
"""

from __future__ import annotations

from pathlib import Path

import lightning
import pytest
import torch

from domainbert.core.checkpoint_io import check_saved_trust, saved_hparams
from domainbert.distill.module import DistillationModule
from domainbert.errors import DomainBertError
from domainbert.modules.contrastive import ContrastiveModule
from domainbert.modules.mlm import MaskedLMModule
from domainbert.modules.tsdae import TsdaeModule
from tests.helpers.planted import RECORDER


@pytest.fixture(scope="module")
def teacher(tmp_path_factory) -> Path:
    from tests.helpers.distill_tiny import make_teacher

    return make_teacher("bert", tmp_path_factory.mktemp("teacher"), layers=2)


def crafted(path: Path, hparams: dict) -> Path:
    """A Lightning checkpoint with no weights and these saved hyper-parameters."""
    torch.save(
        {"state_dict": {}, "hyper_parameters": hparams, "pytorch-lightning_version": lightning.__version__}, path
    )
    return path


def refused(load, marker: Path) -> str:
    """The one-line error ``load`` raises; whatever it raises, no code from the planted folder ran."""
    with pytest.raises(Exception) as err:  # noqa: PT011 - the marker is checked first, then the type
        load()
    assert not marker.exists(), "code from the model folder ran"
    assert isinstance(err.value, DomainBertError) and "\n" not in str(err.value), err.value
    return str(err.value)


@pytest.mark.parametrize("cls", [MaskedLMModule, ContrastiveModule, TsdaeModule])
def test_trust_remote_code_saved_in_a_checkpoint_is_refused(cls, planted, marker, tmp_path):
    ckpt = crafted(tmp_path / "crafted.ckpt", {"init_from": str(planted), "trust_remote_code": True})
    line = refused(lambda: cls.load_from_checkpoint(ckpt), marker)
    assert str(ckpt) in line and "trust_remote_code" in line and "yourself" in line


@pytest.mark.parametrize("cls", [MaskedLMModule, ContrastiveModule, TsdaeModule])
def test_a_planted_folder_named_by_a_checkpoint_without_trust_is_refused(cls, planted, marker, tmp_path):
    ckpt = crafted(tmp_path / "crafted.ckpt", {"init_from": str(planted), "trust_remote_code": False})
    line = refused(lambda: cls.load_from_checkpoint(ckpt), marker)
    assert "auto_map" in line and "never read from a checkpoint" in line


def test_an_hparams_file_cannot_turn_trust_on_either(planted, marker, tmp_path):
    ckpt = crafted(tmp_path / "plain.ckpt", {"init_from": str(planted)})
    hparams = tmp_path / "hparams.yaml"
    hparams.write_text(f"init_from: {planted}\ntrust_remote_code: true\n")
    line = refused(lambda: MaskedLMModule.load_from_checkpoint(ckpt, hparams_file=hparams), marker)
    assert str(hparams) in line


def test_an_open_file_is_checked_and_handed_on(planted, marker, tmp_path):
    ckpt = crafted(tmp_path / "crafted.ckpt", {"init_from": str(planted), "trust_remote_code": True})
    with open(ckpt, "rb") as fh:
        refused(lambda: MaskedLMModule.load_from_checkpoint(fh), marker)


@pytest.mark.parametrize(
    ("class_path", "trust"),
    [
        ("domainbert.modules.mlm.MaskedLMModule", True),
        ("domainbert.modules.contrastive.ContrastiveModule", True),
        ("domainbert.modules.mlm.MaskedLMModule", False),
        ("domainbert.modules.contrastive.ContrastiveModule", False),
        (RECORDER, False),
    ],
)
@pytest.mark.parametrize(("key", "index"), [("losses", 0), ("extra_losses", 2)])  # 0.1.0's: after alpha, beta
@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_a_distillation_checkpoint_builds_no_class_but_a_loss_term(
    class_path, trust, key, index, teacher, planted, marker, tmp_path
):
    entry = {"class_path": class_path, "init_args": {"init_from": str(planted), "trust_remote_code": trust}}
    hparams = {"teacher": str(teacher), "student_layers": 1, key: [entry]}
    ckpt = crafted(tmp_path / "crafted.ckpt", hparams)
    line = refused(lambda: DistillationModule.load_from_checkpoint(ckpt), marker)
    if trust:
        assert f"{key}[0].init_args.trust_remote_code" in line
    else:
        assert (
            f"model.losses[{index}]: {class_path} is not a class derived from domainbert.distill.losses.LossTerm"
            in line
        )


@pytest.mark.parametrize("key", ["losses", "extra_losses"])
@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_a_saved_loss_term_still_rebuilds(key, teacher, tmp_path):
    term = {"class_path": "domainbert.distill.losses.HardLabelLoss", "init_args": {"weight": 0.25, "name": "gold"}}
    ckpt = crafted(tmp_path / "ok.ckpt", {"teacher": str(teacher), "student_layers": 1, key: [term]})
    module = DistillationModule.load_from_checkpoint(ckpt, strict=False)
    assert module.loss_weights["gold"] == 0.25
    assert set(module.loss_weights) == ({"gold"} if key == "losses" else {"kl", "hard", "gold"})


def test_the_users_own_trust_is_theirs_and_a_nested_one_never_passes():
    check_saved_trust({"trust_remote_code": False, "lora": {"r": 8}}, "x.ckpt")
    check_saved_trust({"trust_remote_code": True}, "x.ckpt", given=True)
    with pytest.raises(DomainBertError, match=r"^x.ckpt: its saved hyper-parameters set trust_remote_code: true"):
        check_saved_trust({"trust_remote_code": True}, "x.ckpt")
    nested = {"extra_losses": [{"init_args": {"trust_remote_code": 1}}]}
    with pytest.raises(DomainBertError, match=r"set extra_losses\[0\].init_args.trust_remote_code: .*never rebuilt"):
        check_saved_trust(nested, "x.ckpt", given=True)


def test_a_modules_own_checkpoint_never_saves_trust_remote_code(tiny_bert):
    module = MaskedLMModule(str(tiny_bert), trust_remote_code=False)
    assert "trust_remote_code" not in module.hparams


def test_saved_hparams_reads_plain_data_only(tmp_path):
    from examples.redteam.fixtures import plant_checkpoint

    marker = tmp_path / "unpickled"
    path = plant_checkpoint(tmp_path / "payload.ckpt", marker)
    with pytest.raises(DomainBertError, match="not readable as a Lightning checkpoint of plain data"):
        saved_hparams(path)
    assert not marker.exists()
    assert saved_hparams(crafted(tmp_path / "none.ckpt", {})) == {}
