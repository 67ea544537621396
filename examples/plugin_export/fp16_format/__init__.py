"""An example export format from another package: float16 weights on disk, run in float32.

The folder holds half the bytes of the fp32 one (a smaller download or image) and loads back as a float32 model,
so it runs as fast as fp32 on any CPU, at fp16's rounding of the weights. Installed, ``domainbert export`` writes it
when asked by name::

    domainbert export --model runs/cls/version_0/hf --out exported --formats '[fp16]'

and :func:`domainbert.deploy.load_variant` loads ``exported/fp16`` through :meth:`Fp16Weights.load`, because the
folder's ``domainbert_variant.json`` records ``{"variant": "fp16", "stored": "float16"}``.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from torch import nn

from domainbert.deploy.folders import hf_model
from domainbert.deploy.formats import ExportFormat, WriteContext, Written


class Fp16Weights(ExportFormat, name="fp16", order=20):
    """float16 weights in a Hugging Face folder, loaded back as float32 (half the disk, fp32's speed)."""

    def write(self, model: nn.Module, folder: Path, ctx: WriteContext) -> Written:
        half = copy.deepcopy(model).half()  # the model given is never changed
        half.save_pretrained(folder)
        runs = half.float().eval()  # what load() gives back: the fp16-rounded weights in float32
        return Written(runs, info={"stored": "float16"}, extra={"runtime": "float16 weights run in float32"})

    def load(self, folder: Path, config, info: dict, trust_pickle: bool = False) -> nn.Module:
        return hf_model(folder, config, dtype=torch.float32)  # safetensors only: nothing in the folder runs
