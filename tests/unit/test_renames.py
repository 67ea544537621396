"""The class paths 0.1.0 wrote are read as today's, in configs, on the command line and in saved hyper-parameters.

The modules that held them (``domainbert/callbacks.py``, ``prediction.py``, ``losses.py``, ``modules/distill.py``)
are gone: only the table of :mod:`domainbert.core.renames` reads their paths.
"""

from __future__ import annotations

import importlib
import importlib.util
import warnings

import lightning.pytorch as L
import pytest
import torch

from domainbert.core.renames import RENAMED, RenamingParser, renamed_hparams, renamed_text, renamed_values
from tests.helpers import FIX

OLD = FIX / "old_main"


def _resolve(path: str) -> type:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def test_every_new_path_is_a_class_and_no_old_module_is_left():
    for old, new in RENAMED.items():
        assert isinstance(_resolve(new), type), new
        assert importlib.util.find_spec(old.rpartition(".")[0]) is None, f"{old}: its module is back"


def test_a_config_text_gets_the_new_paths_and_a_warning_naming_each():
    text = (
        "trainer:\n  callbacks:\n  - class_path: domainbert.callbacks.EarlyStopping  # domainbert.prediction.x\n"
        "model:\n  class_path: domainbert.modules.distill.DistillationModule\n"
        "  other: my.domainbert.losses.HiddenStateLoss, domainbert.losses.HiddenStateLossV2\n"
    )
    with pytest.warns(FutureWarning) as caught:
        out = renamed_text(text, "old.yaml")
    assert "class_path: domainbert.core.callbacks.EarlyStopping  # domainbert.prediction.x\n" in out
    assert "class_path: domainbert.distill.module.DistillationModule\n" in out
    assert "my.domainbert.losses.HiddenStateLoss, domainbert.losses.HiddenStateLossV2" in out  # not whole paths
    assert [str(w.message) for w in caught] == [
        "old.yaml: domainbert.callbacks.EarlyStopping is deprecated, read as domainbert.core.callbacks.EarlyStopping",
        "old.yaml: domainbert.modules.distill.DistillationModule is deprecated, read as "
        "domainbert.distill.module.DistillationModule",
    ]


def test_saved_values_are_copied_only_where_they_name_an_old_path():
    weights = torch.ones(2)
    hparams = {
        "_class_path": "domainbert.modules.distill.DistillationModule",
        "class_weights": weights,
        "extra_losses": [{"class_path": "domainbert.losses.HardLabelLoss", "init_args": {"weight": 0.5}}],
        "label_names": ["a", "b"],
    }
    with pytest.warns(FutureWarning) as caught:
        changed = renamed_hparams(hparams, "x.ckpt")
    assert [str(w.message).rpartition(" ")[2] for w in caught] == [
        "domainbert.distill.module.DistillationModule",
        "domainbert.distill.losses.HardLabelLoss",
    ]
    assert changed == {
        "_class_path": "domainbert.distill.module.DistillationModule",
        "extra_losses": [{"class_path": "domainbert.distill.losses.HardLabelLoss", "init_args": {"weight": 0.5}}],
    }
    assert hparams["extra_losses"][0]["class_path"] == "domainbert.losses.HardLabelLoss"  # the input is untouched
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        same = {"a": [1, ("b", {"c": weights})]}
        assert renamed_values(same, "x") is same and renamed_hparams(same, "x") == {}


def _parser() -> RenamingParser:
    parser = RenamingParser(exit_on_error=False)
    parser.add_argument("--config", action="config")
    parser.add_subclass_arguments(L.Callback, "callback", required=False)
    return parser


def test_the_cli_parser_reads_old_paths_from_a_file_the_command_line_and_an_object(tmp_path):
    config = tmp_path / "old.yaml"
    config.write_text("callback:\n  class_path: domainbert.callbacks.EarlyStopping\n  init_args: {monitor: val/f1}\n")
    with pytest.warns(FutureWarning, match="^old.yaml: domainbert.callbacks.EarlyStopping is deprecated"):
        cfg = _parser().parse_args(["--config", str(config)])
    assert cfg.callback.class_path == "domainbert.core.callbacks.EarlyStopping"
    assert cfg.callback.init_args.monitor == "val/f1"
    with pytest.warns(FutureWarning, match="the command line: domainbert.prediction.PredictionWriter"):
        cfg = _parser().parse_args(["--callback=domainbert.prediction.PredictionWriter"])
    assert cfg.callback.class_path == "domainbert.core.prediction.PredictionWriter"
    with pytest.warns(FutureWarning, match="a saved config or checkpoint: domainbert.callbacks.TrainingGuard"):
        cfg = _parser().parse_object({"callback": {"class_path": "domainbert.callbacks.TrainingGuard"}})
    assert cfg.callback.class_path == "domainbert.core.callbacks.TrainingGuard"


@pytest.mark.parametrize("kind", ["cls", "mlm", "distill"])
def test_released_checkpoints_hold_plain_data_so_no_pickled_class_needs_renaming(kind):
    ckpt = torch.load(OLD / kind / "model.ckpt", map_location="cpu", weights_only=True)  # refuses any class
    assert ckpt["hyper_parameters"]["_class_path"].startswith("domainbert.modules.")
