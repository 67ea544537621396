"""A tiny regression task for fast sweep tests: a 2-layer MLP on random tensors, trained with SGD.

The validation loss is logged as ``val/loss`` (and its negation as ``val/score``). A learning rate above
about 1 makes SGD diverge, so a "bad for high learning rate" metric comes for free: the pruning tests use it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import lightning.pytorch as L
import torch
from torch.utils.data import DataLoader, TensorDataset

from tests.helpers.kill import hold


class ToyRegressor(L.LightningModule):
    """An MLP regressor with the hyper-parameters a sweep tunes."""

    def __init__(
        self,
        learning_rate: float = 0.05,
        warmup_ratio: float = 0.0,
        hidden_dropout: float = 0.0,
        weight_decay: float = 0.0,
        hidden: int = 16,
        fail: bool = False,
        barrier_dir: str | None = None,
        barrier_n: int = 2,
        interrupt_marker: str | None = None,
        hold_dir: str | None = None,
        hold_after: int = 1,
    ) -> None:
        """Build the model.

        Args:
            learning_rate: SGD learning rate.
            warmup_ratio: fraction of the steps with a linear warm-up.
            hidden_dropout: dropout after the hidden layer.
            weight_decay: SGD weight decay.
            hidden: hidden width.
            fail: raise in the first training step (to test failed trials).
            barrier_dir: at the start of training, write this process's id here and wait until ``barrier_n``
                distinct processes have, so that parallel sweep workers each run a trial; after 300 s without
                them the trial fails, saying so.
            barrier_n: processes to wait for.
            interrupt_marker: if this file exists, delete it and raise ``KeyboardInterrupt`` (as Ctrl-C does) in
                the first training step.
            hold_dir: each fit records its start here; the fit that finds ``hold_after`` earlier starts writes
                ``<hold_dir>/holding`` and waits to be killed (:func:`tests.helpers.kill.hold`), its trial's
                parameters all sampled, so that a test can kill a sweep while a trial after the first trains.
            hold_after: fits that train through before the one that holds.
        """
        super().__init__()
        self.save_hyperparameters()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(
            torch.nn.Linear(8, hidden), torch.nn.Tanh(), torch.nn.Dropout(hidden_dropout), torch.nn.Linear(hidden, 1)
        )

    def on_train_start(self) -> None:
        if self.hparams.hold_dir:
            self._hold(Path(self.hparams.hold_dir))
        if self.hparams.barrier_dir:
            self._barrier(Path(self.hparams.barrier_dir))

    def _hold(self, folder: Path) -> None:
        """Record this fit's start; hold for a kill if ``hold_after`` fits started before it."""
        folder.mkdir(parents=True, exist_ok=True)
        earlier = len(list(folder.glob("started-*")))
        (folder / f"started-{earlier}").touch()
        if earlier >= self.hparams.hold_after:
            hold(folder / "holding")

    def _barrier(self, folder: Path) -> None:
        """Wait until ``barrier_n`` processes have reached the barrier in ``folder`` (300 s at most)."""
        folder.mkdir(parents=True, exist_ok=True)
        (folder / str(os.getpid())).touch()
        deadline = time.monotonic() + 300
        while len(list(folder.iterdir())) < self.hparams.barrier_n:
            if time.monotonic() > deadline:
                arrived = len(list(folder.iterdir()))
                raise RuntimeError(f"barrier {folder}: {arrived} of {self.hparams.barrier_n} processes in 300 s")
            time.sleep(0.1)

    def _loss(self, batch) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x).squeeze(-1), y)

    def training_step(self, batch, batch_idx):
        if self.hparams.fail:
            raise RuntimeError("toy failure on purpose")
        marker = self.hparams.interrupt_marker
        if marker and os.path.exists(marker):
            os.unlink(marker)
            raise KeyboardInterrupt
        loss = self._loss(batch)
        self.log("train/loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        loss = self._loss(batch)
        loss = torch.nan_to_num(loss, nan=1e6, posinf=1e6).clamp(max=1e6)
        self.log("val/loss", loss)
        self.log("val/score", -loss)

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=self.hparams.learning_rate, weight_decay=self.hparams.weight_decay)
        total = max(1, int(self.trainer.estimated_stepping_batches))
        warm = int(round(self.hparams.warmup_ratio * total))
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm) if warm else 1.0)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


class ToyData(L.LightningDataModule):
    """Random linear-regression data: ``y = x @ w + noise``, the same for every seed of the sweep."""

    def __init__(self, n_train: int = 256, n_val: int = 64, batch_size: int = 16) -> None:
        """Configure the data.

        Args:
            n_train: training rows.
            n_val: validation rows.
            batch_size: rows per batch.
        """
        super().__init__()
        g = torch.Generator().manual_seed(1234)
        w = torch.randn(8, generator=g)
        x = torch.randn(n_train + n_val, 8, generator=g)
        y = x @ w + 0.1 * torch.randn(n_train + n_val, generator=g)
        self.train_set = TensorDataset(x[:n_train], y[:n_train])
        self.val_set = TensorDataset(x[n_train:], y[n_train:])
        self.batch_size = batch_size

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=self.batch_size)
