"""A new user's first week with the CLI: help, smoke runs, loggers, quiet output, a plain CSV log that survives."""

import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from lightning.pytorch.loggers.logger import Logger

from domainbert.cli import COMMANDS, TOOLS, main
from domainbert.errors import DomainBertError

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
    assert expected <= set(COMMANDS) and set(COMMANDS) == {"fit", "validate", "test", "predict", *TOOLS}
    for command in COMMANDS:
        assert re.search(rf"^  {command} +\S", out, re.M), command
    assert "IMPORTED []" in out
    assert "--n-" not in out and "--top-k" not in out  # one flag style: underscores


def test_no_command_prints_the_help_and_exits_2(capsys):
    with pytest.raises(SystemExit) as exc:
        main([])
    assert exc.value.code == 2
    assert "datamodules" in capsys.readouterr().err


def test_unknown_command_lists_every_command(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["fitt", "--config", "x.yaml"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "unknown command 'fitt'" in err and all(c in err for c in COMMANDS) and "Traceback" not in err


# -- smoke runs ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("extra", [[], ["--data.val", "null"]], ids=["max_steps2", "no_val"])
def test_smoke_run_with_early_stopping_finishes(tiny_bert, tmp_path, monkeypatch, caplog, extra):
    monkeypatch.chdir(ROOT)  # the config's fixture paths are relative to the project
    main(_fit(CLS, tiny_bert, tmp_path, "--trainer.max_steps", "2", *extra))
    assert (tmp_path / "tiny_classification" / "version_0" / "hf" / "model.safetensors").exists()
    warned = [r for r in caplog.records if r.name == "domainbert.callbacks" and "EarlyStopping" in r.getMessage()]
    assert len(warned) == 1


def test_early_stopping_with_a_misspelt_monitor_names_the_logged_metrics():
    from domainbert.callbacks import EarlyStopping

    callback = EarlyStopping(monitor="val/f1_macor", mode="max")
    trainer = SimpleNamespace(sanity_checking=False, callback_metrics={"val/f1_macro": torch.tensor(0.5)})
    with pytest.raises(DomainBertError, match=r"monitor='val/f1_macor'.*logged: val/f1_macro"):
        callback.on_validation_end(trainer, None)


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
    from domainbert.core.lightning_cli import cli_main
    from domainbert.core.runs import resolve_alias

    monkeypatch.chdir(ROOT)
    extra = tmp_path / "loggers.yaml"
    extra.write_text(
        "trainer:\n  logger:\n"
        f"    - class_path: lightning.pytorch.loggers.CSVLogger\n      init_args: {{save_dir: {tmp_path / 'D'}}}\n"
        "    - class_path: test_cli_first_week.MemoryLogger\n"
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


def test_resumed_csv_log_keeps_the_rows_already_written(tmp_path):
    from domainbert.core.lightning_cli import RunCSVLogger

    run = tmp_path / "fam" / "version_0"
    run.mkdir(parents=True)
    (run / "metrics.csv").write_text("epoch,step,train/loss\n0,4,2.5\n")
    logger = RunCSVLogger(save_dir=str(tmp_path), name="fam", version=0, resume=True)
    logger.log_metrics({"train/loss": 2.0, "val/loss": 1.5}, step=9)
    logger.save()
    lines = (run / "metrics.csv").read_text().splitlines()
    assert lines == ["epoch,step,train/loss,val/loss", "0,4,2.5,", ",9,2.0,1.5"]


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


def test_lightning_cli_parses_before_it_reads_the_checkpoint_hparams():
    """Pin: aliases are resolved in ``parse_arguments``, which LightningCLI runs before its private
    ``_parse_ckpt_path`` loads the checkpoint's hyper-parameters (and which domainbert no longer overrides)."""
    import inspect

    from lightning.pytorch.cli import LightningCLI

    from domainbert.core.lightning_cli import DomainBertCLI

    src = inspect.getsource(LightningCLI.__init__)
    assert src.index("self.parse_arguments(") < src.index("self._parse_ckpt_path()") < src.index("instantiate_classes")
    assert "_parse_ckpt_path" not in DomainBertCLI.__dict__
