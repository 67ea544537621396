"""``domainbert export``: deployment variants of a model (pruned, int8, bf16, ONNX), their checks and report."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "load_variant":
        from domainbert.deploy.command import load_variant

        return load_variant
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
