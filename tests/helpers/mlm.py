"""What the masked-LM tests share: a small corpus datamodule and one fixed batch of it."""

from __future__ import annotations

import lightning.pytorch as L

from domainbert.data.corpus import CorpusDataModule


def small_corpus(module, corpus, tmp_path=None, **kw) -> CorpusDataModule:
    """A corpus datamodule on ``corpus`` (its first 64 lines, copied into ``tmp_path``, when given)."""
    lines = corpus.read_text().splitlines()[:64]
    path = (tmp_path or corpus.parent) / "small.txt"
    if tmp_path is not None:
        path.write_text("\n".join(lines) + "\n")
    dm = CorpusDataModule(train=str(path if tmp_path else corpus), val_ratio=0.0, max_length=32, batch_size=8, **kw)
    dm.connect(module.tokenizer)
    return dm


def fixed_batch(dm):
    """The first training batch of ``dm``."""
    dm.setup("fit")
    return next(iter(dm.train_dataloader()))


def quiet_trainer(max_steps: int, callbacks=()) -> L.Trainer:
    """A CPU trainer with no logger, checkpoint, progress bar, summary or validation: a pretraining test's fit."""
    return L.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=max_steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        callbacks=list(callbacks),
    )


class LossRecorder(L.Callback):
    """Records every training step's loss, to show that it falls."""

    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.losses.append(float(outputs["loss"]))
