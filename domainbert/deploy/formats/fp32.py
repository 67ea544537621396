"""``fp32``: the model as a Hugging Face folder (safetensors), which ``transformers`` loads as it is.

Also the format of ``student/`` (the model, re-saved with its tokenizer) and ``pruned/`` (its pruned heads recorded
in the config as ``domainbert_pruned_heads``, rebuilt before the weights load).
"""

from __future__ import annotations

from pathlib import Path

from torch import nn

from domainbert.core.hf import write_modeling_file
from domainbert.core.quiet import quiet_transformers
from domainbert.deploy.folders import hf_model
from domainbert.deploy.formats.interface import ExportFormat, WriteContext, Written


class Fp32(ExportFormat, name="fp32", order=0):
    """float32 weights in a plain Hugging Face folder (no ``domainbert_variant.json``)."""

    def write(self, model: nn.Module, folder: Path, ctx: WriteContext) -> Written:
        with quiet_transformers():
            model.save_pretrained(folder)
        write_modeling_file(model, folder)
        return Written(model, info=None)

    def load(self, folder: Path, config, info: dict, trust_pickle: bool = False) -> nn.Module:
        return hf_model(folder, config)
