"""The LightningCLI behind ``domainbert fit/validate/test/predict`` (imported only for those subcommands)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import lightning.pytorch as L
from jsonargparse import set_docstring_parse_options
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from domainbert.callbacks import HFExport, TrainingGuard
from domainbert.data.contract import TakesTokenizer, check_datamodule
from domainbert.hardware import auto_precision
from domainbert.hf import check_max_length
from domainbert.runs import ALIASES, resolve_alias

TRAINER_DEFAULTS: dict[str, Any] = {
    "default_root_dir": "runs",
    "gradient_clip_val": 1.0,
    "log_every_n_steps": 10,
}


class DomainBertCLI(LightningCLI):
    """LightningCLI with subclass mode for model and data, the HF export, and per-run folders.

    - ``data.num_labels`` and ``data.label_names`` flow into the model (``link_arguments``).
    - After instantiation the model's tokenizer is handed to the datamodule through ``connect``.
    - ``trainer.precision`` left unset (null) becomes ``bf16-mixed`` where bf16 is native (CUDA, or a CPU with
      AMX/AVX512-BF16) and ``32-true`` elsewhere.
    - Each run logs to ``<trainer.default_root_dir>/<run_name>/version_<n>``, a fresh folder, where the
      config, the checkpoints and the ``hf/`` export are written.
    """

    def __init__(self, args: list[str] | dict | None = None, run: bool = True, **kwargs: Any) -> None:
        """Build the CLI; ``args`` as on the command line (for calls from Python, such as sweep trials)."""
        set_docstring_parse_options(attribute_docstrings=True)
        kwargs.setdefault("trainer_defaults", TRAINER_DEFAULTS)
        kwargs.setdefault("save_config_kwargs", {"overwrite": False})
        kwargs.setdefault("parser_kwargs", {"parser_mode": "omegaconf"} if _has_omegaconf() else {})
        super().__init__(
            L.LightningModule,
            L.LightningDataModule,
            subclass_mode_model=True,
            subclass_mode_data=True,
            auto_configure_optimizers=False,
            args=args,
            run=run,
            **kwargs,
        )

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:  # noqa: D102
        parser.add_lightning_class_args(HFExport, "export")
        parser.add_lightning_class_args(TrainingGuard, "guard")
        parser.add_argument(
            "--run_name",
            type=str | None,
            default=None,
            help="Name of the run family under trainer.default_root_dir (default: the config file's stem).",
        )
        parser.link_arguments("data.num_labels", "model.init_args.num_labels", apply_on="instantiate")
        parser.link_arguments("data.label_names", "model.init_args.label_names", apply_on="instantiate")

    def _parse_ckpt_path(self) -> None:
        sub = self.config.get("subcommand")
        ckpt = sub and self.config[sub].get("ckpt_path")
        if sub in ("validate", "test", "predict") and ckpt in ALIASES:
            ckpt = self.config[sub]["ckpt_path"] = str(resolve_alias(ckpt, _run_family(self.config[sub])))
            logging.getLogger(__name__).info("ckpt_path resolved to %s", ckpt)
        if ckpt and Path(str(ckpt)).is_file():
            from domainbert.checks import check_checkpoint_config

            check_checkpoint_config(ckpt, self.config[sub].get("model"))
        super()._parse_ckpt_path()

    def before_instantiate_classes(self) -> None:  # noqa: D102
        cfg = self.config[self.subcommand] if self.subcommand else self.config
        trainer = cfg.get("trainer")
        if trainer is not None and trainer.get("precision") is None:
            trainer["precision"] = auto_precision(trainer.get("accelerator"))
            logging.getLogger(__name__).info(
                "trainer.precision not set: using %s on this machine", trainer["precision"]
            )
        if trainer is not None and trainer.get("logger") in (None, True):
            family = _run_family(cfg)
            trainer["logger"] = {
                "class_path": "lightning.pytorch.loggers.CSVLogger",
                "init_args": {"save_dir": str(family.parent), "name": family.name},
            }

    def after_instantiate_classes(self) -> None:  # noqa: D102
        max_length = getattr(self.datamodule, "max_length", None)
        config = getattr(getattr(self.model, "model", None), "config", None)
        if isinstance(max_length, int) and config is not None:
            check_max_length(max_length, config, where="data.max_length")
        cfg = self.config[self.subcommand] if self.subcommand else self.config
        ckpt = cfg.get("ckpt_path")
        if ckpt and Path(str(ckpt)).is_file():
            from domainbert.checks import check_checkpoint_model

            check_checkpoint_model(ckpt, self.model)
        check_datamodule(self.datamodule, self.model)
        tokenizer = getattr(self.model, "tokenizer", None)
        if isinstance(self.datamodule, TakesTokenizer) and tokenizer is not None:
            self.datamodule.connect(tokenizer=tokenizer)


def _has_omegaconf() -> bool:
    try:
        import omegaconf  # noqa: F401
    except ImportError:
        return False
    return True


def _config_stem(cfg) -> str | None:
    paths = cfg.get("config") or []
    for p in reversed(paths):
        rel = getattr(p, "relative", None) or str(p)
        if rel:
            return Path(str(rel)).stem
    return None


def _run_family(cfg) -> Path:
    """``<trainer.default_root_dir>/<run_name or config stem>``: where this config's runs go."""
    trainer = cfg.get("trainer") or {}
    return Path(trainer.get("default_root_dir") or "runs") / (cfg.get("run_name") or _config_stem(cfg) or "run")


def cli_main(args: list[str] | None = None, run: bool = True) -> DomainBertCLI:
    """Run the LightningCLI part (fit/validate/test/predict) with ``args``."""
    from domainbert.data.registry import expand_short_names, load_plugins

    load_plugins()
    return DomainBertCLI(args=expand_short_names(args if args is not None else sys.argv[1:]), run=run)
