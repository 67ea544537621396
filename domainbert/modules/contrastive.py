"""Continued pretraining that keeps a sentence embedder's geometry: unsupervised SimCSE on domain text."""

from __future__ import annotations

import logging
from typing import Literal

import torch
import torch.nn.functional as F
from lightning.pytorch.cli import OptimizerCallable
from torchmetrics import MeanMetric
from transformers import AutoModel

from domainbert.core.embed import mean_pool
from domainbert.core.hf import check_tokenizer_fits, load_model, load_tokenizer, training_config
from domainbert.data import contract
from domainbert.errors import DomainBertError
from domainbert.modules.base import HFModule

log = logging.getLogger(__name__)

#: the batch entries an encoder may take, where its tokenizer makes them
INPUT_KEYS = ("input_ids", "attention_mask", "token_type_ids")


def info_nce(z1: torch.Tensor, z2: torch.Tensor, temperature: float) -> torch.Tensor:
    """The InfoNCE loss of SimCSE: row ``i`` of ``z2`` is the positive of row ``i`` of ``z1``, the others negatives.

    Args:
        z1: embeddings of the first view, ``(n, d)``; L2-normalised here (the similarity is the cosine).
        z2: embeddings of the second view of the same ``n`` texts, ``(n, d)``.
        temperature: the cosine similarities are divided by it before the softmax.

    Returns:
        The mean over rows of the cross-entropy of ``cos(z1_i, z2_j) / temperature`` over ``j``, target ``j = i``.

    Raises:
        DomainBertError: fewer than 2 rows (no negatives), or a temperature that is not positive.
    """
    if z1.shape[0] < 2:
        raise DomainBertError(f"contrastive loss on {z1.shape[0]} row(s): in-batch negatives need at least 2 rows")
    if not temperature > 0:
        raise DomainBertError(f"model.temperature={temperature}: expected a positive temperature")
    sim = similarities(z1, z2) / temperature
    return F.cross_entropy(sim, torch.arange(sim.shape[0], device=sim.device))


def similarities(z1: torch.Tensor, z2: torch.Tensor) -> torch.Tensor:
    """The ``(n, n)`` cosine similarities of every row of ``z1`` with every row of ``z2``, in float32."""
    return F.normalize(z1.float(), dim=-1) @ F.normalize(z2.float(), dim=-1).T


def pool(hidden: torch.Tensor, attention_mask: torch.Tensor | None, pooling: str) -> torch.Tensor:
    """One vector per row: the mean of the hidden states over the attended tokens, or the first token's (``cls``).

    Args:
        hidden: the last hidden states, ``(n, length, d)``.
        attention_mask: 1 for tokens, 0 for padding, ``(n, length)``; None when nothing is padded.
        pooling: ``mean`` or ``cls``.
    """
    if pooling == "cls":
        return hidden[:, 0].float()
    if attention_mask is None:
        return hidden.float().mean(dim=1)
    return mean_pool(hidden.float(), attention_mask)


class ContrastiveModule(HFModule):
    """Unsupervised SimCSE continued pretraining (DAPT/TAPT) of a BERT-family encoder on domain text.

    SimCSE (Gao, Yao and Chen, 2021, "SimCSE: Simple Contrastive Learning of Sentence Embeddings", the
    unsupervised variant): each text is encoded twice in training mode, so the two views are the same text under
    two independent dropout masks; the other texts of the batch are the negatives. The loss is the cross-entropy
    of the cosine similarities of every first view with every second view, divided by ``temperature``, with
    each text's own second view as the target (the diagonal). Both views come from one forward pass of the batch
    stacked on itself, each row drawing its own dropout mask.

    Where MLM adapts the token predictions, this objective trains the pooled sentence embedding itself, so a
    mean-pooled sentence embedder (all-MiniLM-L6-v2) keeps its embedding geometry while it reads domain text.
    The export (``hf/``) is the bare encoder (``AutoModel``), loadable by every fine-tuning module. Use
    ``CorpusDataModule`` with ``packing: false`` (one document per example) and ``batch_size`` of 2 or more:
    larger batches give more negatives.

    Validation reports ``val/loss`` (the same loss, with dropout masks fixed by ``seed``), ``val/alignment``
    (the mean cosine of the two views of a text) and ``val/top1`` (the share of texts whose nearest second view
    is their own).
    """

    def __init__(
        self,
        init_from: str,
        learning_rate: float = 3e-5,
        weight_decay: float = 0.01,
        warmup_ratio: float = 0.06,
        temperature: float = 0.05,
        pooling: Literal["mean", "cls"] = "mean",
        hidden_dropout: float | None = None,
        attention_dropout: float | None = None,
        seed: int = 0,
        trust_remote_code: bool = False,
        optimizer: OptimizerCallable | None = None,
    ) -> None:
        """Load the starting encoder and its tokenizer.

        Args:
            init_from: local folder (or hub name, where there is a network) of the starting checkpoint.
            learning_rate: peak learning rate; SimCSE used 3e-5 for BERT-base.
            weight_decay: AdamW weight decay (never applied to biases and LayerNorm).
            warmup_ratio: share of the optimizer steps spent warming the learning rate up linearly.
            temperature: the cosine similarities are divided by it before the softmax (SimCSE: 0.05).
            pooling: the sentence embedding: ``mean`` over the tokens (as sentence-transformers models such as
                all-MiniLM-L6-v2 were trained), or ``cls``, the first token's hidden state.
            hidden_dropout: hidden dropout during this training (None keeps the checkpoint's). Dropout is the
                only augmentation: at 0 the two views are equal and nothing is learnt. The export's config keeps
                the checkpoint's value.
            attention_dropout: attention dropout during this training (None keeps the checkpoint's); exported as
                the checkpoint's.
            seed: seed of the validation dropout masks, so every validation draws the same ones.
            trust_remote_code: allow custom modelling code shipped with the checkpoint. Off by default. Yours
                to give on each command (or call): it is never saved in, nor taken from, a checkpoint's
                hyper-parameters (one that sets it is refused).
            optimizer: the optimizer class (default AdamW); its per-group learning rates come from this module.
        """
        super().__init__()
        if pooling not in ("mean", "cls"):
            raise DomainBertError(f"model.pooling={pooling!r}: expected mean or cls")
        if not temperature > 0:
            raise DomainBertError(f"model.temperature={temperature}: expected a positive temperature")
        self.save_hyperparameters(ignore=["optimizer", "trust_remote_code"])  # never from a checkpoint
        self.optimizer = optimizer
        self.tokenizer = load_tokenizer(init_from, trust_remote_code=trust_remote_code)
        dropout = {"hidden": hidden_dropout, "attention": attention_dropout}
        config, self.export_config = training_config(init_from, dropout, trust_remote_code=trust_remote_code)
        self.model, missing = load_model(AutoModel, init_from, config=config, trust_remote_code=trust_remote_code)
        check_tokenizer_fits(self.tokenizer, self.model, where=init_from)
        if missing:
            log.info("initialised at random (not in %s): %s", init_from, ", ".join(missing))
        self.model.train()  # from_pretrained returns eval mode; dropout is the augmentation
        pooler = getattr(self.model, "pooler", None)
        if isinstance(pooler, torch.nn.Module):  # never feeds the loss: frozen (DDP refuses unused parameters)
            pooler.requires_grad_(False)
        # The export is the whole encoder. Weights of the starting checkpoint are not carried into it: from an MLM
        # checkpoint (keys under ``bert.``) they would be the *untrained* encoder, which a later
        # ``from_pretrained`` of a task head would load in place of the trained one.
        self.export_source = None
        self.pooling_source, self.export_pooling = init_from, pooling  # its sentence-transformers files say so
        self.input_keys = tuple(k for k in INPUT_KEYS if k in self.tokenizer.model_input_names)
        self.val_loss, self.val_alignment, self.val_top1 = MeanMetric(), MeanMetric(), MeanMetric()
        self._warned_single = False

    def setup(self, stage: str) -> None:
        """Refuse data that cannot give negatives (``batch_size`` below 2) or that is sentence pairs."""
        dm = self.attached_datamodule()
        if dm is None:
            return
        batch_size = contract.batch_size(dm)
        if batch_size is not None and batch_size < 2:
            raise DomainBertError(
                f"data.batch_size={batch_size}: the contrastive objective takes its negatives from the other texts "
                "of the batch; set data.batch_size to 2 or more (SimCSE used 64)"
            )
        if contract.nsp(dm):
            raise DomainBertError("data.nsp is true: sentence pairs are for MaskedLMModule(objective='mlm+nsp')")
        if contract.packing(dm):
            log.warning("data.packing is true: each example is a block of concatenated documents, not one text")

    # -- forward ------------------------------------------------------------------------------------
    def model_inputs(self, batch: dict) -> dict:
        """The entries of ``batch`` the encoder takes (``token_type_ids`` only where the tokenizer makes them)."""
        return {k: batch[k] for k in self.input_keys if k in batch}

    def forward(self, batch: dict) -> torch.Tensor:
        """The pooled sentence embeddings of ``batch``, ``(n, hidden)``, in float32 (not normalised)."""
        inputs = self.model_inputs(batch)
        hidden = self.model(**inputs, return_dict=True).last_hidden_state
        return pool(hidden, inputs.get("attention_mask"), self.hparams.pooling)

    def two_views(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """Two embeddings of each text: one forward pass of the batch stacked on itself (two dropout masks)."""
        n = batch["input_ids"].shape[0]
        doubled = {k: torch.cat([v, v]) for k, v in self.model_inputs(batch).items()}
        z = self(doubled)
        return z[:n], z[n:]

    def _rows(self, batch: dict) -> int:
        """The rows of ``batch``; warns once when a batch has a single row (a last partial batch), which is skipped."""
        n = int(batch["input_ids"].shape[0])
        if n < 2 and not self._warned_single:
            log.warning("a batch of %d row has no negatives and is skipped (a last partial batch)", n)
            self._warned_single = True
        return n

    # -- steps --------------------------------------------------------------------------------------
    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor | None:
        n = self._rows(batch)
        if n < 2:
            return None
        z1, z2 = self.two_views(batch)
        loss = info_nce(z1, z2, self.hparams.temperature)
        self.log("train/loss", loss, prog_bar=True, batch_size=n)
        return loss

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        """The training loss on validation rows, with the dropout masks fixed by ``(seed, batch_idx)``."""
        n = self._rows(batch)
        if n < 2:
            return
        was_training = self.model.training
        device = self.device
        devices = [device.index or 0] if device.type != "cpu" else []
        with torch.random.fork_rng(devices=devices, device_type=device.type if devices else None):
            torch.manual_seed(self.hparams.seed + batch_idx)
            self.model.train()  # dropout is the augmentation, also here
            try:
                with torch.no_grad():
                    z1, z2 = self.two_views(batch)
            finally:
                self.model.train(was_training)
        sim = similarities(z1, z2)
        loss = F.cross_entropy(sim / self.hparams.temperature, torch.arange(n, device=sim.device))
        self.val_loss.update(loss, weight=n)
        self.val_alignment.update(sim.diagonal().mean(), weight=n)
        self.val_top1.update((sim.argmax(dim=-1) == torch.arange(n, device=sim.device)).float().mean(), weight=n)

    def test_step(self, batch: dict, batch_idx: int) -> None:
        self.validation_step(batch, batch_idx)

    def end_evaluation(self, stage: str) -> None:
        """Log the epoch's loss, alignment and top-1 as ``<stage>/<name>``; reset them."""
        if self.val_loss.update_count == 0:
            return
        scores = {"loss": self.val_loss, "alignment": self.val_alignment, "top1": self.val_top1}
        self.log_dict({f"{stage}/{k}": m.compute() for k, m in scores.items()}, prog_bar=stage == "val")
        for metric in scores.values():
            metric.reset()
