"""The LightningCLI behind ``domainbert fit/validate/test/predict`` (imported only for those subcommands)."""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
import inspect
import logging
import os
import re
import sys
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import lightning.pytorch as L
import yaml
from jsonargparse import ActionConfigFile, Namespace, set_parsing_settings
from lightning.pytorch.callbacks import ProgressBar
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter

from domainbert.cli.tool_cli import wants_docs
from domainbert.core.callbacks import HFExport, RunReport, TrainingGuard, progress_bar
from domainbert.core.compat import (
    AppendToMetricsFile,
    only_subcommands,
    parser_actions,
    set_csv_writer,
    subcommand_parsers,
)
from domainbert.core.files import plain_name
from domainbert.core.hardware import auto_precision
from domainbert.core.renames import RenamingParser
from domainbert.core.runs import ALIASES, next_version, resolve_alias, version_of
from domainbert.data.contract import TakesTokenizer, check_datamodule, data_max_length
from domainbert.errors import DomainBertError, user_error

log = logging.getLogger(__name__)

TRAINER_DEFAULTS: dict[str, Any] = {
    "default_root_dir": "runs",
    "gradient_clip_val": 1.0,
    "log_every_n_steps": 10,
    "enable_model_summary": False,  # RunReport prints the model's size in one line; true: Lightning's table
    # one validation batch before training (Lightning's default is 2): it catches a crash in validation_step as well,
    # for half the start-up cost; its output is discarded and the masks are seeded per step, so results are the same
    "num_sanity_val_steps": 1,
}

#: ``--help`` of ``--ckpt_path`` (Lightning's describes ``hpc`` and ``registry``, which domainbert does not use).
CKPT_PATH_HELP = {
    "fit": "Resume training: ``last`` (the newest checkpoint of this config's runs, resumed in its own run folder; "
    "a new run when there is none) or a .ckpt file (a new run folder, starting from that file's state).",
    "other": "The checkpoint to load: ``best`` (the best checkpoint recorded by the newest run of this config's "
    "family, <default_root_dir>/<run_name>/version_N), ``last`` (that run's last.ckpt) or a .ckpt file. Unset: "
    "the model as configured (for instance an export given as --model.init_from).",
}


#: The first paragraph of a subcommand's ``--help``, where Lightning's (its method's first line) says too little.
DESCRIPTIONS = {
    "predict": "Write the predictions of a checkpoint (--ckpt_path best|last|<file>) or of a model as given "
    "(--model.init_from <folder>), one JSON line per input. Precision: with trainer.precision unset (auto), predict "
    "runs in bf16-mixed where bf16 is native (CUDA, or a CPU with AMX/AVX512-BF16), so its probabilities differ "
    "slightly (in the third decimal) from plain transformers in float32; --trainer.precision 32-true gives "
    "transformers' probabilities.",
}


class ReleasedFormsParser(RenamingParser):
    """:class:`RenamingParser` that also reads a distillation model's 0.1.0 loss options as ``model.losses``.

    In a config's text (:func:`~domainbert.distill.released.released_text`) and in a mapping, such as the checkpoint
    hyper-parameters that ``--ckpt_path`` merges (:func:`~domainbert.distill.released.released_config`).
    """

    def parse_string(self, content: str, path: Any = "", *rest: Any, **kwargs: Any) -> Namespace:
        """``RenamingParser.parse_string`` of ``content`` with 0.1.0's loss options read as ``model.losses``."""
        from domainbert.distill.released import released_text  # not at import: `--help` stays light

        return super().parse_string(released_text(content, str(path) or "--config"), path, *rest, **kwargs)

    def parse_object(self, obj: Any, *rest: Any, **kwargs: Any) -> Namespace:
        """``RenamingParser.parse_object`` of ``obj`` with 0.1.0's loss options read as ``model.losses``."""
        from domainbert.distill.released import released_config

        if not isinstance(obj, Namespace):
            obj = released_config(obj, "a saved config or checkpoint")
        return super().parse_object(obj, *rest, **kwargs)


class DomainBertCLI(LightningCLI):
    """LightningCLI with subclass mode for model and data, the HF export, and per-run folders.

    - ``data.num_labels`` and ``data.label_names`` flow into the model (``link_arguments``).
    - After instantiation the model's tokenizer is handed to the datamodule through ``connect``.
    - ``trainer.precision`` left unset (null) becomes ``bf16-mixed`` where bf16 is native (CUDA, or a CPU with
      AMX/AVX512-BF16) and ``32-true`` elsewhere.
    - Each run logs to ``<trainer.default_root_dir>/<run_name>/version_<n>``, a fresh folder, where the
      config, the checkpoints, ``metrics.csv`` and the ``hf/`` export are written, whatever ``trainer.logger`` says
      (see :meth:`instantiate_trainer`); ``run_name`` must be a plain folder name.
    - ``fit --ckpt_path last`` resumes the newest run of the family in its own folder; ``validate``/``test``/
      ``predict`` resolve ``best``/``last`` there (:mod:`domainbert.core.runs`).
    - Values that would crash later (``max_steps`` below -1, ``max_steps 0`` for fit, a learning rate of 0, a
      ``ckpt_path`` that is a folder or missing, an output folder that cannot be written) are one-line errors before
      anything is built; a ``file://`` ``ckpt_path`` is a path, checked like one.
    - ``validate``/``test``/``predict`` given no config are named after the checkpoint's run (or the model's
      folder): ``runs/<that name>/version_N``, not ``runs/run/``.
    - Output: :mod:`domainbert.core.quiet` silences the libraries' chatter;
      :class:`~domainbert.core.callbacks.RunReport` prints the run folder and the final metrics, and removes a run
      folder left with only its config by a failure before training; one progress bar (Lightning's, unless
      ``trainer.callbacks`` gives one).
    """

    #: the model options the command line gave (none until it is parsed): they win over a checkpoint's
    _model_options: Mapping[str, Any] = MappingProxyType({})

    def __init__(self, args: list[str] | dict | None = None, run: bool = True, **kwargs: Any) -> None:
        """Build the CLI; ``args`` as on the command line (for calls from Python, such as sweep trials).

        Two costs that only ``--help`` needs are paid only then: attribute docstrings (jsonargparse reads the
        source of every class in the parsers' MROs for them) and the parsers of the subcommands not named.
        """
        set_parsing_settings(docstring_parse_attribute_docstrings=wants_docs(args))
        _one_log_handler()  # also for sweep trials, which build the CLI without cli_main
        kwargs.setdefault("trainer_defaults", TRAINER_DEFAULTS)
        kwargs.setdefault("save_config_kwargs", {"overwrite": False})
        kwargs.setdefault("parser_class", ReleasedFormsParser)  # reads the class paths and options 0.1.0 wrote
        parser_kwargs = kwargs.get("parser_kwargs") or ({"parser_mode": "omegaconf"} if _has_omegaconf() else {})
        parser_kwargs = {"prog": "domainbert", **self._only_subcommand(args, parser_kwargs)}
        # --trainer.max_step is an error, not max_steps; a parse error is raised and printed as one line by cli.main
        kwargs["parser_kwargs"] = {"exit_on_error": False, **parser_kwargs, "allow_abbrev": False}
        self._resume_version: int | None = None
        self._logger_spec: tuple | None = None
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

    def _only_subcommand(self, args: Any, parser_kwargs: dict) -> dict:
        """Build only the parser of the subcommand that ``args`` start with (each of the four costs as much).

        Without one (``args`` from Python as a dict, or starting with an option), all are built as usual.
        Returns ``parser_kwargs`` less the entries of the subcommands left out.
        """
        every = self.subcommands()
        if not isinstance(args, list | tuple) or not args or args[0] not in every:
            return parser_kwargs
        only = {args[0]: every[args[0]]}
        only_subcommands(self, only)  # this instance only: DomainBertCLI.subcommands() keeps all four
        return {k: v for k, v in parser_kwargs.items() if k not in every or k in only}

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
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

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        """Parse ``args``, then check the run name, the trainer's length and ``ckpt_path`` (resolving aliases).

        ``domainbert`` always hands its own argv over (after expanding short names), so LightningCLI's warning
        about ``args`` given alongside ``sys.argv`` would fire on every command: it is not repeated here.
        Checked here, before Lightning's ``_parse_ckpt_path`` loads the checkpoint's hyper-parameters.
        """
        if wants_docs(args):
            self._document(parser)
        self.config = parser.parse_object(args) if isinstance(args, dict | Namespace) else parser.parse_args(args)
        sub = self.config.get("subcommand")
        if not sub:
            return
        cfg = self.config[sub]
        if sub != "fit" and cfg.get("run_name") is None and _config_stem(cfg) is None:
            cfg["run_name"] = _name_from_inputs(cfg)  # not runs/run/: after the checkpoint's run or the model
        if cfg.get("seed_everything") is True:  # a random seed, chosen here: Lightning would warn "No seed found"
            import random

            cfg["seed_everything"] = random.SystemRandom().randrange(2**32)
        self._model_options = _command_line_model_options(args, cfg)
        if cfg.get("run_name") is not None:
            plain_name(cfg["run_name"], "--run_name")
        _check_config(sub, cfg)
        if sub == "fit":
            give_a_stop(cfg.get("trainer"))
        self._resolve_ckpt_path(sub, cfg)

    def _document(self, parser: LightningArgumentParser) -> None:
        """Put domainbert's own help on ``--model``, ``--data`` and ``--ckpt_path`` of every subcommand's parser.

        Without subcommands (``run=False``) the main parser gets it.
        """
        for sub, subparser in (subcommand_parsers(self) or {"": parser}).items():
            if sub in DESCRIPTIONS:
                subparser.description = DESCRIPTIONS[sub]
            for key, title in _TITLES.items():  # Lightning's docstrings give a class name and a cut sentence
                if key in (subparser.groups or {}):
                    subparser.groups[key].title = title
            for action in parser_actions(subparser):
                if action.dest in _HELP:
                    action.help = _HELP[action.dest]()
                elif action.dest == "ckpt_path":
                    action.help = CKPT_PATH_HELP["fit" if sub == "fit" else "other"]

    def _resolve_ckpt_path(self, sub: str, cfg: Namespace) -> None:
        """Turn ``best``/``last`` into the newest run's file; ``fit --ckpt_path last`` resumes in that run's folder."""
        ckpt = cfg.get("ckpt_path")
        if not ckpt:
            return
        if str(ckpt).startswith("file://"):  # a local file: the same checks as a path (Lightning would unpickle it)
            cfg["ckpt_path"] = ckpt = local_path(str(ckpt))
        family = _run_family(cfg)
        if sub == "fit" and ckpt == "last":
            try:
                path = resolve_alias("last", family)
            except DomainBertError as err:
                log.warning("%s: starting a new run", err)
                cfg["ckpt_path"] = None
                return
            self._resume_version = version_of(path)
            cfg["ckpt_path"] = str(path)
            log.info("resuming %s from %s", path.parent.parent, path)
        elif sub != "fit" and ckpt in ALIASES:
            cfg["ckpt_path"] = str(resolve_alias(ckpt, family))
            log.info("ckpt_path resolved to %s", cfg["ckpt_path"])
        elif not _lightning_alias(str(ckpt)):
            path = Path(str(ckpt))
            if path.is_dir():
                raise DomainBertError(f"--ckpt_path {ckpt}: is a folder; expected a .ckpt file (or best / last)")
            if not path.is_file():
                raise DomainBertError(f"--ckpt_path {ckpt}: no such file")
        if Path(str(cfg["ckpt_path"])).is_file():
            from domainbert.core.checks import check_checkpoint_config

            check_checkpoint_config(cfg["ckpt_path"], cfg.get("model"))

    def before_instantiate_classes(self) -> None:
        cfg = self.config[self.subcommand] if self.subcommand else self.config
        model = cfg.get("model")
        for key, value in self._model_options.items():  # over the checkpoint's hyper-parameters
            if isinstance(model, Namespace) and isinstance(model.get("init_args"), Namespace):
                model["init_args"][key] = value
        trainer = cfg.get("trainer")
        if trainer is not None and trainer.get("precision") is None:
            trainer["precision"] = auto_precision(trainer.get("accelerator"))
            note = ""
            if self.subcommand == "predict" and trainer["precision"] != "32-true":
                note = " (probabilities differ slightly from float32; --trainer.precision 32-true for those)"
            log.info("trainer.precision not set: using %s on this machine%s", trainer["precision"], note)
        if self.subcommand:  # the saved config.yaml then reruns into the same run family
            cfg["run_name"] = _run_family(cfg).name
        if self._resume_version is not None:  # the resumed folder keeps its config.yaml; this one goes beside it
            run_dir = _run_family(cfg) / f"version_{self._resume_version}"
            n = next(i for i in range(1, 10_000) if not (run_dir / f"config.resume-{i}.yaml").exists())
            self.save_config_kwargs = {**self.save_config_kwargs, "config_filename": f"config.resume-{n}.yaml"}

    def instantiate_classes(self) -> None:
        """As Lightning's, except ``trainer.logger``: :meth:`instantiate_trainer` builds the user's loggers itself.

        They get the run's folder there, and a logger whose package is missing is one line naming the package
        (jsonargparse would wrap its ImportError in a page of type errors).
        """
        cfg = self.config[self.subcommand] if self.subcommand else self.config
        trainer = cfg.get("trainer")
        given = trainer.get("logger") if trainer is not None else None
        if given in (None, True, False):
            return super().instantiate_classes()
        trainer["logger"] = None  # self.config keeps the spec: config.yaml and instantiate_trainer read it
        self._logger_spec = (trainer, given)
        try:
            super().instantiate_classes()
        finally:
            self._restore_logger_spec()

    def _restore_logger_spec(self) -> None:
        """Put ``trainer.logger`` back into ``self.config`` (see :meth:`instantiate_classes`)."""
        stashed, self._logger_spec = self._logger_spec, None
        if stashed is not None:
            stashed[0]["logger"] = stashed[1]

    def instantiate_trainer(self, **kwargs: Any) -> L.Trainer:
        """The trainer, with the run folder ``<default_root_dir>/<run_name>/version_<n>`` whatever the loggers.

        The user's loggers (``trainer.logger``) get the run's ``save_dir``/``name``/``version`` where they left
        them unset, and a :class:`RunCSVLogger` writing ``metrics.csv`` into the run folder always comes first (its
        folder is the one checkpoints, ``config.yaml`` and the export use). With ``trainer.logger false`` the
        run folder becomes the trainer's ``default_root_dir``.
        """
        self._restore_logger_spec()  # instantiate_classes held it back from jsonargparse
        cfg = self.config[self.subcommand] if self.subcommand else self.config
        given = (cfg.get("trainer") or {}).get("logger")
        family = _run_family(cfg)
        writable_folder(family, "--trainer.default_root_dir")
        version = self._resume_version if self._resume_version is not None else next_version(family)
        first = all(os.environ.get(k, "0") == "0" for k in ("RANK", "LOCAL_RANK", "NODE_RANK"))  # ranks share it
        if first and self._resume_version is None and "://" not in str(family):  # a new run folder, as every output
            from domainbert.core.files import check_output

            check_output(family / f"version_{version}", what="the run folder")
        if given is False:
            kwargs.setdefault("default_root_dir", str(family / f"version_{version}"))
        else:
            kwargs.setdefault("logger", run_loggers(given, family, version, resume=self._resume_version is not None))
        if self._resume_version is not None:  # Lightning warns that the resumed run's checkpoints/ is not empty
            warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")
        kwargs.setdefault("callbacks", self._callbacks())
        return super().instantiate_trainer(**kwargs)

    def _callbacks(self) -> list:
        """The configured ``trainer.callbacks``, then :class:`RunReport` and the progress bar (unless one is given)."""
        trainer = (self.config_init[self.subcommand] if self.subcommand else self.config_init).get("trainer") or {}
        given = trainer.get("callbacks") or []
        given = list(given) if isinstance(given, list | tuple) else [given]
        extra: list = [RunReport()]
        if trainer.get("enable_progress_bar") is not False and not any(isinstance(c, ProgressBar) for c in given):
            extra.append(progress_bar())
        return [*given, *extra]

    def fit(self, **kwargs: Any) -> None:
        """``trainer.fit``; a run too short for its ``val_check_interval`` is one line saying what to change."""
        try:
            self.trainer.fit(**kwargs)
        except ValueError as err:
            short = too_short_for_validation(self.trainer)
            if short is None:
                raise
            raise DomainBertError(short) from err

    def after_instantiate_classes(self) -> None:
        strategy = getattr(getattr(self, "trainer", None), "strategy", None)
        if strategy is not None and type(strategy.checkpoint_io).__name__ == "TorchCheckpointIO":  # the default
            from domainbert.core.checkpoint_io import AtomicCheckpointIO  # no truncated checkpoint on a full disk

            strategy.checkpoint_io = AtomicCheckpointIO()
        max_length = data_max_length(self.datamodule)
        config = getattr(getattr(self.model, "model", None), "config", None)
        if max_length is not None and config is not None:
            from domainbert.core.hf import check_max_length  # transformers' model code: not for --help

            check_max_length(max_length, config, where="data.max_length")
        cfg = self.config[self.subcommand] if self.subcommand else self.config
        ckpt = cfg.get("ckpt_path")
        if ckpt and Path(str(ckpt)).is_file():
            from domainbert.core.checks import check_checkpoint_model

            check_checkpoint_model(ckpt, self.model)
        check_datamodule(self.datamodule, self.model)
        tokenizer = getattr(self.model, "tokenizer", None)
        if isinstance(self.datamodule, TakesTokenizer) and tokenizer is not None:
            self.datamodule.connect(tokenizer=tokenizer)
        if self.subcommand == "predict":  # predictions are written by default, never silently discarded
            from domainbert.core.prediction import ensure_writer

            ensure_writer(self.trainer)


class RunCSVLogger(CSVLogger):
    """The run's own ``CSVLogger``; on a resume it appends to ``metrics.csv`` instead of deleting it."""

    def __init__(self, *args: Any, resume: bool = False, **kwargs: Any) -> None:
        """As :class:`~lightning.pytorch.loggers.CSVLogger`; ``resume`` keeps the rows already in the folder."""
        super().__init__(*args, **kwargs)
        self._resume = resume

    @property
    def experiment(self) -> ExperimentWriter:
        if self._resume:
            set_csv_writer(self, lambda: _AppendingWriter(log_dir=self.log_dir))
        return super().experiment


class _AppendingWriter(AppendToMetricsFile, ExperimentWriter):
    """Lightning's CSV writer, keeping an existing ``metrics.csv`` (and its columns) instead of removing it."""


#: loggers whose folder is ``save_dir/name/version_<version>``: the run's version is given to them.
_VERSIONED = (CSVLogger, TensorBoardLogger)
#: ``save_dir`` of a logger named without it (``--trainer.logger CSVLogger``): the run's root, filled in by
#: :func:`run_loggers`, as for a ``save_dir`` left unset in a config.
RUN_ROOT = "<default_root_dir>"
#: the package each logger needs, for a logger whose package is missing (``pip install <it>``)
LOGGER_PACKAGES = {
    "TensorBoardLogger": "tensorboard",
    "WandbLogger": "wandb",
    "MLFlowLogger": "mlflow",
    "CometLogger": "comet-ml",
    "NeptuneLogger": "neptune",
}


def run_loggers(given: Any, family: Path, version: int, resume: bool = False) -> list:
    """Instantiate the user's ``trainer.logger`` entries in the run's layout, after the run's own CSV logger.

    Args:
        given: ``trainer.logger`` as parsed: None/True (the default), one ``class_path``/``init_args`` entry or a
            list of them.
        family: ``<default_root_dir>/<run_name>``.
        version: the run's version number.
        resume: the run folder exists already (``fit --ckpt_path last``): keep its ``metrics.csv``.
    """
    ours = RunCSVLogger(save_dir=str(family.parent), name=family.name, version=version, resume=resume)
    loggers: list = [ours]
    specs = [] if given in (None, True) else list(given) if isinstance(given, list) else [given]
    for spec in specs:
        spec = spec.as_dict() if isinstance(spec, Namespace) else dict(spec)
        module, _, name = spec["class_path"].rpartition(".")
        cls = getattr(importlib.import_module(module), name)
        init = dict(spec.get("init_args") or {})
        params = inspect.signature(cls).parameters
        layout = {"save_dir": str(family.parent), "name": family.name}
        if issubclass(cls, _VERSIONED):
            layout["version"] = version
        for key, value in layout.items():
            if key in params and init.get(key, params[key].default) in (params[key].default, None, RUN_ROOT):
                init[key] = value
        logger = _instantiate_logger(cls, init)
        if isinstance(logger, CSVLogger) and Path(logger.log_dir) == Path(ours.log_dir):
            continue  # the user's CSVLogger in the run's own folder: ours already writes metrics.csv there
        loggers.append(logger)
    return loggers


def _instantiate_logger(cls: type, init: dict) -> Any:
    """``cls(**init)``; a logger whose package is not installed is one line naming it (``pip install ...``)."""
    try:
        return cls(**init)
    except ImportError as err:  # ModuleNotFoundError, or a logger's own check of its package
        package = LOGGER_PACKAGES.get(cls.__name__) or (err.name or "").split(".")[0] or "its package"
        raise DomainBertError(
            f"--trainer.logger {cls.__name__}: the package {package!r} is not installed (pip install {package})"
        ) from err


def rooted_loggers(args: list[str]) -> list[str]:
    """``args`` with the ``save_dir`` of a ``CSVLogger``/``TensorBoardLogger`` named without one set to the run's root.

    Both loggers require a ``save_dir``; named alone (``--trainer.logger CSVLogger``, by short name or class path),
    the parser would refuse them ("required: save_dir"), although an unset ``save_dir`` is the run's root. Their
    ``save_dir`` becomes :data:`RUN_ROOT`, which :func:`run_loggers` makes the run's root.
    """
    out = list(args)
    given = any(a.split("=", 1)[0] in _SAVE_DIR_FLAGS for a in out)
    for i in range(len(out) - 1, -1, -1):
        flag, _, value = out[i].partition("=")
        if flag != "--trainer.logger":
            continue
        value = value or (out[i + 1] if "=" not in out[i] and i + 1 < len(out) else "")
        if value.rsplit(".", 1)[-1] in ("CSVLogger", "TensorBoardLogger") and not given:
            out.insert(i + (1 if "=" in out[i] else 2), f"--trainer.logger.init_args.save_dir={RUN_ROOT}")
        break  # the last --trainer.logger is the one that counts
    return out


_SAVE_DIR_FLAGS = ("--trainer.logger.save_dir", "--trainer.logger.init_args.save_dir", "--trainer.logger.init_args")


def too_short_for_validation(trainer: L.Trainer) -> str | None:
    """What to change when an epoch has fewer training batches than ``val_check_interval`` (None when it has not).

    Lightning refuses such a fit with a ValueError once it has counted the batches (``fit_loop.max_batches``); this
    says the same in the options' own names.
    """
    every, batches = trainer.val_check_interval, trainer.fit_loop.max_batches
    if isinstance(every, bool) or not isinstance(every, int) or trainer.check_val_every_n_epoch is None:
        return None
    if not isinstance(batches, int) or every <= batches:
        return None
    return (
        f"--trainer.val_check_interval={every}: the run is shorter than that, an epoch has only {batches} training "
        f"batch(es); set --trainer.val_check_interval to {batches} or less (or 1.0, once an epoch), set "
        "--trainer.check_val_every_n_epoch=null to count it in steps across epochs, or give more training data"
    )


def _command_line_model_options(args: Any, cfg: Namespace) -> dict[str, Any]:
    """The model options given on the command line (``--model.X`` / ``--model.init_args.X``), as parsed.

    With ``--ckpt_path``, Lightning applies the checkpoint's saved hyper-parameters over the parsed config; a path
    the user names again on the command line (a moved teacher, say) must win over the saved one, so these are put
    back before the classes are instantiated.
    """
    model = cfg.get("model")
    if not isinstance(args, list) or not cfg.get("ckpt_path") or not isinstance(model, Namespace):
        return {}
    init = model.get("init_args")
    keys = set()
    for arg in args:
        if isinstance(arg, str) and arg.startswith("--model."):
            key = arg[len("--model.") :].split("=", 1)[0].removeprefix("init_args.")
            if key and "." not in key and isinstance(init, Namespace) and key in init:
                keys.add(key)
    return {key: init[key] for key in keys}


def _check_config(sub: str, cfg: Namespace) -> None:
    """Values that Lightning or the schedule would reject with a traceback (or accept and train nothing)."""
    trainer = cfg.get("trainer") or {}
    max_steps = trainer.get("max_steps")
    if max_steps is not None and max_steps < -1:
        raise DomainBertError(f"--trainer.max_steps={max_steps}: expected -1 (no limit) or a positive number of steps")
    if sub == "fit" and (max_steps == 0 or trainer.get("max_epochs") == 0):
        key = "max_steps" if max_steps == 0 else "max_epochs"
        raise DomainBertError(f"--trainer.{key}=0: fit would train nothing (and export an untrained model)")
    max_epochs = trainer.get("max_epochs")
    if isinstance(max_epochs, int) and max_epochs < -1:
        raise DomainBertError(f"--trainer.max_epochs={max_epochs}: expected -1 (no limit) or a positive number")
    accumulate = trainer.get("accumulate_grad_batches")
    if isinstance(accumulate, int) and accumulate < 1:
        raise DomainBertError(f"--trainer.accumulate_grad_batches={accumulate}: expected at least 1")
    seed = cfg.get("seed_everything")
    if isinstance(seed, int) and not isinstance(seed, bool) and not 0 <= seed < 2**32:
        raise DomainBertError(f"--seed_everything={seed}: expected true, false or a seed from 0 to {2**32 - 1}")
    model = cfg.get("model")
    init = (model.get("init_args") if isinstance(model, Namespace) else None) or {}
    lr = init.get("learning_rate") if isinstance(init, Namespace | dict) else None
    if isinstance(lr, int | float) and lr <= 0:
        raise DomainBertError(f"--model.learning_rate={lr}: expected a positive learning rate")


#: Epochs of a ``fit`` given neither ``trainer.max_epochs`` nor ``trainer.max_steps`` (Lightning's would be 1000).
DEFAULT_MAX_EPOCHS = 3


def has_stop(trainer: Any) -> bool:
    """Whether a trainer config (a mapping) bounds training: ``max_epochs``, ``max_steps`` or ``max_time`` set.

    ``-1`` for ``max_epochs`` or ``max_steps`` counts as set: the user asked for no limit.
    """
    trainer = trainer or {}
    return (
        trainer.get("max_epochs") is not None
        or trainer.get("max_steps") not in (None, -1)
        or trainer.get("max_time") is not None
    )


def give_a_stop(trainer: Any) -> None:
    """Set ``max_epochs`` to :data:`DEFAULT_MAX_EPOCHS` in a ``fit`` config without a stop, and say so in one line.

    Left unset, Lightning trains for 1000 epochs (and the LR schedule decays over them): a copied command without
    ``--trainer.max_epochs`` would run for hours.
    """
    if trainer is None or has_stop(trainer):
        return
    trainer["max_epochs"] = DEFAULT_MAX_EPOCHS
    log.info(
        "trainer.max_epochs not set: training %d epochs (--trainer.max_epochs or --trainer.max_steps sets the length)",
        DEFAULT_MAX_EPOCHS,
    )


def _model_help() -> str:
    from domainbert.cli.short_names import MODELS

    names = ", ".join(f"{name} ({path})" for name, path in MODELS.items())
    return (
        f"The LightningModule: a short name, {names}; or the class path of any LightningModule. "
        "`--model.help NAME` lists a module's options (--model.learning_rate, ...)."
    )


def _data_help() -> str:
    from domainbert.data.registry import GROUP

    eps = importlib.metadata.entry_points(group=GROUP)  # the names only: no plugin is imported for a help text
    names = ", ".join(f"{ep.name} ({ep.value.replace(':', '.')})" for ep in sorted(eps, key=lambda e: e.name))
    return (
        f"The LightningDataModule: a short name, {names or 'none registered'}; or the class path of any "
        "LightningDataModule. `--data.help NAME` lists a datamodule's options."
    )


#: The help of the subclass-mode arguments, in place of jsonargparse's "known subclasses" (only those imported).
_HELP = {"model": _model_help, "data": _data_help}

#: Headings of the help's option groups whose class docstrings make poor ones.
_TITLES = {
    "model": "The model (a LightningModule; --model.help NAME lists its options)",
    "data": "The data (a LightningDataModule; --data.help NAME lists its options)",
    "export": "The Hugging Face export at the end of fit (<run folder>/hf)",
    "guard": "Training guards: non-finite losses and weights, per-step seeding, memory",
}


def expand_help_names(args: list[str]) -> list[str]:
    """``--model.help NAME`` / ``--data.help NAME`` with a short name: the class path, which jsonargparse needs."""
    from domainbert.cli.short_names import model_class_path
    from domainbert.data.registry import class_path

    out = list(args)
    lookups = {"--model.help": model_class_path, "--data.help": class_path}
    for i, arg in enumerate(out):
        flag, eq, value = arg.partition("=")
        if flag in lookups and eq and (cp := lookups[flag](value)):
            out[i] = f"{flag}={cp}"
        elif arg in lookups and i + 1 < len(out) and (cp := lookups[arg](out[i + 1])):
            out[i + 1] = cp
    return out


def local_path(url: str) -> str:
    """The path of a ``file://`` URL (``file:///a/b%20c.ckpt`` -> ``/a/b c.ckpt``).

    Raises:
        DomainBertError: for a URL naming another host (``file://server/...``).
    """
    from urllib.parse import unquote, urlparse

    parsed = urlparse(url)
    if parsed.netloc not in ("", "localhost"):
        raise DomainBertError(f"--ckpt_path {url}: a file:// URL on another host; give a local path")
    return unquote(parsed.path)


def writable_folder(folder: Path, option: str) -> None:
    """Check that ``folder`` can be created and written, creating nothing.

    The check writes (and removes) a temporary file in the nearest folder that exists, ``folder`` or an ancestor, so
    a run stopped later by bad data leaves no empty run folder behind.

    Raises:
        DomainBertError: naming ``option``, the folder and why (a read-only file system, no permission, a file in
            the way...), instead of an ``OSError`` traceback from the first write.
    """
    import errno
    import tempfile

    if "://" in str(folder):  # a remote root (s3://...): its logger and checkpoint writer report their own errors
        return
    existing = Path(os.path.abspath(folder))
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        if not existing.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, f"{existing} is a file, not a folder")
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as err:
        raise DomainBertError(
            f"{option}: cannot write the run folder {folder}: {err.strerror or err}; give a writable folder"
        ) from err


def _name_from_inputs(cfg: Namespace) -> str:
    """A run name for a command given no config: the family of ``ckpt_path``'s run, else the model's folder.

    ``runs/cls/version_3/checkpoints/x.ckpt`` and ``runs/cls/version_3/hf`` give ``cls``; ``models/my-bert``
    gives ``my-bert``; nothing usable gives ``run``.
    """
    ckpt = str(cfg.get("ckpt_path") or "")
    model = cfg.get("model")
    init = model.get("init_args") if isinstance(model, Namespace) else None
    source = ckpt if ckpt and ckpt not in ALIASES and "://" not in ckpt else ""
    source = source or str((init.get("init_from") if isinstance(init, Namespace) else None) or "")
    if not source:
        return "run"
    path = Path(source.rstrip("/"))
    if version_of(path) is not None:
        name = path.parents[2].name
    elif path.parent.name.startswith("version_") and path.parent.parent.name:
        name = path.parent.parent.name
    else:
        name = path.stem if path.suffix == ".ckpt" else path.name
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._")
    return name or "run"


def _lightning_alias(ckpt: str) -> bool:
    """Values of ``ckpt_path`` that Lightning resolves itself: ``hpc``, ``registry...`` and remote URLs."""
    return ckpt == "hpc" or ckpt.startswith("registry") or "://" in ckpt


def check_config_files(args: list[str]) -> None:
    """Parse every ``--config`` file given in ``args`` as YAML first, so a syntax error names the file.

    Raises:
        DomainBertError: ``<file>: line L, column C: <what the YAML parser says>``, or ``<file>: expected a
            mapping of options...`` for a file that holds a list, a scalar or nothing.
    """
    for i, arg in enumerate(args):
        if arg in ("--config", "-c") and i + 1 < len(args):
            path = args[i + 1]
        elif arg.startswith("--config="):
            path = arg.split("=", 1)[1]
        else:
            continue
        if not os.path.isfile(path):  # also False for a config given as a YAML string, however long
            continue
        try:
            content = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
            problem = getattr(err, "problem", None) or str(err)
            raise DomainBertError(f"{path}: {where}YAML syntax error: {problem}") from err
        if not isinstance(content, dict):
            found = "nothing (an empty file)" if content is None else f"a {type(content).__name__}"
            raise DomainBertError(f"{path}: expected a mapping of options (trainer:, model:, data:...), found {found}")


def builtin_configs() -> dict[str, Path]:
    """The configs ``--config`` takes by name from any folder: the pipeline's stages (``finetune``, ``distill``...).

    Each is ``domainbert/pipeline/stages/<name>.yaml`` in the installed package; the pipeline's stages read them,
    and the pipeline sets what a stage needs (the model to start from, the data) where ``fit`` takes options.
    """
    from importlib import resources

    folder = resources.files("domainbert").joinpath("pipeline", "stages")
    return {Path(f.name).stem: Path(str(f)) for f in folder.iterdir() if f.name.endswith(".yaml")}


def resolve_builtin_configs(args: list[str]) -> list[str]:
    """``args`` with each ``--config <name>`` of a built-in config (:func:`builtin_configs`) given as its path.

    A file of that name in the working directory wins. A bare name (letters and ``_``) that is neither a file nor
    a built-in config is an error naming the built-in ones; anything else (a path, YAML text) goes to the parser.

    Raises:
        DomainBertError: ``--config <name>: no such file, and no built-in config of that name (...)``.
    """
    out = list(args)
    for i, arg in enumerate(out):
        if arg in ("--config", "-c") and i + 1 < len(out):
            j, name, prefix = i + 1, out[i + 1], ""
        elif arg.startswith("--config="):
            j, name, prefix = i, arg.split("=", 1)[1], "--config="
        else:
            continue
        if not re.fullmatch(r"[a-z_]+", name) or os.path.exists(name):
            continue
        known = builtin_configs()
        if name not in known:
            raise DomainBertError(
                f"--config {name}: no such file, and no built-in config of that name (built-in: "
                f"{', '.join(sorted(known))})"
            )
        out[j] = f"{prefix}{known[name]}"
    return out


def _has_omegaconf() -> bool:
    return importlib.util.find_spec("omegaconf") is not None


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
    from domainbert.cli.short_names import expand_short_names
    from domainbert.data.registry import load_plugins

    load_plugins()
    _one_log_handler()
    args = resolve_builtin_configs(list(args if args is not None else sys.argv[1:]))
    check_config_files(args)
    if not wants_docs(args):
        from domainbert.core.quiet import quiet_libraries

        quiet_libraries()
    return DomainBertCLI(args=rooted_loggers(expand_help_names(expand_short_names(args))), run=run)


class _ParserOnly(DomainBertCLI):
    """:class:`DomainBertCLI` built up to its parser (``run=False``): nothing is parsed, seeded or instantiated.

    Lightning has no constructor that stops once the parser is built: its ``__init__`` calls these hooks next, and
    here they do nothing (``seed_everything: false`` keeps Lightning from seeding this process).
    """

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        """Parse nothing."""
        self.config = Namespace(seed_everything=False)

    def before_instantiate_classes(self) -> None:
        """Nothing to prepare: nothing is built."""

    def instantiate_classes(self) -> None:
        """Build nothing."""

    def after_instantiate_classes(self) -> None:
        """Nothing was built."""


@functools.cache
def fit_parser() -> LightningArgumentParser:
    """The parser of a fit config without a subcommand, as a pipeline stage's worker reads it; built once a process.

    It is :class:`DomainBertCLI`'s own (``run=False``): Lightning's options, then domainbert's
    (:meth:`DomainBertCLI.add_arguments_to_parser`), read by the same parser class.
    """
    return _ParserOnly(args=[], run=False).parser


@dataclass(frozen=True)
class ResolvedConfig:
    """A fit config as :func:`resolve_config` resolved it: its values, and the YAML a stage's worker reads."""

    values: Namespace
    """The config as jsonargparse parsed it: every option, defaults included (``values.trainer.max_steps``)."""
    where: str
    """What the config is for, named in an error (``stage 'dapt'``)."""

    def text(self) -> str:
        """The config as YAML, which ``domainbert fit --config`` reads back as it is."""
        return fit_parser().dump(self.values, skip_none=False)

    def but(self, values: dict[str, Any]) -> ResolvedConfig:
        """A copy with ``values`` (nested as in a config file; a ``key+`` list is appended) parsed over these.

        Raises:
            DomainBertError: a value ``domainbert fit`` would refuse, naming :attr:`where`.
        """
        parsed = _parsed(self.where, lambda: fit_parser().parse_object(values, self.values))
        return ResolvedConfig(parsed, self.where)


def resolve_config(sources: list[str | dict[str, Any] | list[str]], where: str) -> ResolvedConfig:
    """The one config ``sources`` make, resolved by :func:`fit_parser` in one pass over them.

    Each source is applied over the config so far: a file as ``--config`` reads it, a dict parsed as an object (a
    ``key+`` list is appended to the list ``key``), a list of options as on the command line (short names expanded).
    The config is checked after each dict or list; the parser's defaults fill it in at the last source.

    Args:
        sources: a config file's path, then config dicts and lists of command-line options, in order (later ones
            win); adjacent dicts are best merged first (``StageConfig.sources`` does), each one costs a parse.
        where: what the config is for, named in an error (``stage 'finetune-baseline-seed0'``).

    Raises:
        DomainBertError: a file that is not valid YAML, an option or value that ``domainbert fit`` would refuse.
    """
    from domainbert.data.registry import load_plugins

    load_plugins()
    for source in sources:
        if not isinstance(source, dict):  # a YAML syntax error names the file
            check_config_files(["--config", source] if isinstance(source, str) else list(source))
    values = Namespace()
    for i, source in enumerate(sources):
        values = _parsed(where, functools.partial(_apply, source, values, last=i == len(sources) - 1))
    return ResolvedConfig(values, where)


def _apply(source: str | dict[str, Any] | list[str], values: Namespace, last: bool) -> Namespace:
    """``values`` with ``source`` applied over them (see :func:`resolve_config`); the defaults added when ``last``."""
    from domainbert.cli.short_names import expand_short_names

    parser = fit_parser()
    if isinstance(source, str):  # checked with the sources after it: a stage's values may complete the file
        values = values.clone()
        ActionConfigFile.apply_config(parser, values, "config", source)
        return parser.parse_object({}, values) if last else values
    if isinstance(source, dict):
        return parser.parse_object(source, values, defaults=last)
    return parser.parse_args(rooted_loggers(expand_short_names(list(source))), values, defaults=last)


def _parsed(where: str, parse: Callable[[], Namespace]) -> Namespace:
    """``parse()``; a user's mistake is one :class:`DomainBertError` line naming ``where``, anything else raises."""
    try:
        return parse()
    except Exception as err:  # noqa: BLE001 - jsonargparse wraps a bad option or value in its own errors
        user = user_error(err)
        if user is None:
            raise
        raise DomainBertError(f"{where}: {user}") from None


def _one_log_handler() -> None:
    """Drop the console handler ``lightning`` adds to its logger at import when the root logger has one already.

    ``lightning/__init__.py`` attaches a ``StreamHandler`` to the ``lightning`` logger unconditionally and lets
    records propagate, so with ``domainbert``'s root handler every Lightning INFO line would print twice.
    """
    if logging.getLogger().handlers:
        lightning_logger = logging.getLogger("lightning")
        for handler in list(lightning_logger.handlers):
            if type(handler) is logging.StreamHandler:
                lightning_logger.removeHandler(handler)
