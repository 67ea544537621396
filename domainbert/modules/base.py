"""What every domainbert LightningModule shares: the optimiser set-up, metric logging and the HF export.

This is deliberately one thin layer: each module owns its constructor (so LightningCLI shows exactly its options),
its model and its steps; it inherits ``configure_optimizers``, ``export_hf``, :meth:`HFModule.log_metrics` and the
evaluation-epoch hooks. The fine-tuning modules share one more layer, :mod:`domainbert.modules.finetune`, which also
holds the constructor arguments they all take.
"""

from __future__ import annotations

import io
import logging
import os
from pathlib import Path
from typing import IO, Any

import lightning.pytorch as L
import torch
from torch import nn

from domainbert.core.compat import attached_trainer, unscales_itself
from domainbert.core.hf import export_hf
from domainbert.core.optim import build_optimizer, param_groups, warmup_linear
from domainbert.errors import DomainBertError

log = logging.getLogger(__name__)


def enable_gradient_checkpointing(model: nn.Module) -> None:
    """Turn on activation (gradient) checkpointing, non-reentrant, in a ``transformers`` model (or a LoRA wrapper).

    Raises:
        DomainBertError: the model's family does not support it.
    """
    base = getattr(model, "get_base_model", lambda: model)()
    if not getattr(base, "supports_gradient_checkpointing", False):
        raise DomainBertError(f"gradient_checkpointing: {type(base).__name__} does not support it; set it to false")
    enable = getattr(model, "activation_checkpointing_enable", None)  # transformers >= 5.x; older: gradient_...
    if enable is not None:
        enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


class HFModule(L.LightningModule):
    """Base for modules wrapping one Hugging Face model in ``self.model`` with ``self.tokenizer``.

    Subclasses set ``self.model``, ``self.tokenizer`` and call ``save_hyperparameters`` with at least
    ``learning_rate``, ``weight_decay`` and ``warmup_ratio``; ``self.optimizer`` may hold an injected
    ``OptimizerCallable``.
    """

    model: torch.nn.Module
    optimizer = None
    #: whether its export serves predictions: then it records the length and precision its test pass scored at
    #: (:mod:`domainbert.core.scoring`); a pretraining export is a starting point, to be fine-tuned at any length
    serves_predictions: bool = False
    #: weights of the starting checkpoint to carry into exports (see ``domainbert.core.hf.carried_weights``)
    export_source: str | None = None
    #: config attributes the export writes instead of the training values: a pretraining stage that trains with
    #: its own dropout exports the starting checkpoint's, so later fine-tuning gets the dropout it expects
    export_config: dict | None = None
    #: a sentence-transformers folder whose pooling files the export carries (None: ``export_source``), so that
    #: ``pooling: auto`` fine-tunes an export of a mean-pooled checkpoint through the mean, as its source was trained
    pooling_source: str | None = None
    #: the sentence-embedding pooling the export records over the source's (``mean``, ``cls``); None: the source's
    export_pooling: str | None = None
    #: the metrics of the latest validation and test (``val/...``, ``test/...``), for the model card
    evaluated_metrics: dict | None = None

    # -- loading ----------------------------------------------------------------------------------
    @classmethod
    def load_from_checkpoint(
        cls,
        checkpoint_path: str | os.PathLike | IO[bytes],
        map_location: Any = None,
        hparams_file: str | os.PathLike | None = None,
        strict: bool | None = None,
        weights_only: bool | None = None,
        **kwargs: Any,
    ):
        """Lightning's ``load_from_checkpoint``; saved hyper-parameters never turn ``trust_remote_code`` on.

        A checkpoint (or ``hparams_file``) whose hyper-parameters set ``trust_remote_code: true`` is refused before
        anything is built (:func:`~domainbert.core.checkpoint_io.check_saved_trust`), unless the call gives
        ``trust_remote_code`` itself; every other argument is Lightning's.

        Raises:
            DomainBertError: one line naming the checkpoint and the setting.
        """
        from lightning.pytorch.core.saving import load_hparams_from_tags_csv, load_hparams_from_yaml

        from domainbert.core.checkpoint_io import check_saved_trust, saved_hparams

        if not isinstance(checkpoint_path, str | os.PathLike):  # an open file: read once, handed on as bytes
            checkpoint_path = io.BytesIO(checkpoint_path.read())
        given = "trust_remote_code" in kwargs
        saved = saved_hparams(checkpoint_path, unpickle=weights_only is False)
        check_saved_trust(saved, str(checkpoint_path), given)
        kwargs = {**cls.released_overrides(saved, str(checkpoint_path), hparams_file is not None), **kwargs}
        if isinstance(checkpoint_path, io.BytesIO):
            checkpoint_path.seek(0)
        readers = {"csv": load_hparams_from_tags_csv, "yml": load_hparams_from_yaml, "yaml": load_hparams_from_yaml}
        read = readers.get(str(hparams_file).rsplit(".", 1)[-1].lower()) if hparams_file is not None else None
        if read is not None:  # Lightning names any other file type itself
            check_saved_trust(read(hparams_file) or {}, str(hparams_file), given)
        return super().load_from_checkpoint(
            checkpoint_path, map_location, hparams_file, strict, weights_only=weights_only, **kwargs
        )

    @classmethod
    def released_overrides(cls, saved: dict, where: str, from_file: bool) -> dict:
        """Keyword arguments that read a checkpoint's saved hyper-parameters, as 0.1.0 wrote them, as today's.

        Here the class paths that have moved (:func:`~domainbert.core.renames.renamed_hparams`); a module whose
        arguments have changed adds its own. ``from_file``: an ``hparams_file`` is read instead of ``saved``.
        """
        from domainbert.core.renames import renamed_hparams

        return renamed_hparams(saved, where)

    # -- optimisation -----------------------------------------------------------------------------
    def trainable_groups(self) -> list[dict]:
        """Parameter groups for the optimiser; override to add task-specific groups."""
        hp = self.hparams
        layer_decay = hp.get("layer_decay")
        n_layers = getattr(getattr(self.model, "config", None), "num_hidden_layers", 0) or 0
        return param_groups(self.named_parameters(), hp.learning_rate, hp.weight_decay, layer_decay, n_layers)

    def lr_lambdas(self, groups: list[dict], total_steps: int) -> list:
        """One LR multiplier function per group: linear warm-up over ``warmup_ratio``, then linear decay."""
        warmup = int(round(self.hparams.warmup_ratio * total_steps))
        return [warmup_linear(total_steps, warmup)] * len(groups)

    def total_steps(self) -> int:
        """Optimizer steps in this fit, from ``trainer.estimated_stepping_batches``."""
        total = self.trainer.estimated_stepping_batches
        if total in (float("inf"), None):
            raise DomainBertError("set trainer.max_steps or trainer.max_epochs: the LR schedule needs a length")
        return int(total)

    def configure_optimizers(self):
        """AdamW (or the injected optimizer) with a per-step linear warm-up/decay schedule."""
        lr = self.hparams.get("learning_rate")
        if isinstance(lr, int | float) and not lr > 0:  # 0 would divide by zero in the MLM head schedule
            raise DomainBertError(f"model.learning_rate={lr}: expected a positive learning rate")
        groups = self.trainable_groups()
        # under a gradient scaler (16-mixed) the optimizer stays unfused: Lightning unscales only unfused gradients
        # before the guard and clipping read them
        opt = build_optimizer(self.optimizer, groups, fused=self._scaler() is None)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, self.lr_lambdas(groups, self.total_steps()))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step", "frequency": 1}}

    def on_fit_start(self) -> None:
        """On the CPU, draw dropout masks the fast way and reuse freed memory.

        See :mod:`domainbert.core.cpu_dropout` and :mod:`domainbert.core.cpu_memory`. ``DOMAINBERT_CPU_DROPOUT=0``
        keeps PyTorch's own dropout (``bernoulli_``), for runs that must match one made without it;
        ``DOMAINBERT_CPU_MALLOC=0`` leaves ``malloc`` as it is.
        """
        super().on_fit_start()
        if self.device.type != "cpu":
            return
        from domainbert.core.cpu_memory import keep_freed_memory

        keep_freed_memory()
        if os.environ.get("DOMAINBERT_CPU_DROPOUT", "1") != "0":
            from domainbert.core.cpu_dropout import use_cpu_dropout

            use_cpu_dropout(self)

    def _scaler(self):
        """The trainer's gradient scaler (``16-mixed``); None when gradients are not scaled (fp32, bf16)."""
        return getattr(self.trainer.precision_plugin, "scaler", None)

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        """Clip as Lightning does; also for a fused optimizer in ``bf16-mixed``.

        Lightning's mixed-precision plugin refuses to clip for an optimizer that unscales gradients itself (the
        fused AdamW), even in ``bf16-mixed``, where no gradient is scaled; there this clips the same way. Every
        other plugin (FSDP's, DeepSpeed's, 32-bit) and a scaled run keep Lightning's own clipping.
        """
        from lightning.pytorch.plugins.precision import MixedPrecision

        fused = unscales_itself(optimizer)
        bf16 = isinstance(self.trainer.precision_plugin, MixedPrecision) and self._scaler() is None
        if not (gradient_clip_val and fused and bf16):
            return super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)
        params = [p for group in optimizer.param_groups for p in group["params"]]
        if gradient_clip_algorithm == "value":
            torch.nn.utils.clip_grad_value_(params, gradient_clip_val)
        else:
            torch.nn.utils.clip_grad_norm_(params, gradient_clip_val)

    # -- evaluation epochs ---------------------------------------------------------------------------
    def start_evaluation(self, stage: str) -> None:
        """Called before a validation (``val``), test (``test``) or ``predict`` epoch; nothing by default."""

    def end_evaluation(self, stage: str) -> None:
        """Called after a validation (``val``) or test (``test``) epoch to log what it collected; nothing by default."""

    def on_validation_epoch_start(self) -> None:
        self.start_evaluation("val")

    def on_test_epoch_start(self) -> None:
        self.start_evaluation("test")

    def on_predict_epoch_start(self) -> None:
        self.start_evaluation("predict")

    def on_validation_epoch_end(self) -> None:
        self.end_evaluation("val")

    def on_test_epoch_end(self) -> None:
        self.end_evaluation("test")

    def on_validation_end(self) -> None:
        self.remember_metrics("val")

    def on_test_end(self) -> None:
        self.remember_metrics("test")

    def attached_datamodule(self) -> L.LightningDataModule | None:
        """The datamodule of the trainer this module is attached to; None without a trainer or a datamodule."""
        trainer = attached_trainer(self)
        return trainer.datamodule if trainer is not None else None

    def remember_metrics(self, stage: str) -> None:
        """Keep the ``<stage>/...`` metrics just computed (not the sanity check's) in ``evaluated_metrics``.

        The model card falls back on them when the trainer's own metrics were reset (a ``predict`` after a
        ``validate`` in the Python API).
        """
        trainer = attached_trainer(self)
        if trainer is None or getattr(trainer, "sanity_checking", False):
            return
        kept = {k: v for k, v in (self.evaluated_metrics or {}).items() if not k.startswith(f"{stage}/")}
        for key, value in trainer.callback_metrics.items():
            if key.startswith(f"{stage}/"):
                try:
                    kept[key] = float(value)
                except (TypeError, ValueError):
                    continue
        self.evaluated_metrics = kept

    def log_metrics(self, stage: str, metrics, batch_size: int) -> None:
        """Log each metric of a ``MetricCollection`` as ``<stage>/<name>``, computed over the epoch."""
        for name, metric in metrics.items():
            self.log(
                f"{stage}/{name}", metric, on_step=False, on_epoch=True, batch_size=batch_size, prog_bar=stage == "val"
            )

    # -- export -----------------------------------------------------------------------------------
    def hf_model(self):
        """The plain ``PreTrainedModel`` to export (subclasses unwrap adapters here)."""
        return self.model

    def model_card(self) -> str | None:
        """A Markdown model card for the export; None for none."""
        from domainbert.core.card import model_card

        return model_card(self)

    def export_hf(self, out_dir: str | Path) -> Path:
        """Write the model and tokenizer in Hugging Face format to ``out_dir``, atomically.

        The saved config carries ``export_config``'s values where it sets any; the model's own config is left as
        it was.
        """
        model = self.hf_model()
        trained = {k: getattr(model.config, k) for k in self.export_config or {}}
        try:
            for k, v in (self.export_config or {}).items():
                setattr(model.config, k, v)
            path = export_hf(
                model,
                self.tokenizer,
                out_dir,
                source=self.export_source,
                card=self.model_card(),
                pooling_from=self.pooling_source or self.export_source,
                pooling=self.export_pooling,
            )
        finally:
            for k, v in trained.items():
                setattr(model.config, k, v)
        log.debug("exported Hugging Face model to %s", path)  # HFExport prints it
        return path
