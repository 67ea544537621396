"""``domainbert export``: deployment variants of a model (pruned, int8, bf16, ONNX), their checks and report.

- ``command``: the options, :func:`~domainbert.deploy.command.main` and the ``export()`` steps;
- ``formats``: the table of export formats (name → writer, loader, runner), one module per format, extended by
  plugins under the entry-point group ``domainbert.export_formats``; ``folders``: what their folders share;
- ``variants``: writing each variant's folder through its format, measuring it, and its report row;
- ``load``: :func:`load_variant`, reading any variant back through the table without running code from the folder;
- ``classifier``: :func:`classify`, the labels and probabilities of texts from a loaded classifier;
- ``prune``: head importance, head pruning and the re-fit; ``quantize``: int8 and bf16 copies;
- ``onnx_export``: ONNX export, onnxruntime runner and int8 quantization; ``bench``: latency and task metrics;
- ``report``: the report rows, each folder's ``report.json``/``report.md`` and the summary; ``recommend``: the
  variant to ship under a macro-F1 drop or latency limit; ``plot``: latency against macro-F1.

``domainbert.deploy.load_variant`` and ``domainbert.deploy.classify`` are imported on first use, so
``import domainbert.deploy`` stays cheap. Loading a model and classifying texts from Python::

    from domainbert.deploy import classify, load_variant

    model, tokenizer, info = load_variant("runs/minilm_debian-sections/version_0/hf")  # or <export out>/int8...
    rows = classify(model, tokenizer, ["a library for fonts"])  # [{"label": ..., "probabilities": {...}}]
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "load_variant":
        from domainbert.deploy.load import load_variant

        return load_variant
    if name == "classify":
        from domainbert.deploy.classifier import classify

        return classify
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
