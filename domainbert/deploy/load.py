"""Loading a folder written by ``domainbert export`` (or any Hugging Face folder) back for inference.

Nothing in a folder can make loading run code: weights load from safetensors, ONNX or ``torch.load(...,
weights_only=True)``; only torchao's int8 ``model_int8.pt`` needs a full unpickling, and only on the caller's word.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from torch import nn

from domainbert.core.hf import load_config, load_tokenizer
from domainbert.core.quiet import quiet_transformers
from domainbert.deploy.onnx_export import OnnxModel
from domainbert.deploy.prune import PRUNED_KEY, prune_heads
from domainbert.deploy.quantize import quantize_int8
from domainbert.errors import DomainBertError

#: The file that names a folder's variant (absent: a plain fp32 Hugging Face folder).
VARIANT_FILE = "domainbert_variant.json"
#: The state dict of an ``int8/`` folder.
INT8_WEIGHTS = "model_int8.pt"
VARIANTS = ("fp32", "bf16", "int8", "onnx", "onnx_int8")
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


def _variant_info(path: Path) -> dict:
    f = path / VARIANT_FILE
    if not f.exists():
        return {"variant": "fp32"}
    try:
        info = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise DomainBertError(f"{f}: not readable JSON ({err})") from err
    if not isinstance(info, dict) or info.get("variant") not in VARIANTS:
        raise DomainBertError(f"{f}: field 'variant': expected one of {', '.join(VARIANTS)}")
    return info


def load_variant(path: str | os.PathLike, trust_pickle: bool = False):
    """Load a folder written by ``domainbert export`` (or any HF folder) for inference.

    Nothing in the folder can make it run code: weights load from safetensors, ONNX or ``torch.load(...,
    weights_only=True)``. Only torchao's int8 ``model_int8.pt`` needs a full unpickling, which happens only with
    ``trust_pickle=True`` (``--trust_pickle true``), never because the folder's ``domainbert_variant.json`` asks.

    Pruned heads (``domainbert_pruned_heads`` in the config) are removed from a fresh model before its
    weights load; an ``int8`` folder is rebuilt with the same quantization backend; an ``onnx`` or ``onnx_int8``
    folder runs its ``model.onnx`` in onnxruntime behind the same call interface (:class:`OnnxModel`).

    Args:
        path: the folder.
        trust_pickle: allow a full (code-running) unpickling of torchao's ``model_int8.pt``; only for folders you
            made yourself or otherwise trust.

    Returns:
        ``(model, tokenizer, info)``; ``info["variant"]`` is ``fp32``, ``bf16``, ``int8``, ``onnx`` or ``onnx_int8``.
        The model is in eval mode; a classifier's ``model.config.id2label`` names its labels.

    Example:
        A fine-tuning run's export (``<run>/hf``) or a variant of ``domainbert export`` (``<out>/int8``...), then
        its predictions with :func:`~domainbert.deploy.classify.classify`:

        >>> from domainbert.deploy import classify, load_variant
        >>> model, tokenizer, info = load_variant(folder)
        >>> info["variant"]
        'fp32'
        >>> rows = classify(model, tokenizer, ["a library for fonts"])
        >>> rows[0]["label"] in model.config.id2label.values()
        True

    Raises:
        DomainBertError: a folder that is not an export, or pickled weights without ``trust_pickle``.
    """
    path = Path(path)
    if not (path / "config.json").exists():
        raise DomainBertError(f"{path}: no config.json; expected a folder written by `domainbert export`")
    info = _variant_info(path)
    if info["variant"] == "int8" and info.get("backend", "torch") != "torch" and not trust_pickle:
        raise DomainBertError(
            f"{path}: its int8 weights ({INT8_WEIGHTS}, backend {info.get('backend')!r}) load only by unpickling, "
            f"which can run code; pass {TRUST_FLAG} only for a folder you trust (or load its int8 ONNX variant)"
        )
    config = load_config(str(path))  # a mean-pooling export as its family's config; never the folder's own code
    tokenizer = load_tokenizer(str(path))
    if info["variant"] in ("onnx", "onnx_int8"):
        return OnnxModel(path / plain_file(info.get("file", "model.onnx"), path), config), tokenizer, info
    cls = model_class(config)
    pruned = getattr(config, PRUNED_KEY, None) or {}
    setattr(config, PRUNED_KEY, {})  # prune_heads records them again on the fresh model
    if info["variant"] == "int8":
        return _load_int8(path, cls, config, pruned, info, trust_pickle), tokenizer, info
    dtype = torch.bfloat16 if info["variant"] == "bf16" else torch.float32
    if pruned:
        model = cls(config)
        prune_heads(model, pruned)
        model.load_state_dict(_safetensors_state(path, model), strict=False)
        model = model.to(dtype)
    else:
        with quiet_transformers():
            model = cls.from_pretrained(path, config=config, dtype=dtype)
    return model.eval(), tokenizer, info


def plain_file(name: str, folder: Path) -> str:
    """``name`` if it names a file directly inside ``folder`` (no path), else a DomainBertError."""
    if not isinstance(name, str) or not name or name in (".", "..") or "/" in name or "\\" in name:
        raise DomainBertError(
            f"{folder / VARIANT_FILE}: field 'file': expected a file name in the folder, got {name!r}"
        )
    return name


def _safetensors_state(path: Path, model: nn.Module) -> dict[str, torch.Tensor]:
    """The safetensors weights of ``path``, checked to fit ``model`` (a pruned structure)."""
    from safetensors.torch import load_file

    state = {}
    for f in sorted(path.glob("*.safetensors")):
        state.update(load_file(str(f)))
    own = model.state_dict()
    missing = [k for k in own if k not in state and not k.endswith("position_ids")]
    unexpected = [k for k in state if k not in own]
    if missing or unexpected:
        raise DomainBertError(f"{path}: weights do not fit the pruned model (missing {missing[:3]})")
    return state


def _load_int8(path: Path, cls, config, pruned: dict, info: dict, trust_pickle: bool) -> nn.Module:
    """Rebuild the int8 model of ``path`` and load ``model_int8.pt`` (without pickles unless ``trust_pickle``)."""
    import pickle

    model = cls(config)
    prune_heads(model, pruned)
    model.eval()
    backend = info.get("backend", "torch")
    model, _ = quantize_int8(model, backend, probe=None)
    try:
        state = torch.load(path / INT8_WEIGHTS, map_location="cpu", weights_only=not trust_pickle)
    except (pickle.UnpicklingError, RuntimeError, AttributeError, TypeError, ValueError, EOFError) as err:
        raise DomainBertError(
            f"{path / INT8_WEIGHTS}: not loadable as plain tensors ({type(err).__name__}); it may hold code. "
            f"Pass {TRUST_FLAG} only for a folder you trust"
        ) from err
    except OSError as err:
        raise DomainBertError(f"{path / INT8_WEIGHTS}: cannot be read: {err.strerror or err}") from err
    model.load_state_dict(state, assign=backend == "torchao")
    return model.eval()
