"""A Lightning callback for ``probe_vs_finetune.py``: Hugging Face exports of the encoder at chosen steps of one fit.

Each export is written by the module's own ``export_hf`` (the code behind every run's ``<run>/hf``: the tokenizer,
the sentence-transformers pooling files, LoRA adapters merged into a copy), after the same finiteness check as
:class:`domainbert.core.callbacks.HFExport`, so one pretraining run gives several adapted models. After the last
export step the callback stops the fit (``trainer.should_stop``), so the run keeps its config's ``max_steps`` (and
with it the learning-rate schedule) while training no further than it needs::

    trainer:
      callbacks:
        - class_path: probe_vs_finetune_exports.StepExports   # examples/benchmarks on PYTHONPATH
          init_args: {steps: [150, 250, 400], folder: runs/probe_vs_finetune/mlm}
"""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as L


def export_folder(folder: str | Path, step: int) -> Path:
    """Where the export of ``step`` goes: ``<folder>/step<step>``."""
    return Path(folder) / f"step{step}"


def export_done(path: Path) -> bool:
    """Whether ``path`` holds a finished export (the export is written atomically: a config means complete)."""
    return (path / "config.json").is_file()


class StepExports(L.Callback):
    """Export the module's model after each of ``steps`` optimizer steps to ``<folder>/step<N>``; stop at the last."""

    def __init__(self, steps: list[int], folder: str) -> None:
        """Configure the exports.

        Args:
            steps: the optimizer steps (``trainer.global_step``) after which to export; each at most once. The fit
                stops after the last of them.
            folder: the parent folder of the exports; an export already there (an earlier run's) is kept.
        """
        super().__init__()
        self.steps = sorted({int(s) for s in steps})
        self.folder = folder
        self.written: list[str] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if step in self.steps:
            path = export_folder(self.folder, step)
            # not again on a later micro-batch of the same step (accumulation), nor over an earlier run's export
            if str(path) not in self.written and not export_done(path):
                self.export(trainer, pl_module, path)
        if self.steps and step >= self.steps[-1]:
            trainer.should_stop = True  # the last export is written: no further steps

    def export(self, trainer: L.Trainer, pl_module: L.LightningModule, path: Path) -> None:
        """Write ``pl_module``'s export to ``path`` as :class:`HFExport` does (rank 0; non-finite weights refused)."""
        from domainbert.core.callbacks import nonfinite_weights
        from domainbert.errors import DomainBertError

        bad = nonfinite_weights(pl_module)
        if bad:
            raise DomainBertError(f"not exported to {path}: the model's weights are not finite ({bad})")
        if trainer.is_global_zero:
            pl_module.export_hf(path)
            print(f"Exported step {trainer.global_step} to {path}", flush=True)
        self.written.append(str(path))
