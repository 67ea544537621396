"""Numerical faults: a non-finite loss stops training with the step and last checkpoint named, or is skipped."""

import lightning.pytorch as L
import pytest
import torch

from domainbert.core.callbacks import TrainingGuard
from domainbert.data.corpus import CorpusDataModule
from domainbert.errors import DomainBertError
from domainbert.modules.mlm import MaskedLMModule


class PoisonAt(L.Callback):
    """Make the loss non-finite from a given step on, by poisoning the input embedding."""

    def __init__(self, step):
        self.step = step

    def on_train_batch_start(self, trainer, module, batch, idx):
        if trainer.global_step == self.step:
            with torch.no_grad():
                module.model.get_input_embeddings().weight[:, 0] = float("nan")


def _fit(tiny_bert, corpus_file, tmp_path, guard, steps=6, poison=2):
    module = MaskedLMModule(str(tiny_bert), head_warmup_steps=0)
    dm = CorpusDataModule(train=str(corpus_file), val_ratio=0.0, max_length=32, batch_size=4, max_documents=64)
    dm.connect(module.tokenizer)
    trainer = L.Trainer(
        max_steps=steps,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        default_root_dir=tmp_path,
        callbacks=[PoisonAt(poison), guard],
    )
    trainer.fit(module, datamodule=dm)
    return module, trainer


def test_nonfinite_stops_and_names_the_step(tiny_bert, corpus_file, tmp_path):
    with pytest.raises(DomainBertError, match=r"non-finite loss or gradients at step 2; last good checkpoint: none"):
        _fit(tiny_bert, corpus_file, tmp_path, TrainingGuard())


def test_nonfinite_skip_counts_and_leaves_weights_finite(tiny_bert, corpus_file, tmp_path):
    guard = TrainingGuard(nonfinite="skip")
    module, trainer = _fit(tiny_bert, corpus_file, tmp_path, guard, steps=6, poison=5)
    assert guard.skipped == 1
    assert trainer.global_step == 6
    finite = [torch.isfinite(p).all() for n, p in module.named_parameters() if "word_embeddings" not in n]
    assert all(finite)


def test_release_memory_trims_the_heap_after_every_evaluation_batch(tiny_bert, corpus_file, tmp_path):
    calls = []
    guard = TrainingGuard()
    assert guard._trim is not None  # glibc on the Linux machines this runs on
    guard._trim = calls.append
    module = MaskedLMModule(str(tiny_bert), head_warmup_steps=0)
    dm = CorpusDataModule(train=str(corpus_file), val_ratio=0.2, max_length=32, batch_size=4, max_documents=64)
    dm.connect(module.tokenizer)
    trainer = L.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False, callbacks=[guard])
    trainer.validate(module, datamodule=dm)
    assert len(calls) == trainer.num_val_batches[0] > 1 and set(calls) == {0}
    assert TrainingGuard(release_memory=False)._trim is None
