"""Continued masked-LM pretraining (DAPT/TAPT) of any Hugging Face encoder with an MLM head, in full or through LoRA.

LoRA (``lora``) trains low-rank adapters on the encoder's attention (or feed-forward) layers and the MLM head in
full, the encoder's own weights frozen, so the encoder moves less than in full DAPT; the export merges the adapters
in. On the command line ``--model.lora "{r: 8}"``; in a pipeline config, a DAPT or TAPT stage's overrides::

    dapt:
      enabled: true
      args: ["--model.lora", "{r: 8}", "--model.learning_rate", "5.0e-4"]
"""

from __future__ import annotations

import logging
from typing import Literal

import torch
import torch.nn.functional as F
from lightning.pytorch.cli import OptimizerCallable
from torchmetrics import MeanMetric
from transformers import AutoModelForMaskedLM, AutoModelForPreTraining

from domainbert.core.compat import attached_trainer
from domainbert.core.families import family
from domainbert.core.hf import check_tokenizer_fits, load_model, load_tokenizer, training_config
from domainbert.core.optim import warmup_linear
from domainbert.core.seeding import step_generator
from domainbert.data import contract
from domainbert.data.masking import IGNORE_INDEX, Masker
from domainbert.errors import DomainBertError
from domainbert.modules.base import HFModule, enable_gradient_checkpointing
from domainbert.modules.finetune import lora_hparam
from domainbert.modules.head_warmup import HeadWarmup, resolve_head_warmup_steps
from domainbert.modules.lora import LoraSettings, apply_encoder_lora, as_settings, merged

log = logging.getLogger(__name__)


class MaskedLMModule(HeadWarmup, HFModule):
    """Masked-LM (optionally +NSP) continued pretraining of a BERT-family encoder.

    The default learning rate follows domain-adaptive pretraining practice (Gururangan et al., 2020): about a
    tenth of the original pretraining LR, 5e-5 or below at BERT-base scale, so the encoder adapts without
    forgetting. Logits are computed only at the masked positions (the hidden states are gathered before the
    vocabulary projection), which gives the same loss as the full computation at a fraction of its cost.

    Checkpoints without a trained MLM head (sentence-embedding models such as all-MiniLM-L6-v2, task
    fine-tuned models) get a head warm-up: the head alone trains, with the encoder frozen, before the
    encoder is unfrozen. Training a random head and the encoder together at once costs downstream accuracy.

    With ``lora`` the encoder's weights stay frozen throughout; "unfrozen" then means that its adapters train.
    """

    def __init__(
        self,
        init_from: str,
        learning_rate: float = 5e-5,
        weight_decay: float = 0.01,
        warmup_ratio: float = 0.1,
        mlm_probability: float = 0.15,
        whole_word_mask: bool = False,
        objective: Literal["mlm", "mlm+nsp"] = "mlm",
        head_warmup_steps: int | None = None,
        head_warmup_lr: float = 1e-3,
        head_init: Literal["auto", "random", "embeddings"] = "auto",
        hidden_dropout: float | None = 0.0,
        attention_dropout: float | None = 0.0,
        sparse_logits: bool = True,
        compile: bool = False,
        gradient_checkpointing: bool = False,
        seed: int = 0,
        trust_remote_code: bool = False,
        lora: LoraSettings | None = None,
        optimizer: OptimizerCallable | None = None,
    ) -> None:
        """Load the starting checkpoint and its tokenizer.

        Args:
            init_from: local folder (or hub name, where there is a network) of the starting checkpoint.
            learning_rate: peak learning rate of the encoder; about 1/10 of the original pretraining LR.
            weight_decay: AdamW weight decay (never applied to biases and LayerNorm).
            warmup_ratio: share of the optimizer steps (after any head warm-up) spent warming the LR up linearly.
            mlm_probability: share of tokens selected for prediction (80% [MASK], 10% random, 10% unchanged).
            whole_word_mask: select whole words rather than single sub-word tokens.
            objective: ``mlm``, or ``mlm+nsp`` for checkpoints with a next-sentence head (the data must then
                provide sentence pairs: ``CorpusDataModule(nsp=True)``).
            head_warmup_steps: steps training only the MLM head, encoder frozen. None: 100 when the checkpoint
                lacks trained head weights, else 0.
            head_warmup_lr: learning rate of the head during its warm-up.
            head_init: how a missing MLM head starts. ``embeddings``: identity transform, decoder tied to the
                input embeddings, output bias from the training data's log unigram frequencies
                (:mod:`domainbert.core.mlm_head`), so it predicts from step 0; ``random``: as ``transformers``
                initialises it; ``auto``: ``embeddings`` when the head is missing. A trained head is never touched.
            hidden_dropout: hidden dropout during this training (None keeps the checkpoint's). 0 by default, as in
                recent MLM recipes: on all-MiniLM-L6-v2 it trained faster on a CPU and reached a lower validation
                perplexity, for the same downstream accuracy (docs/benchmarks/speed.md, "DAPT defaults"). The export's
                config keeps the checkpoint's value, so fine-tuning from it gets the dropout it expects.
            attention_dropout: attention dropout during this training (None keeps the checkpoint's); exported
                as the checkpoint's, like ``hidden_dropout``.
            sparse_logits: compute vocabulary logits only at masked positions (same loss, much faster).
            compile: ``torch.compile`` the encoder (pays a compile time up front; helps long runs).
            gradient_checkpointing: recompute each layer's activations in the backward pass instead of keeping
                them (less memory for longer blocks or larger batches, about a third slower; same gradients).
            seed: seed of the mask draws; masks depend on (seed, global step) only, so resumes are exact.
            trust_remote_code: allow custom modelling code shipped with the checkpoint. Off by default. Yours
                to give on each command (or call): it is never saved in, nor taken from, a checkpoint's
                hyper-parameters (one that sets it is refused).
            lora: LoRA settings; None trains the whole encoder. Any value (``{}`` for the defaults, ``{r: 8}``)
                freezes the encoder's weights (its input embeddings, and the decoder tied to them, included), adds
                adapters to its family's attention query and value (``target_modules`` names others, the
                feed-forward layers too: ``[query, key, value, dense]``) and trains them with the MLM head's own
                weights in full. The export merges the adapters in: a plain checkpoint, no peft needed to load it.
                Adapters learn at about ten times a full DAPT's rate (``learning_rate: 5.0e-4``). In a pipeline:
                ``dapt: {args: ["--model.lora", "{r: 8}"]}`` (the module docstring).
            optimizer: the optimizer class (default AdamW); its per-group learning rates come from this module.
        """
        super().__init__()
        self.save_hyperparameters(ignore=["optimizer", "trust_remote_code"])  # never from a checkpoint
        if isinstance(lora, LoraSettings):
            self.save_hyperparameters({"lora": lora_hparam(lora)})  # checkpoints keep plain data (``weights_only``)
        self.optimizer = optimizer
        self.export_source = init_from
        missing = self._load(init_from, objective, hidden_dropout, attention_dropout, trust_remote_code)
        if gradient_checkpointing:
            enable_gradient_checkpointing(self.model)
        self._add_adapters(as_settings(lora), missing)
        self.masker = Masker(self.tokenizer, probability=mlm_probability, whole_word=whole_word_mask)
        self._plan_head(missing, head_init, head_warmup_steps)
        head = family(self.model.config, fallback=True).mlm_head
        self._head_fn = head.logits if sparse_logits and head is not None else None
        self._encoder_frozen = False
        self._encoder = None
        self.val_loss, self.val_acc = MeanMetric(), MeanMetric()
        self.val_nsp_acc = MeanMetric()

    def _load(self, init_from: str, objective: str, hidden_dropout, attention_dropout, trust_remote_code: bool):
        """Load the tokenizer and the model with its MLM (and NSP) head; return the weights it lacked."""
        self.tokenizer = load_tokenizer(init_from, trust_remote_code=trust_remote_code)
        dropout = {"hidden": hidden_dropout, "attention": attention_dropout}
        config, self.export_config = training_config(init_from, dropout, trust_remote_code=trust_remote_code)
        auto = AutoModelForPreTraining if objective == "mlm+nsp" else AutoModelForMaskedLM
        self.model, missing = load_model(auto, init_from, config=config, trust_remote_code=trust_remote_code)
        if objective == "mlm+nsp" and not _has_nsp_head(self.model):
            raise DomainBertError(
                f"{init_from}: objective 'mlm+nsp' needs a checkpoint with a next-sentence head "
                f"({type(self.model).__name__} has none); use objective: mlm"
            )
        check_tokenizer_fits(self.tokenizer, self.model, where=init_from)
        self.model.train()
        return missing

    def _add_adapters(self, settings: LoraSettings | None, missing: list[str]) -> None:
        """With LoRA settings, insert the adapters into ``self.model`` (in place) and freeze the encoder's weights.

        ``self.model`` stays the ``transformers`` model, adapters inside, so parameter names, the sparse-logits
        head, the probe watch and checkpoints see the same tree; the peft wrapper is kept outside the module tree
        (:meth:`hf_model` merges through it). :attr:`encoder_trainable` names the encoder's parameters that train
        when it is not frozen: None for all of them, else the adapters (and any encoder weight the checkpoint
        lacked).
        """
        object.__setattr__(self, "_peft", None)  # outside the module tree: the weights are self.model's
        self.encoder_trainable: set[str] | None = None
        if settings is None:
            return
        object.__setattr__(self, "_peft", apply_encoder_lora(self.model, settings, missing))
        named = self.named_parameters()
        self.encoder_trainable = {n for n, p in named if p.requires_grad and not self.is_head_param(n)}

    def hf_model(self):
        """The plain model to export: the LoRA adapters merged in (a copy; the module keeps its adapters)."""
        if self._peft is None:
            return self.model
        return merged(self._peft).train(self.model.training)

    def _plan_head(self, missing: list[str], head_init: str, head_warmup_steps: int | None) -> None:
        """Find the missing MLM head weights; plan their initialisation and the head-only warm-up."""
        prefix = self.model.base_model_prefix
        self.head_missing = [k for k in missing if not k.startswith(prefix + ".") and not k.endswith("decoder.weight")]
        self._init_head_from_data = False
        if self.head_missing and head_init in ("auto", "embeddings"):
            from domainbert.core.mlm_head import identity_transform

            self._init_head_from_data = identity_transform(self.model)
        self.head_warmup_steps = resolve_head_warmup_steps(head_warmup_steps, 100 if self.head_missing else 0)
        if self.head_missing:
            log.warning(
                "%s: the MLM head weights %s were missing and start random; training the head alone for %d steps "
                "(encoder frozen, lr %.1e) before unfreezing the %s",
                self.hparams.init_from,
                self.head_missing,
                self.head_warmup_steps,
                self.hparams.head_warmup_lr,
                "encoder's LoRA adapters" if self._peft is not None else "encoder",
            )

    def setup(self, stage: str) -> None:
        """Refuse data that does not fit the objective (sentence pairs exactly when the objective is mlm+nsp).

        A missing head started from the embeddings gets its output bias from the training data here; a resumed
        run then restores its trained head over it (Lightning restores checkpoints after ``setup``).
        """
        dm = self.attached_datamodule()
        if stage == "fit" and self._init_head_from_data and dm is not None:
            from domainbert.core.mlm_head import unigram_bias_from_data

            if unigram_bias_from_data(self.model, dm, exclude=self.tokenizer.all_special_ids):
                log.info("MLM head: identity transform, output bias from the data's log unigram frequencies")
            self._init_head_from_data = False
        nsp = contract.nsp(dm)
        if nsp is None:
            return
        if self.hparams.objective == "mlm+nsp" and not nsp:
            raise DomainBertError(
                "model.objective 'mlm+nsp' needs sentence pairs, but data.nsp is false: set data.nsp: true "
                "(or model.objective: mlm); without pairs the next-sentence head would train on nothing"
            )
        if self.hparams.objective == "mlm" and nsp:
            raise DomainBertError("data.nsp is true but model.objective is 'mlm': set model.objective: mlm+nsp")

    # -- parameters and schedule ------------------------------------------------------------------
    def is_head_param(self, name: str) -> bool:
        """True for parameters outside the base encoder (the MLM/NSP heads)."""
        return not name.startswith("model." + self.model.base_model_prefix + ".")

    def lr_lambdas(self, groups: list[dict], total_steps: int) -> list:
        """Head groups: ``head_warmup_lr`` during the head warm-up; then every group follows the main schedule."""
        main = warmup_linear(total_steps, self.main_warmup_steps(total_steps), offset=self.head_warmup_steps)
        return self.head_warmup_lambdas(groups, main)

    def configure_model(self) -> None:
        if self.hparams.compile and self._encoder is None:
            # kept out of the module tree, so checkpoints hold each weight once
            object.__setattr__(self, "_encoder", torch.compile(self.model.base_model, dynamic=True))

    # -- forward ------------------------------------------------------------------------------------
    def _generator(self, salt: int) -> torch.Generator:
        return step_generator(self.hparams.seed, salt, self.device)

    def mask(self, batch: dict, salt: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Masked inputs and labels; reuses ``batch['labels']`` when the data already masked."""
        if "labels" in batch:
            return batch["input_ids"], batch["labels"]
        return self.masker(batch["input_ids"], batch.get("attention_mask"), generator=self._generator(salt))

    def model_inputs(self, batch: dict, input_ids: torch.Tensor) -> dict:
        """The keyword arguments the encoder takes from ``batch``."""
        keys = ("attention_mask", "token_type_ids")
        return {"input_ids": input_ids, **{k: batch[k] for k in keys if k in batch}}

    def forward(self, batch: dict, salt: int = 0) -> dict:
        """Mask ``batch``; return ``loss`` (mean over masked tokens), ``n``, NSP terms and, evaluating, ``correct``."""
        input_ids, labels = self.mask(batch, salt)
        inputs = self.model_inputs(batch, input_ids)
        sel = labels != IGNORE_INDEX
        target = labels[sel]
        out: dict = {}
        if self._head_fn is not None:
            # `is not None`, not `or`: a compiled module's truth test calls len(), which it does not support
            encoder = self._encoder if self._encoder is not None else self.model.base_model
            enc = encoder(**inputs, return_dict=True)
            hidden = enc.last_hidden_state[sel]
            logits = self._head_fn(self.model, hidden)
            pooled = getattr(enc, "pooler_output", None)
        else:
            res = self.model(**inputs, return_dict=True)
            logits = (res.logits if hasattr(res, "logits") else res.prediction_logits)[sel]
            pooled = None
            out["seq_relationship_logits"] = getattr(res, "seq_relationship_logits", None)
        loss = F.cross_entropy(logits.float(), target) if target.numel() else logits.sum() * 0.0
        out.update(loss=loss, n=target.numel())
        if not self.training:  # evaluation logs the accuracy; a training step does not need the vocabulary's argmax
            out["correct"] = (logits.argmax(-1) == target).sum()
        if "next_sentence_label" in batch:
            nsp_logits = out.get("seq_relationship_logits")
            if nsp_logits is None:
                nsp_logits = self.model.cls.seq_relationship(pooled)
            nsp_loss = F.cross_entropy(nsp_logits.float(), batch["next_sentence_label"])
            out["nsp_loss"] = nsp_loss
            out["nsp_correct"] = (nsp_logits.argmax(-1) == batch["next_sentence_label"]).float().mean()
            out["loss"] = loss + nsp_loss
        return out

    # -- steps --------------------------------------------------------------------------------------
    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        if self.hparams.objective == "mlm+nsp" and "next_sentence_label" not in batch:
            raise DomainBertError(
                "model.objective 'mlm+nsp': the training batches carry no next_sentence_label (sentence pairs); "
                "use CorpusDataModule with data.nsp: true, or model.objective: mlm"
            )
        trainer = attached_trainer(self)
        out = self(batch, salt=trainer.fit_loop.total_batch_idx if trainer else batch_idx)
        self.log("train/loss", out["loss"], prog_bar=True)
        if "nsp_loss" in out:
            self.log("train/nsp_loss", out["nsp_loss"])
        return out["loss"]

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        out = self(batch, salt=-(batch_idx + 1))  # the same masks at every validation
        n = max(out["n"], 1)
        self.val_loss.update(out["loss"] if "nsp_loss" not in out else out["loss"] - out["nsp_loss"], weight=n)
        self.val_acc.update(out["correct"].float() / n, weight=n)
        if "nsp_correct" in out:
            self.val_nsp_acc.update(out["nsp_correct"], weight=batch["input_ids"].shape[0])

    def test_step(self, batch: dict, batch_idx: int) -> None:
        self.validation_step(batch, batch_idx)

    def end_evaluation(self, stage: str) -> None:
        """Log the epoch's masked-LM loss, perplexity and accuracy (and NSP accuracy on validation); reset them."""
        if self.val_loss.update_count == 0:
            return
        loss = self.val_loss.compute()
        scores = {"loss": loss, "perplexity": torch.exp(loss), "masked_acc": self.val_acc.compute()}
        self.log_dict({f"{stage}/{k}": v for k, v in scores.items()}, prog_bar=stage == "val")
        if self.val_nsp_acc.update_count:
            if stage == "val":
                self.log("val/nsp_acc", self.val_nsp_acc.compute())
            self.val_nsp_acc.reset()
        self.val_loss.reset()
        self.val_acc.reset()


def _has_nsp_head(model) -> bool:
    cls = getattr(model, "cls", None)
    return cls is not None and hasattr(cls, "seq_relationship")
