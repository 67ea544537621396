"""TSDAE continued pretraining of a sentence embedder: rebuild each text from the pooled embedding of its remains."""

from __future__ import annotations

import copy
import logging
from typing import Literal

import torch
import torch.nn.functional as F
from lightning.pytorch.cli import OptimizerCallable
from torchmetrics import MeanMetric
from transformers import AutoModel, AutoModelForCausalLM
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

from domainbert.core.compat import attached_trainer
from domainbert.core.embed import POOLINGS
from domainbert.core.families import family
from domainbert.core.hf import check_tokenizer_fits, head_missing, load_model, load_tokenizer, training_config
from domainbert.core.optim import warmup_linear
from domainbert.core.seeding import step_generator
from domainbert.data import contract
from domainbert.data.denoise import Deleter
from domainbert.data.masking import IGNORE_INDEX
from domainbert.errors import DomainBertError
from domainbert.modules.base import HFModule
from domainbert.modules.head_warmup import HeadWarmup, resolve_head_warmup_steps

log = logging.getLogger(__name__)

#: ``head_warmup_steps`` when None: the decoder's cross-attention is new for every checkpoint
DEFAULT_HEAD_WARMUP_STEPS = 100

#: the batch entries an encoder may take, where its tokenizer makes them
INPUT_KEYS = ("input_ids", "attention_mask", "token_type_ids")


def decoder_config(config):
    """A copy of the encoder's ``config`` for its decoder: causal self-attention and cross-attention layers.

    Raises:
        DomainBertError: the family has no causal-LM class in ``transformers`` (DistilBERT, ALBERT).
    """
    model_type = getattr(config, "model_type", None)
    if model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise DomainBertError(
            f"TSDAE: model_type {model_type!r} has no causal-LM class in transformers to build its decoder from "
            "(BERT, RoBERTa, ELECTRA have one)"
        )
    out = copy.deepcopy(config)
    out.is_decoder, out.add_cross_attention = True, True
    return out


def tie_decoder(decoder: torch.nn.Module, encoder: torch.nn.Module) -> list[str]:
    """Make the decoder's weights the encoder's own parameters wherever both have one of the same name and shape.

    ``transformers`` 5 no longer ties an encoder to a decoder (``tie_encoder_decoder`` is gone), so this shares the
    ``nn.Parameter`` objects themselves: the decoder's embeddings, self-attention and feed-forward weights *are*
    the encoder's, so one optimizer step changes both. Only the cross-attention blocks and the LM head's transform
    and bias stay the decoder's own. Modules are not shared (the decoder's self-attention is causal, the
    encoder's is not); an output projection tied to the decoder's input embeddings is tied to the encoder's.

    Args:
        decoder: the causal LM (``BertLMHeadModel``...), built with cross-attention.
        encoder: the bare encoder (``AutoModel``) of the same family and size.

    Returns:
        The tied parameter names (relative to the base models).

    Raises:
        DomainBertError: the decoder shares nothing with the encoder, or has no weights of its own (no
            cross-attention, so the pooled embedding could not reach it).
    """
    base = decoder.base_model
    out, inputs = decoder.get_output_embeddings(), decoder.get_input_embeddings()
    tied_output = out is not None and out.weight is inputs.weight
    own = dict(encoder.named_parameters())
    tied, untied = [], []
    for module_name, module in base.named_modules():
        for name, param in list(module.named_parameters(recurse=False)):
            full = f"{module_name}.{name}" if module_name else name
            shared = own.get(full)
            if shared is not None and shared.shape == param.shape:
                setattr(module, name, shared)
                tied.append(full)
            else:
                untied.append(full)
    if not tied or not untied:
        problem = "shares no weight with the encoder" if not tied else "has no cross-attention"
        raise DomainBertError(f"TSDAE: the decoder {type(decoder).__name__} {problem}")
    if tied_output:
        out.weight = encoder.get_input_embeddings().weight
    return tied


def warmup_constant(warmup_steps: int, offset: int = 0):
    """LR multiplier: 0 → 1 over ``warmup_steps``, then 1 (the constant schedule of the TSDAE paper).

    ``offset`` delays the schedule: steps before it return 0 (used while only the decoder's own weights warm up).
    """

    def fn(step: int) -> float:
        step -= offset
        if step < 0:
            return 0.0
        return min(1.0, (step + 1) / warmup_steps) if warmup_steps > 0 else 1.0

    return fn


class TsdaeModule(HeadWarmup, HFModule):
    """TSDAE continued pretraining (DAPT) of a sentence embedder on domain text.

    TSDAE (Wang, Reimers and Gurevych, 2021, "TSDAE: Using Transformer-based Sequential Denoising Auto-Encoder for
    Unsupervised Sentence Embedding Learning"): about ``deletion_ratio`` of each text's tokens are deleted, the
    encoder embeds what remains (pooled as the model was trained: the mean for sentence-transformers checkpoints such
    as all-MiniLM-L6-v2), and a decoder reconstructs the *original* text token by token, attending to that one
    pooled vector alone (its only cross-attention input). The loss is the cross-entropy of the original tokens. To
    rebuild a text from one vector, the vector must hold what the text says: the objective trains the pooled
    embedding itself, on the domain's text.

    The decoder is the causal-LM class of the encoder's family (``BertLMHeadModel``, ``RobertaForCausalLM``,
    ``ElectraForCausalLM``) with cross-attention, its weights tied to the encoder's (the paper's best setting):
    only its cross-attention and LM-head transform are its own, and a checkpoint without a trained LM head starts it
    from the embeddings (``head_init``). The export (``hf/``) is the bare encoder (``AutoModel``) with the
    sentence-transformers pooling files, loadable by every fine-tuning module. Use ``CorpusDataModule`` with
    ``packing: false`` (one text per example). The paper trained with batches of 8 at a constant 3e-5.

    The decoder's cross-attention starts untrained for every checkpoint (and its LM-head transform for one without
    a trained MLM head), and from the first step their gradients reach the encoder through the pooled embedding.
    ``head_warmup_steps`` (100 by default) first trains the decoder's own weights alone, the encoder frozen, as
    ``MaskedLMModule`` does for a missing MLM head (linear probing before fine-tuning, Kumar et al. 2022). Without
    it, the task's frozen probe fell within the first checks on python-docs; with it, the first check after the
    warm-up stayed near the base on both bundled domains (docs/benchmarks/adaptation.md). A checkpoint saved before
    the warm-up existed resumes with ``--model.head_warmup_steps 0`` (its optimizer has the unsplit groups).

    Validation reports ``val/loss`` (the same loss, with the deletion noise fixed by ``seed``) and ``val/token_acc``
    (the share of original tokens the decoder predicts).
    """

    def __init__(
        self,
        init_from: str,
        learning_rate: float = 3e-5,
        weight_decay: float = 0.0,
        warmup_ratio: float = 0.0,
        lr_schedule: Literal["constant", "linear"] = "constant",
        deletion_ratio: float = 0.6,
        pooling: Literal["auto", "mean", "cls"] = "auto",
        head_init: Literal["auto", "random", "embeddings"] = "auto",
        head_warmup_steps: int | None = None,
        head_warmup_lr: float = 1e-3,
        hidden_dropout: float | None = None,
        attention_dropout: float | None = None,
        seed: int = 0,
        trust_remote_code: bool = False,
        optimizer: OptimizerCallable | None = None,
    ) -> None:
        """Load the encoder, its tokenizer and the tied decoder.

        Args:
            init_from: local folder (or hub name, where there is a network) of the starting checkpoint.
            learning_rate: peak learning rate; the paper used 3e-5.
            weight_decay: AdamW weight decay (never applied to biases and LayerNorm); the paper used none.
            warmup_ratio: share of the optimizer steps (after any head warm-up) spent warming the LR up linearly.
            lr_schedule: after the warm-up, ``constant`` (the paper's) or ``linear`` decay to 0.
            deletion_ratio: the share of each text's tokens deleted before encoding (the paper's best: 0.6); special
                tokens are kept, and every text keeps at least one token.
            pooling: the sentence embedding the decoder reads: ``mean`` over the tokens, ``cls`` (the first
                token's state), or ``auto``: ``mean`` where the checkpoint's sentence-transformers files say it was
                trained mean-pooled (all-MiniLM-L6-v2), else ``cls`` (the paper's best for BERT). The export records it.
            head_init: how a missing LM head of the decoder starts. ``embeddings``: identity transform, output bias
                from the training data's log unigram frequencies (:mod:`domainbert.core.mlm_head`); ``random``: as
                ``transformers`` initialises it; ``auto``: ``embeddings`` when the head is missing.
            head_warmup_steps: optimizer steps training only the decoder's own weights (its cross-attention, LM-head
                transform and output bias) at ``head_warmup_lr``, the encoder frozen, and with it every decoder weight
                tied to it; then everything trains on the main schedule, whose ``warmup_ratio`` counts the steps after
                this warm-up. None: 100 (the decoder's cross-attention is always new); 0: no warm-up.
            head_warmup_lr: learning rate of the decoder's own weights during their warm-up.
            hidden_dropout: hidden dropout during this training (None keeps the checkpoint's, as the paper trained);
                the export's config keeps the checkpoint's value.
            attention_dropout: attention dropout during this training (None keeps the checkpoint's); exported as
                the checkpoint's.
            seed: seed of the deletion noise: a step's noise depends on (seed, step) only, so resumes are exact.
            trust_remote_code: allow custom modelling code shipped with the checkpoint. Off by default. Yours
                to give on each command (or call): it is never saved in, nor taken from, a checkpoint's
                hyper-parameters (one that sets it is refused).
            optimizer: the optimizer class (default AdamW); its per-group learning rates come from this module.
        """
        super().__init__()
        if lr_schedule not in ("constant", "linear"):
            raise DomainBertError(f"model.lr_schedule={lr_schedule!r}: expected constant or linear")
        self.head_warmup_steps = resolve_head_warmup_steps(head_warmup_steps, DEFAULT_HEAD_WARMUP_STEPS)
        from domainbert.modules.classification import resolve_pooling

        self.pooling = resolve_pooling(pooling, init_from)
        self.save_hyperparameters(ignore=["optimizer", "trust_remote_code"])  # never from a checkpoint
        self.optimizer = optimizer
        self.tokenizer = load_tokenizer(init_from, trust_remote_code=trust_remote_code)
        self.deleter = Deleter(self.tokenizer, deletion_ratio)
        dropout = {"hidden": hidden_dropout, "attention": attention_dropout}
        config, self.export_config = training_config(init_from, dropout, trust_remote_code=trust_remote_code)
        self._load(init_from, config, trust_remote_code)
        self._plan_head(head_init)
        self.encoder_trainable = {n for n, p in self.named_parameters() if p.requires_grad and n.startswith("model.")}
        self.export_source = None  # the trained encoder is the whole export (see ContrastiveModule)
        self.pooling_source, self.export_pooling = init_from, self.pooling
        self.input_keys = tuple(k for k in INPUT_KEYS if k in self.tokenizer.model_input_names)
        self.val_loss, self.val_acc = MeanMetric(), MeanMetric()

    def _load(self, init_from: str, config, trust_remote_code: bool) -> None:
        """Load the encoder and its decoder, and tie the decoder's weights to the encoder's."""
        dec_config = decoder_config(config)
        self.model, missing = load_model(AutoModel, init_from, config=config, trust_remote_code=trust_remote_code)
        check_tokenizer_fits(self.tokenizer, self.model, where=init_from)
        if missing:
            log.info("initialised at random (not in %s): %s", init_from, ", ".join(missing))
        pooler = getattr(self.model, "pooler", None)
        if isinstance(pooler, torch.nn.Module):  # never feeds the loss: frozen (DDP refuses unused parameters)
            pooler.requires_grad_(False)
        auto = AutoModelForCausalLM
        self.decoder, dec_missing = load_model(auto, init_from, config=dec_config, trust_remote_code=trust_remote_code)
        self.tied = tie_decoder(self.decoder, self.model)
        self.head_missing = [k for k in head_missing(self.decoder, dec_missing) if not k.endswith("decoder.weight")]
        self.model.train()
        self.decoder.train()

    def _plan_head(self, head_init: str) -> None:
        """Start a missing LM head from the embeddings (its bias from the data at ``setup``), as ``head_init`` says."""
        if head_init not in ("auto", "random", "embeddings"):
            raise DomainBertError(f"model.head_init={head_init!r}: expected auto, random or embeddings")
        self._init_head_from_data = False
        if self.head_missing and head_init in ("auto", "embeddings"):
            from domainbert.core.mlm_head import identity_transform

            self._init_head_from_data = identity_transform(self.decoder)
        if self.head_missing:
            log.info("%s: the decoder's LM head %s starts %s", self.hparams.init_from, self.head_missing, head_init)

    def setup(self, stage: str) -> None:
        """Refuse sentence pairs; warn on packed blocks; give a missing LM head its output bias from the data."""
        dm = self.attached_datamodule()
        if dm is None:
            return
        if contract.nsp(dm):
            raise DomainBertError("data.nsp is true: sentence pairs are for MaskedLMModule(objective='mlm+nsp')")
        if contract.packing(dm):
            log.warning("data.packing is true: each example is a block of concatenated texts; set packing: false")
        if stage == "fit" and self._init_head_from_data:
            from domainbert.core.mlm_head import unigram_bias_from_data

            if unigram_bias_from_data(self.decoder, dm, exclude=self.tokenizer.all_special_ids):
                log.info("decoder LM head: identity transform, output bias from the data's log unigram frequencies")
            self._init_head_from_data = False

    # -- parameters and schedule ------------------------------------------------------------------
    def is_head_param(self, name: str) -> bool:
        """True for the decoder's own parameters: those tied to the encoder are named (once) under ``model.``."""
        return not name.startswith("model.")

    def head_groups_apart(self) -> bool:
        """Separate decoder and encoder groups only for a warm-up (no warm-up: the optimizer's groups as before)."""
        return self.head_warmup_steps > 0

    def lr_lambdas(self, groups: list[dict], total_steps: int) -> list:
        """Linear warm-up over ``warmup_ratio``, then constant (``lr_schedule: constant``) or linear decay.

        With ``head_warmup_steps`` the decoder's own groups first learn at ``head_warmup_lr`` alone, and that
        schedule starts after them.
        """
        w, warmup = self.head_warmup_steps, self.main_warmup_steps(total_steps)
        linear = self.hparams.lr_schedule == "linear"
        main = warmup_linear(total_steps, warmup, offset=w) if linear else warmup_constant(warmup, offset=w)
        return self.head_warmup_lambdas(groups, main)

    # -- forward ------------------------------------------------------------------------------------
    def model_inputs(self, batch: dict) -> dict:
        """The entries of ``batch`` the encoder takes (``token_type_ids`` only where the tokenizer makes them)."""
        return {k: batch[k] for k in self.input_keys if k in batch}

    def embed(self, inputs: dict) -> torch.Tensor:
        """The pooled sentence embeddings of tokenized ``inputs`` (with ``attention_mask``), ``(n, hidden)``."""
        hidden = self.model(**inputs, return_dict=True).last_hidden_state
        return POOLINGS[self.pooling](hidden, inputs["attention_mask"])

    def noisy(self, batch: dict, salt: int) -> dict:
        """``batch``'s encoder inputs with deletion noise drawn from ``(seed, salt)``."""
        inputs = self.model_inputs(batch)
        if "attention_mask" not in inputs:
            inputs["attention_mask"] = (inputs["input_ids"] != self.deleter.pad_id).long()
        return self.deleter(inputs, generator=step_generator(self.hparams.seed, salt, self.device))

    def decoder_logits(self, input_ids, attention_mask, pooled: torch.Tensor, positions: torch.Tensor):
        """The decoder's vocabulary logits at ``positions`` (a boolean mask), cross-attending to ``pooled`` alone."""
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "use_cache": False, "return_dict": True}
        memory = pooled[:, None, :]  # (n, 1, hidden): the one key and value of every cross-attention
        head = family(self.decoder.config, fallback=True).mlm_head
        if head is None:
            return self.decoder(**inputs, encoder_hidden_states=memory).logits[positions]
        hidden = self.decoder.base_model(**inputs, encoder_hidden_states=memory).last_hidden_state
        return head.logits(self.decoder, hidden[positions])  # the vocabulary projection only where it is scored

    def reconstruct(self, batch: dict, pooled: torch.Tensor) -> dict:
        """The loss of rebuilding ``batch``'s original tokens from ``pooled``: mean cross-entropy over the targets.

        The decoder reads tokens ``0..L-2`` and predicts tokens ``1..L-1``; padding targets are ignored.
        """
        ids = batch["input_ids"]
        mask = batch.get("attention_mask")
        if mask is None:
            mask = (ids != self.deleter.pad_id).long()
        labels = ids[:, 1:].masked_fill(mask[:, 1:] == 0, IGNORE_INDEX)
        positions = labels != IGNORE_INDEX
        target = labels[positions]
        logits = self.decoder_logits(ids[:, :-1], mask[:, :-1], pooled, positions)
        loss = F.cross_entropy(logits.float(), target) if target.numel() else pooled.sum() * 0.0
        return {"loss": loss, "n": target.numel(), "correct": (logits.argmax(-1) == target).sum()}

    def forward(self, batch: dict, salt: int = 0) -> dict:
        """Delete tokens, embed what remains, rebuild the original: ``loss``, ``n`` targets, ``correct`` ones."""
        return self.reconstruct(batch, self.embed(self.noisy(batch, salt)))

    # -- steps --------------------------------------------------------------------------------------
    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        trainer = attached_trainer(self)
        out = self(batch, salt=trainer.fit_loop.total_batch_idx if trainer else batch_idx)  # fresh noise each step
        self.log("train/loss", out["loss"], prog_bar=True, batch_size=batch["input_ids"].shape[0])
        return out["loss"]

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        out = self(batch, salt=-(batch_idx + 1))  # the same noise at every validation
        n = max(out["n"], 1)
        self.val_loss.update(out["loss"], weight=n)
        self.val_acc.update(out["correct"].float() / n, weight=n)

    def test_step(self, batch: dict, batch_idx: int) -> None:
        self.validation_step(batch, batch_idx)

    def end_evaluation(self, stage: str) -> None:
        """Log the epoch's reconstruction loss and token accuracy as ``<stage>/<name>``; reset them."""
        if self.val_loss.update_count == 0:
            return
        scores = {"loss": self.val_loss.compute(), "token_acc": self.val_acc.compute()}
        self.log_dict({f"{stage}/{k}": v for k, v in scores.items()}, prog_bar=stage == "val")
        self.val_loss.reset()
        self.val_acc.reset()
