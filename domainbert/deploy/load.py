"""Loading a folder written by ``domainbert export`` (or any Hugging Face folder) back for inference.

The folder's ``domainbert_variant.json`` names its format (absent: ``fp32``, a plain Hugging Face folder); the
format's loader from the table (:mod:`domainbert.deploy.formats`) reads it. Nothing in a folder can make loading run
code: weights load from safetensors, ONNX or ``torch.load(..., weights_only=True)``; only torchao's int8
``model_int8.pt`` needs a full unpickling, and only on the caller's word.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from domainbert.core.hf import load_config, load_tokenizer
from domainbert.deploy.folders import INT8_WEIGHTS, TRUST_FLAG, VARIANT_FILE, model_class, plain_file
from domainbert.errors import DomainBertError

__all__ = ["INT8_WEIGHTS", "TRUST_FLAG", "VARIANT_FILE", "load_variant", "model_class", "plain_file", "variant_info"]


def variant_info(path: Path) -> dict:
    """The folder's ``domainbert_variant.json`` (``{"variant": "fp32"}`` without one), its variant checked."""
    from domainbert.deploy.formats import table

    f = path / VARIANT_FILE
    if not f.exists():
        return {"variant": "fp32"}
    try:
        info = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise DomainBertError(f"{f}: not readable JSON ({err})") from err
    known = table()
    if not isinstance(info, dict) or info.get("variant") not in known:
        raise DomainBertError(f"{f}: field 'variant': expected one of {', '.join(known)}")
    return info


def load_variant(path: str | os.PathLike, trust_pickle: bool = False):
    """Load a folder written by ``domainbert export`` (or any HF folder) for inference.

    Nothing in the folder can make it run code: weights load from safetensors, ONNX or ``torch.load(...,
    weights_only=True)``. Only torchao's int8 ``model_int8.pt`` needs a full unpickling, which happens only with
    ``trust_pickle=True`` (``--trust_pickle true``), never because the folder's ``domainbert_variant.json`` asks.

    Pruned heads (``domainbert_pruned_heads`` in the config) are removed from a fresh model before its
    weights load; an ``int8`` folder is rebuilt with the same quantization backend; an ``onnx`` or ``onnx_int8``
    folder runs its ``model.onnx`` in onnxruntime behind the same call interface
    (:class:`~domainbert.deploy.onnx_export.OnnxModel`); a plugin format's folder loads through its own loader.

    Args:
        path: the folder.
        trust_pickle: allow a full (code-running) unpickling of torchao's ``model_int8.pt``; only for folders you
            made yourself or otherwise trust.

    Returns:
        ``(model, tokenizer, info)``; ``info["variant"]`` is the format's name: ``fp32``, ``bf16``, ``int8``,
        ``onnx``, ``onnx_int8`` or a plugin's.
        The model is in eval mode; a classifier's ``model.config.id2label`` names its labels.

    Examples:
        A fine-tuning run's export (``<run>/hf``) or a variant of ``domainbert export`` (``<out>/int8``...), then
        its predictions with :func:`~domainbert.deploy.classifier.classify`; here a tiny random classifier
        (:func:`~domainbert.deploy.sample.sample_classifier`) stands in for the folder:

        >>> import tempfile
        >>> from domainbert.deploy import classify, load_variant
        >>> from domainbert.deploy.sample import sample_classifier
        >>> tmp = tempfile.TemporaryDirectory()
        >>> folder = sample_classifier(tmp.name, labels=["graphics", "network"])
        >>> model, tokenizer, info = load_variant(folder)
        >>> info["variant"], model.training, model.config.id2label
        ('fp32', False, {0: 'graphics', 1: 'network'})
        >>> rows = classify(model, tokenizer, ["a library for fonts"])
        >>> rows[0]["label"] in model.config.id2label.values()
        True

        A folder that is not an export is refused, naming it:

        >>> load_variant(tmp.name + "/nowhere")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        domainbert.errors.DomainBertError: .../nowhere: no config.json; expected a folder written by ...
        >>> tmp.cleanup()

    Raises:
        DomainBertError: a folder that is not an export, or pickled weights without ``trust_pickle``.
    """
    from domainbert.deploy.formats import get

    path = Path(path)
    if not (path / "config.json").exists():
        raise DomainBertError(f"{path}: no config.json; expected a folder written by `domainbert export`")
    info = variant_info(path)
    fmt = get(info["variant"], where=str(path / VARIANT_FILE))
    config = load_config(str(path))  # a mean-pooling export as its family's config; never the folder's own code
    tokenizer = load_tokenizer(str(path))
    return fmt.load(path, config, info, trust_pickle=trust_pickle), tokenizer, info
