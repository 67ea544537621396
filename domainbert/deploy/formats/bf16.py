"""``bf16``: bf16 weights, run in bf16 as they are (fast on CPUs with AMX or AVX512-BF16).

Every operation reads bf16, as ``pipeline()`` runs a model loaded with ``dtype=torch.bfloat16``: no float32
residual stream and no autocast casts, so it answers faster than the float32 folder served under bf16 autocast, with
logits a little different from that folder's (its own report scores it as it is served). Written for a
``--teacher`` too (``teacher_bf16/``), like the int8 formats.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from domainbert.core.hf import write_modeling_file
from domainbert.core.quiet import quiet_transformers
from domainbert.deploy.folders import hf_model
from domainbert.deploy.formats.interface import ExportFormat, WriteContext, Written
from domainbert.deploy.quantize import to_bf16


class Bf16(ExportFormat, name="bf16", option="bf16", order=10, teacher=True):
    """bf16 weights in a Hugging Face folder, run in bf16 as they are."""

    def write(self, model: nn.Module, folder: Path, ctx: WriteContext) -> Written:
        half = to_bf16(model)
        with quiet_transformers():
            half.save_pretrained(folder)
        write_modeling_file(half, folder)
        return Written(half, info={}, extra={"runtime": "bf16 weights, run as they are"})

    def load(self, folder: Path, config, info: dict, trust_pickle: bool = False) -> nn.Module:
        return hf_model(folder, config, dtype=torch.bfloat16)

    def runner(self, model: nn.Module):
        from domainbert.deploy.bench import TorchRunner

        return TorchRunner(model, bf16=True)
