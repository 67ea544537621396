"""Callbacks: the Hugging Face export at the end of ``fit``, and training guards."""

from __future__ import annotations

import logging
from pathlib import Path

import lightning.pytorch as L
import torch
from lightning.pytorch.utilities import rank_zero_only

log = logging.getLogger(__name__)


class HFExport(L.Callback):
    """At the end of ``fit``, restore the best checkpoint and write ``<run dir>/<dirname>/`` in HF format.

    The best checkpoint is the one the (first) ``ModelCheckpoint`` with a ``monitor`` chose; with none,
    the final weights are exported. Only rank 0 writes.
    """

    def __init__(self, enabled: bool = True, dirname: str = "hf", restore_best: bool = True) -> None:
        """Configure the export.

        Args:
            enabled: write the export at the end of fit.
            dirname: folder name inside the run folder.
            restore_best: load the best checkpoint's weights before exporting (when one was monitored).
        """
        super().__init__()
        self.enabled = enabled
        self.dirname = dirname
        self.restore_best = restore_best
        self.path: Path | None = None

    @staticmethod
    def run_dir(trainer: L.Trainer) -> Path:
        """The run's own folder: the logger's versioned folder, else ``default_root_dir``."""
        return Path(trainer.log_dir or trainer.default_root_dir)

    def best_path(self, trainer: L.Trainer) -> str | None:
        """The best monitored checkpoint of this fit, if any."""
        for cb in trainer.checkpoint_callbacks:
            if getattr(cb, "monitor", None) and getattr(cb, "best_model_path", ""):
                return cb.best_model_path
        return None

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:  # noqa: D102
        if not self.enabled or trainer.sanity_checking:
            return
        best = self.best_path(trainer) if self.restore_best else None
        if best and Path(best).exists():
            state = torch.load(best, map_location=pl_module.device, weights_only=True)["state_dict"]
            pl_module.load_state_dict(state)
            log.info("restored the best checkpoint %s before export", best)
        self.path = self.run_dir(trainer) / self.dirname
        self._write(pl_module)

    @rank_zero_only
    def _write(self, pl_module: L.LightningModule) -> None:
        if hasattr(pl_module, "export_hf"):
            pl_module.export_hf(self.path)
            print(f"Exported Hugging Face model to {self.path}")
