"""``fp32``: the model as a Hugging Face folder (safetensors), which ``transformers`` loads as it is.

Also the format of ``student/`` (the model, re-saved with its tokenizer) and ``pruned/`` (its pruned heads recorded
in the config as ``domainbert_pruned_heads``, rebuilt before the weights load). It runs as it was scored: in bf16
where its record says so and bf16 is native here (:mod:`domainbert.core.scoring`).
"""

from __future__ import annotations

from pathlib import Path

from torch import nn

from domainbert.core.hf import write_modeling_file
from domainbert.core.quiet import quiet_transformers
from domainbert.core.scoring import runs_bf16
from domainbert.deploy.folders import hf_model
from domainbert.deploy.formats.interface import ExportFormat, WriteContext, Written


class Fp32(ExportFormat, name="fp32", order=0):
    """float32 weights in a plain Hugging Face folder (no ``domainbert_variant.json``)."""

    def write(self, model: nn.Module, folder: Path, ctx: WriteContext) -> Written:
        with quiet_transformers():
            model.save_pretrained(folder)
        write_modeling_file(model, folder)
        extra = {"runtime": "bf16 autocast, as scored in training"} if runs_bf16(model.config) else {}
        return Written(model, info=None, extra=extra)

    def load(self, folder: Path, config, info: dict, trust_pickle: bool = False) -> nn.Module:
        return hf_model(folder, config)

    def runner(self, model: nn.Module):
        """As :func:`~domainbert.deploy.classifier.classify` runs it (:func:`~domainbert.deploy.bench.served_runner`).

        In bf16 where it was scored in bf16 and this machine runs bf16 natively.
        """
        from domainbert.deploy.bench import served_runner

        return served_runner(model)
