"""The CLI's help, smoke runs of the shipped configs, any logger with the run folder and its CSV log, quiet output."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
from lightning.pytorch.loggers.logger import Logger

from domainbert.cli import COMMANDS, main

ROOT = Path(__file__).resolve().parents[2]
TINY = str(ROOT / "configs/pretrain/tiny_debug.yaml")
CLS = str(ROOT / "configs/finetune/tiny_classification.yaml")


def _fit(config, tiny_bert, root, *extra, corpus=None):
    data = ["--data.train", str(corpus)] if corpus else []
    return [
        "fit",
        "--config",
        config,
        "--model.init_from",
        str(tiny_bert),
        *data,
        "--trainer.default_root_dir",
        str(root),
        *extra,
    ]


# -- help -----------------------------------------------------------------------------------------------------------
def test_help_lists_every_subcommand_without_importing_lightning_or_transformers():
    code = (
        "import sys\nfrom domainbert.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit as e:\n"
        "    assert e.code == 0, e.code\n"
        "print('IMPORTED', sorted({m.split('.')[0] for m in sys.modules} & {'lightning', 'transformers'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    expected = {"fit", "validate", "test", "predict", "sweep", "pipeline", "export", "vocab", "datamodules"}
    assert expected <= set(COMMANDS)
    for command in COMMANDS:
        assert re.search(rf"^  {command} +\S", out, re.M), command
    assert "IMPORTED []" in out
    assert "--n-" not in out and "--top-k" not in out  # one flag style: underscores


# -- smoke runs ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("extra", [[], ["--data.val", "null"]], ids=["max_steps2", "no_val"])
def test_smoke_run_with_early_stopping_finishes(tiny_bert, tmp_path, monkeypatch, caplog, extra):
    monkeypatch.chdir(ROOT)  # the config's fixture paths are relative to the project
    main(_fit(CLS, tiny_bert, tmp_path, "--trainer.max_steps", "2", *extra))
    assert (tmp_path / "tiny_classification" / "version_0" / "hf" / "model.safetensors").exists()
    warned = [r for r in caplog.records if r.name == "domainbert.core.callbacks" and "EarlyStopping" in r.getMessage()]
    assert len(warned) == 1


# -- loggers ----------------------------------------------------------------------------------------------------------
class MemoryLogger(Logger):
    """A logger with no run folder of its own: records what it is given."""

    def __init__(self, save_dir: str | None = None, name: str = "default") -> None:
        super().__init__()
        self._save_dir, self._name, self.metrics = save_dir, name, []

    @property
    def name(self):
        return self._name

    @property
    def version(self):
        return 0

    @property
    def save_dir(self):
        return self._save_dir

    def log_hyperparams(self, params, *args, **kwargs):
        pass

    def log_metrics(self, metrics, step=None):
        self.metrics.append(dict(metrics))


def test_any_logger_keeps_the_run_folder_and_metrics_csv(tiny_bert, tmp_path, monkeypatch):
    from domainbert.cli.lightning_cli import cli_main
    from domainbert.core.runs import resolve_alias

    monkeypatch.chdir(ROOT)
    extra = tmp_path / "loggers.yaml"
    extra.write_text(
        "trainer:\n  logger:\n"
        f"    - class_path: lightning.pytorch.loggers.CSVLogger\n      init_args: {{save_dir: {tmp_path / 'D'}}}\n"
        "    - class_path: tests.integration.test_cli_help_loggers_output.MemoryLogger\n"
    )
    root = tmp_path / "runs"
    cli = cli_main(
        [*_fit(CLS, tiny_bert, root, "--config", str(extra), "--run_name", "cls", "--trainer.max_epochs", "1")]
    )
    run = root / "cls" / "version_0"
    for name in ("metrics.csv", "config.yaml", "hf/model.safetensors"):
        assert (run / name).exists(), name
    assert (tmp_path / "D" / "cls" / "version_0" / "metrics.csv").exists()  # the user's save_dir, the run's layout
    memory = next(lg for lg in cli.trainer.loggers if isinstance(lg, MemoryLogger))
    assert (memory.save_dir, memory.name) == (str(root), "cls") and memory.metrics
    assert not list(tmp_path.rglob("lightning_logs")) and not (ROOT / "lightning_logs").exists()
    assert resolve_alias("best", root / "cls") == run / "checkpoints" / "best-epoch=0.ckpt"  # test --ckpt_path best


def test_logger_false_still_writes_into_a_version_folder(tiny_bert, corpus_file, tmp_path):
    args = ["--trainer.logger", "false", "--trainer.max_steps", "4", "--trainer.val_check_interval", "2"]
    main(_fit(TINY, tiny_bert, tmp_path, *args, corpus=corpus_file))
    run = tmp_path / "tiny_debug" / "version_0"
    assert (run / "hf" / "model.safetensors").exists() and (run / "config.yaml").exists()
    assert list((run / "checkpoints").glob("*.ckpt"))
    assert not (tmp_path / "hf").exists() and not (tmp_path / "checkpoints").exists()


# -- quiet output -----------------------------------------------------------------------------------------------------
def test_fit_prints_each_info_line_once_and_no_argv_warning(tiny_bert, corpus_file, tmp_path):
    args = _fit(TINY, tiny_bert, tmp_path, "--trainer.max_steps", "2", corpus=corpus_file)
    proc = subprocess.run([sys.executable, "-m", "domainbert", *args], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    err = proc.stderr
    assert "args parameter is intended" not in err and "sys.argv" not in err
    assert err.count("Seed set to 0") == 1
    assert not [line for line in err.splitlines() if line.startswith("INFO: ")]  # Lightning's own second handler
    info = [line for line in err.splitlines() if line.startswith("INFO ")]
    assert info and len(info) == len(set(info))


def test_a_csv_logger_named_alone_gets_the_run_root_and_the_run_name(tiny_bert, corpus_file, tmp_path, capsys):
    """The docs' promise: an unset ``save_dir`` is ``<default_root_dir>``, an unset ``name`` the run name."""
    from domainbert.cli.lightning_cli import cli_main

    args = ["--trainer.logger", "CSVLogger", "--trainer.max_steps", "2", "--trainer.val_check_interval", "2"]
    cli = cli_main(_fit(TINY, tiny_bert, tmp_path, *args, corpus=corpus_file))
    run = tmp_path / "tiny_debug" / "version_0"
    assert [Path(lg.log_dir) for lg in cli.trainer.loggers] == [run]  # the user's CSVLogger is the run's own folder
    assert (run / "metrics.csv").exists() and (run / "hf" / "model.safetensors").exists()
    assert "save_dir: <default_root_dir>" in (run / "config.yaml").read_text()  # reruns into its own root
    assert "error" not in capsys.readouterr().err


def test_a_tensorboard_logger_without_tensorboard_is_one_line_naming_the_package(
    tiny_bert, corpus_file, tmp_path, capsys, monkeypatch
):
    from lightning.fabric.loggers import tensorboard

    monkeypatch.setattr(tensorboard, "_TENSORBOARD_AVAILABLE", False)  # as where neither is installed
    monkeypatch.setattr(tensorboard, "_TENSORBOARDX_AVAILABLE", False)
    with pytest.raises(SystemExit) as done:
        main(_fit(TINY, tiny_bert, tmp_path, "--trainer.logger", "TensorBoardLogger", corpus=corpus_file))
    assert done.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines()[-1] == (
        "domainbert: error: --trainer.logger TensorBoardLogger: the package 'tensorboard' is not installed "
        "(pip install tensorboard)"
    )
    assert "Traceback" not in err and not (tmp_path / "tiny_debug" / "version_0").exists()
