"""Pins of every private library API in ``domainbert.core.compat``: each fails when its library changes the private
piece, on freshly made objects, without a fit."""

from __future__ import annotations

import argparse
import inspect
import random
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from domainbert.core import compat

# -- lightning: LightningModule -------------------------------------------------------------------------------------


def test_attached_trainer_is_none_where_lightning_raises_and_the_trainer_once_attached():
    import lightning.pytorch as L

    module = L.LightningModule()
    with pytest.raises(RuntimeError, match="not attached"):
        module.trainer  # noqa: B018 - the public property raises: the reason for the helper
    assert compat.attached_trainer(module) is None
    assert compat.attached_trainer(SimpleNamespace()) is None  # not a LightningModule at all
    trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, accelerator="cpu")
    module.trainer = trainer  # the public setter writes the private attribute the helper reads
    assert compat.attached_trainer(module) is trainer


def test_a_module_finds_its_trainers_datamodule_and_none_without_one():
    from domainbert.modules.base import HFModule

    module = HFModule()
    assert module.attached_datamodule() is None
    datamodule = object()
    module.trainer = SimpleNamespace(datamodule=datamodule)
    assert module.attached_datamodule() is datamodule


# -- lightning: LightningCLI ----------------------------------------------------------------------------------------


class _Built(Exception):
    def __init__(self, cli):
        super().__init__("built")
        self.cli = cli


def test_only_subcommands_builds_one_parser_and_the_class_keeps_all_four():
    from lightning.pytorch.cli import LightningCLI
    from lightning.pytorch.demos.boring_classes import BoringDataModule, BoringModel

    every = LightningCLI.subcommands()

    class Stop(LightningCLI):
        def __init__(self, **kwargs):
            compat.only_subcommands(self, {"validate": every["validate"]})
            super().__init__(BoringModel, BoringDataModule, **kwargs)

        def parse_arguments(self, parser, args):
            raise _Built(self)

    with pytest.raises(_Built) as built:
        Stop(args=["validate"])
    assert set(compat.subcommand_parsers(built.value.cli)) == {"validate"}
    assert LightningCLI.subcommands() == every and set(every) == {"fit", "validate", "test", "predict"}
    assert compat.subcommand_parsers(SimpleNamespace()) == {}


def test_lightning_cli_seeds_through_the_hook_skip_seeding_replaces(monkeypatch):
    from lightning.pytorch.cli import LightningCLI
    from lightning.pytorch.demos.boring_classes import BoringDataModule, BoringModel

    class ParseOnly(LightningCLI):
        def before_instantiate_classes(self):
            pass

        def instantiate_classes(self):
            pass

    class NoSeed(compat.SkipSeeding, ParseOnly):
        pass

    monkeypatch.delenv("PL_GLOBAL_SEED", raising=False)  # seed_everything sets it; restored after the test
    monkeypatch.delenv("PL_SEED_WORKERS", raising=False)
    saved = random.getstate(), torch.get_rng_state()
    try:
        torch.manual_seed(7)
        ParseOnly(BoringModel, BoringDataModule, args=["--seed_everything", "123"], run=False)
        assert torch.initial_seed() == 123  # Lightning still seeds in __init__, through _set_seed
        torch.manual_seed(7)
        cli = NoSeed(BoringModel, BoringDataModule, args=["--seed_everything", "true"], run=False)
        assert torch.initial_seed() == 7 and cli.config["seed_everything"] is True
    finally:
        random.setstate(saved[0])
        torch.set_rng_state(saved[1])


# -- lightning: CSVLogger and its writer ----------------------------------------------------------------------------


def test_set_csv_writer_gives_a_fresh_logger_its_writer_once(tmp_path):
    from lightning.pytorch.loggers import CSVLogger
    from lightning.pytorch.loggers.csv_logs import ExperimentWriter

    logger = CSVLogger(save_dir=str(tmp_path), name="run", version=0)
    mine = ExperimentWriter(log_dir=logger.log_dir)
    compat.set_csv_writer(logger, lambda: mine)
    assert logger.experiment is mine
    compat.set_csv_writer(logger, lambda: ExperimentWriter(log_dir=logger.log_dir))
    assert logger.experiment is mine  # a logger with a writer keeps it


def _metrics_file(folder: Path) -> Path:
    folder.mkdir(parents=True)
    path = folder / "metrics.csv"
    path.write_text("step,train/loss\n0,2.5\n", encoding="utf-8")
    return path


def test_lightnings_writer_deletes_metrics_and_append_to_metrics_file_keeps_them(tmp_path):
    from lightning.fabric.loggers.csv_logs import _ExperimentWriter
    from lightning.pytorch.loggers.csv_logs import ExperimentWriter

    assert "self._check_log_dir_exists()" in inspect.getsource(_ExperimentWriter.__init__)
    plain = _metrics_file(tmp_path / "plain")
    with pytest.warns(UserWarning, match="will be deleted"):
        ExperimentWriter(log_dir=str(plain.parent))
    assert not plain.exists()  # the library still deletes: the mixin is still needed

    class Appending(compat.AppendToMetricsFile, ExperimentWriter):
        pass

    kept = _metrics_file(tmp_path / "kept")
    writer = Appending(log_dir=str(kept.parent))
    assert writer.metrics_keys == ["step", "train/loss"]
    writer.log_metrics({"train/loss": 1.5}, step=1)
    writer.save()
    assert kept.read_text(encoding="utf-8").splitlines() == ["step,train/loss", "0,2.5", "1,1.5"]


def test_the_rich_bar_asks_the_hook_train_description_answers():
    from lightning.pytorch.callbacks import RichProgressBar

    assert "self._get_train_description(" in inspect.getsource(RichProgressBar)

    class Bar(compat.TrainDescription, RichProgressBar):
        def train_description(self, current_epoch: int) -> str:
            return f"round {current_epoch}"

    assert Bar()._get_train_description(3) == "round 3"


# -- argparse -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [argparse.ArgumentParser, "jsonargparse"])
def test_parser_actions_are_the_parsers_own_and_their_help_shows(make):
    if make == "jsonargparse":
        from jsonargparse import ArgumentParser as make
    parser = make(prog="x")
    parser.add_argument("--top_k", type=int, default=5, help="old")
    (action,) = [a for a in compat.parser_actions(parser) if a.dest == "top_k"]
    action.help = "how many words to keep"
    assert "how many words to keep" in parser.format_help()


# -- optuna ---------------------------------------------------------------------------------------------------------


def test_study_storage_and_trial_id_reach_the_trial_by_its_storage_id():
    import optuna
    from optuna.trial import TrialState

    storage = optuna.storages.InMemoryStorage()
    optuna.create_study(storage=storage, study_name="first").ask()
    study = optuna.create_study(storage=storage, study_name="second")
    running = study.ask()
    assert compat.study_storage(study) is storage
    assert running.number == 0 and compat.trial_id(running) == 1  # the storage's id, not the study's number
    frozen = study.get_trials(deepcopy=False)[0]
    assert compat.trial_id(frozen) == compat.trial_id(running)
    assert compat.study_storage(study).set_trial_state_values(compat.trial_id(frozen), state=TrialState.FAIL)
    assert study.trials[0].state == TrialState.FAIL


# -- datasets -------------------------------------------------------------------------------------------------------


def test_dataset_fingerprint_is_the_one_map_names_its_result_by():
    import datasets

    ds = datasets.Dataset.from_dict({"text": ["a", "b"]})
    assert isinstance(compat.dataset_fingerprint(ds), str) and compat.dataset_fingerprint(ds)
    mapped = ds.map(lambda b: b, batched=True, new_fingerprint="0123abcd")
    assert compat.dataset_fingerprint(mapped) == "0123abcd"


# -- transformers ---------------------------------------------------------------------------------------------------


def test_set_backend_tokenizer_replaces_the_rust_backend_in_place():
    from tests.helpers.tiny import make_tokenizer

    tok, other = make_tokenizer("bert"), make_tokenizer("bert")
    assert vars(tok)["_tokenizer"] is tok.backend_tokenizer  # the read-only property reads this attribute
    other.add_tokens(["zzqword"])
    compat.set_backend_tokenizer(tok, other.backend_tokenizer)
    assert tok.backend_tokenizer is other.backend_tokenizer
    assert tok("zzqword")["input_ids"] == other("zzqword")["input_ids"]
    assert "zzqword" in tok.get_vocab()
