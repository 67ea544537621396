"""What every variant folder shares: its file names, its model class, and the weights of a pruned structure.

Nothing here runs code from a folder: the class comes from ``transformers`` (or domainbert's own mean-pooling
build), and weights load from safetensors.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from domainbert.core.quiet import quiet_transformers
from domainbert.deploy.prune import PRUNED_KEY, prune_heads
from domainbert.errors import DomainBertError

#: The file that names a folder's variant (absent: a plain fp32 Hugging Face folder).
VARIANT_FILE = "domainbert_variant.json"
#: The state dict of an ``int8/`` folder.
INT8_WEIGHTS = "model_int8.pt"
#: The option that lets a pickled int8 folder load.
TRUST_FLAG = "--trust_pickle true"


def model_class(config):
    """The ``transformers`` class named by ``config.architectures`` (the head the model was saved with).

    A mean-pooling classifier's export names a remote-code class; domainbert's own build of it is used instead.
    """
    import transformers

    from domainbert.core.pooled import is_mean_pooled, pooled_class

    if is_mean_pooled(config):
        return pooled_class(config)
    for name in getattr(config, "architectures", None) or []:
        cls = getattr(transformers, name, None)
        if cls is not None:
            return cls
    raise DomainBertError(f"the config names no known architecture ({getattr(config, 'architectures', None)})")


def plain_file(name: str, folder: Path) -> str:
    """``name`` if it names a file directly inside ``folder`` (no path), else a DomainBertError."""
    if not isinstance(name, str) or not name or name in (".", "..") or "/" in name or "\\" in name:
        raise DomainBertError(
            f"{folder / VARIANT_FILE}: field 'file': expected a file name in the folder, got {name!r}"
        )
    return name


def empty_model(config) -> nn.Module:
    """A fresh model of ``config``'s class, its recorded pruned heads removed (``domainbert_pruned_heads``)."""
    pruned = getattr(config, PRUNED_KEY, None) or {}
    setattr(config, PRUNED_KEY, {})  # prune_heads records them again on the fresh model
    model = model_class(config)(config)
    prune_heads(model, pruned)
    return model.eval()


def hf_model(path: Path, config, dtype: torch.dtype = torch.float32) -> nn.Module:
    """The safetensors model in ``path`` in ``dtype``, with its pruned structure when its config records one."""
    if getattr(config, PRUNED_KEY, None):
        model = empty_model(config)
        model.load_state_dict(safetensors_state(path, model), strict=False)
        return model.to(dtype).eval()
    with quiet_transformers():
        model = model_class(config).from_pretrained(path, config=config, dtype=dtype)
    return model.eval()


def safetensors_state(path: Path, model: nn.Module) -> dict[str, torch.Tensor]:
    """The safetensors weights of ``path``, checked to fit ``model`` (a pruned structure)."""
    from safetensors.torch import load_file

    state = {}
    for f in sorted(path.glob("*.safetensors")):
        state.update(load_file(str(f)))
    own = model.state_dict()
    missing = [k for k in own if k not in state and not k.endswith("position_ids")]
    if missing or [k for k in state if k not in own]:
        raise DomainBertError(f"{path}: weights do not fit the pruned model (missing {missing[:3]})")
    return state
