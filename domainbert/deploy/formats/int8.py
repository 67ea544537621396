"""``int8``: dynamic int8 quantization of every ``nn.Linear`` (:func:`~domainbert.deploy.quantize.quantize_int8`).

The folder holds the config and ``model_int8.pt``, a state dict: torch.ao's loads as plain tensors
(``weights_only=True``); torchao's needs a full unpickling, which happens only with ``trust_pickle``.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import torch
from torch import nn

from domainbert.core.quiet import quiet_typed_storage
from domainbert.deploy.folders import INT8_WEIGHTS, TRUST_FLAG, check_state_fits, empty_model
from domainbert.deploy.formats.interface import ExportFormat, WriteContext, Written, float32_activations
from domainbert.deploy.quantize import quantize_int8
from domainbert.errors import DomainBertError

#: int8's options: the backend (``auto``: torchao when installed and faster here, else torch.ao; ``torchao``;
#: ``torch``) and per-output-channel weight scales (more accurate; False: one scale per tensor; torchao's int8 is
#: always per channel)
INT8_OPTIONS = {"int8_backend": "auto", "int8_per_channel": True}


class Int8(ExportFormat, name="int8", option="int8", order=20, teacher=True, options=INT8_OPTIONS):
    """Dynamic int8 Linear layers (torchao or torch.ao), saved as a state dict for PyTorch.

    Options (:data:`INT8_OPTIONS`): ``int8_backend`` (``auto``, ``torchao``, ``torch``) and ``int8_per_channel``.
    """

    def write(self, model: nn.Module, folder: Path, ctx: WriteContext) -> Written:
        backend, per_channel = self.option_value(ctx, "int8_backend"), self.option_value(ctx, "int8_per_channel")
        q, info = quantize_int8(model, backend, probe=ctx.probe, per_channel=per_channel)
        extra = {"int8_backend": info["backend"], "int8_per_channel": info["per_channel"]}
        if "probe_ms" in info:
            extra["int8_backend_probe_ms"] = info["probe_ms"]
        torch.save(q.state_dict(), folder / INT8_WEIGHTS)
        float32_activations(model.config).save_pretrained(folder)
        return Written(q, info=info, extra=extra)

    def load(self, folder: Path, config, info: dict, trust_pickle: bool = False) -> nn.Module:
        backend = info.get("backend", "torch")
        if backend != "torch" and not trust_pickle:
            raise DomainBertError(
                f"{folder}: its int8 weights ({INT8_WEIGHTS}, backend {backend!r}) load only by unpickling, "
                f"which can run code; pass {TRUST_FLAG} only for a folder you trust (or load its int8 ONNX variant)"
            )
        model, _ = quantize_int8(empty_model(config), backend, probe=None)
        try:
            with quiet_typed_storage():
                state = torch.load(folder / INT8_WEIGHTS, map_location="cpu", weights_only=not trust_pickle)
        except (pickle.UnpicklingError, RuntimeError, AttributeError, TypeError, ValueError, EOFError) as err:
            raise DomainBertError(
                f"{folder / INT8_WEIGHTS}: not loadable as plain tensors ({type(err).__name__}); it may hold code. "
                f"Pass {TRUST_FLAG} only for a folder you trust"
            ) from err
        except OSError as err:
            raise DomainBertError(f"{folder / INT8_WEIGHTS}: cannot be read: {err.strerror or err}") from err
        check_state_fits(folder / INT8_WEIGHTS, model, state)
        model.load_state_dict(state, assign=backend == "torchao")
        return model.eval()
