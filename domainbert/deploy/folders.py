"""What every variant folder shares: its file names, its model class, and the weights of a pruned structure.

Nothing here runs code from a folder: the class comes from ``transformers`` (or domainbert's own mean-pooling
build), and weights load from safetensors.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from domainbert.core.hf import check_weights_fit
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


#: What to do about a folder whose weights do not fit its model, for the messages.
REFIT = "a model with weights left random would answer at random: export or save the trained model again"


def hf_model(path: Path, config, dtype: torch.dtype = torch.float32) -> nn.Module:
    """The safetensors model in ``path`` in ``dtype``, with its pruned structure when its config records one.

    Raises:
        DomainBertError: the weights do not fit the class the config names: some are missing (``transformers``
            would start them at random: a classifier folder without its head, an empty ``model.safetensors``),
            some have no place in it, or some have another shape.
    """
    if getattr(config, PRUNED_KEY, None):
        model = empty_model(config)
        model.load_state_dict(safetensors_state(path, model), strict=False)
        return model.to(dtype).eval()
    cls = model_class(config)
    try:
        with quiet_transformers():
            model, info = cls.from_pretrained(path, config=config, dtype=dtype, output_loading_info=True)
    except (OSError, RuntimeError, ValueError) as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise DomainBertError(f"{path}: its weights do not load as {cls.__name__}: {first}") from err
    check_weights_fit(
        f"{path}: its weights do not fit {cls.__name__}", info["missing_keys"], info["unexpected_keys"], REFIT
    )
    return model.eval()


def safetensors_state(path: Path, model: nn.Module) -> dict[str, torch.Tensor]:
    """The safetensors weights of ``path``, checked to fit ``model`` (a pruned structure)."""
    from safetensors.torch import load_file

    state = {}
    for f in sorted(path.glob("*.safetensors")):
        state.update(load_file(str(f)))
    check_state_fits(path, model, state)
    return state


def check_state_fits(where: Path, model: nn.Module, state: Any) -> None:
    """Raise unless ``state`` is a state dict with exactly ``model``'s weights (``position_ids`` buffers aside).

    Args:
        where: the file (or folder) the state came from, named in the message.
        model: the model it is to load into.
        state: what the file held.

    Raises:
        DomainBertError: one line naming ``where``, and the weights missing and unexpected.
    """
    own = model.state_dict()
    if not isinstance(state, dict) or not state:
        held = "an empty state dict" if isinstance(state, dict) else f"a {type(state).__name__}"
        raise DomainBertError(
            f"{where}: holds {held}; expected a state dict of the model's {len(own)} weights: export the model again"
        )
    missing = [k for k in own if k not in state and not k.endswith("position_ids")]
    unexpected = [k for k in state if k not in own and not str(k).endswith("position_ids")]
    check_weights_fit(f"{where}: its weights do not fit the model", missing, unexpected, REFIT)
