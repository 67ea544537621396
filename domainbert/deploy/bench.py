"""Running a variant on tokenized batches and measuring it: CPU latency per example, accuracy and macro-F1."""

from __future__ import annotations

import contextlib
import statistics
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

#: The files that count as a variant's weights (safetensors, pickles, ONNX and its external data).
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".onnx", ".onnx.data", ".data")


def model_inputs(model: nn.Module, batch: dict) -> dict:
    """The entries of ``batch`` the model's ``forward`` takes (no labels)."""
    import inspect

    accepted = set(inspect.signature(model.forward).parameters)
    return {k: v for k, v in batch.items() if k in accepted and k != "labels" and torch.is_tensor(v)}


class TorchRunner:
    """Logits of a PyTorch model, under ``inference_mode`` (and in bf16 for bf16 models).

    Under bf16 the float32 weights of the ``nn.Linear`` layers are cast to bf16 once per model (kept until a weight
    changes) and passed in their place at each call (``torch.func.functional_call``): the same values autocast would
    cast them to at every call, so the logits are the same bit for bit, without a cast of every weight per batch.
    The model keeps its own weights; calls that swap the copies in take a lock, so threads may share a model.
    A model whose floating-point weights are all bf16 already (the ``bf16`` variant) runs as it is, without
    autocast: every operation then reads bf16 and autocast would have nothing to cast.
    """

    def __init__(self, model: nn.Module, bf16: bool = False) -> None:
        """Wrap ``model``; ``bf16`` runs it in bf16 (on the device of its weights): under autocast, or as it is."""
        self.model = model.eval()
        self.bf16 = bf16
        self.device = next((p.device for p in model.parameters()), torch.device("cpu"))
        self.autocast = bf16 and not all_bf16(model)
        self.bf16_weights = linear_weights_bf16(model) if self.autocast else {}

    def __call__(self, batch: dict) -> torch.Tensor:
        ctx = torch.autocast(self.device.type, dtype=torch.bfloat16) if self.autocast else contextlib.nullcontext()
        inputs = {k: v.to(self.device) for k, v in model_inputs(self.model, batch).items()}
        with torch.inference_mode(), ctx:
            if not self.bf16_weights:
                return self.model(**inputs).logits.float().cpu()
            with _SWAP:
                out = torch.func.functional_call(self.model, self.bf16_weights, args=(), kwargs=inputs, strict=False)
            return out.logits.float().cpu()


#: Held while a model runs with bf16 copies swapped in for its weights (``functional_call`` swaps them in place).
_SWAP = threading.Lock()
#: A model's bf16 copies, with the versions of the weights they were cast from.
_BF16_COPIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def all_bf16(model: nn.Module) -> bool:
    """Whether every floating-point weight and buffer of ``model`` is bf16 (and it has at least one)."""
    floats = [t.dtype for t in (*model.parameters(), *model.buffers()) if t.is_floating_point()]
    return bool(floats) and all(dtype == torch.bfloat16 for dtype in floats)


def linear_weights_bf16(model: nn.Module) -> dict[str, torch.Tensor]:
    """bf16 copies of the float32 weights and biases of ``model``'s ``nn.Linear`` layers, by parameter name.

    A parameter that another kind of layer also holds (an output layer tied to the word embeddings) is left out:
    autocast keeps an embedding lookup in float32. So is a weight of a tensor subclass (a quantized weight). The
    copies are cast once per model and cast again when a weight changes.
    """
    linear, other = {}, set()
    for prefix, module in model.named_modules():
        for name, param in module.named_parameters(prefix=prefix, recurse=False):
            plain = type(param.detach()) is torch.Tensor and param.dtype == torch.float32
            if isinstance(module, nn.Linear) and plain:
                linear.setdefault(id(param), (name, param))
            else:
                other.add(id(param))
    kept = [(name, param) for key, (name, param) in linear.items() if key not in other]
    versions = tuple((id(param), param._version) for _, param in kept)
    cached = _BF16_COPIES.get(model)
    if cached is not None and cached[0] == versions:
        return cached[1]
    copies = {name: param.detach().to(torch.bfloat16) for name, param in kept}
    _BF16_COPIES[model] = (versions, copies)
    return copies


def served_runner(model: nn.Module) -> TorchRunner:
    """How :func:`~domainbert.deploy.classifier.classify` runs ``model`` by default.

    bf16 where its weights are bf16 (run as they are), or where it was scored in bf16 and this machine runs bf16
    natively (:func:`~domainbert.core.scoring.runs_bf16`: under autocast); float32 otherwise.
    """
    from domainbert.core.scoring import runs_bf16

    weights_bf16 = any(p.dtype == torch.bfloat16 for p in model.parameters())
    return TorchRunner(model, bf16=weights_bf16 or runs_bf16(model.config))


def encode(tokenizer, texts: list[str], batch_size: int, max_length: int, labels: list[int] | None = None):
    """Padded batches of ``texts`` (each padded to its longest row), in order."""
    out = []
    for start in range(0, len(texts), batch_size):
        enc = tokenizer(
            texts[start : start + batch_size], padding=True, truncation=True, max_length=max_length, return_tensors="pt"
        )
        batch = {k: v for k, v in enc.items() if k in tokenizer.model_input_names}
        if labels is not None:
            batch["labels"] = torch.tensor(labels[start : start + batch_size])
        out.append(batch)
    return out


def length_sorted_batches(tokenizer, texts: list[str], batch_size: int, max_length: int) -> list[tuple[list, dict]]:
    """``(row indices, padded inputs)`` per batch of ``texts``, grouped by token count as a test pass groups them.

    The order is :class:`~domainbert.data.batching.LengthSortedSampler`'s (the task datamodules' for test and
    predict: runs of ``50 * batch_size`` rows, each longest first), and each batch is padded to its longest row as
    their collator pads it; so a model scored by a training stage's test pass sees here the very batches it saw
    there. Each text is tokenized once.
    """
    from domainbert.data.batching import LengthSortedSampler

    enc = tokenizer(list(texts), truncation=True, max_length=max_length)
    names = [k for k in tokenizer.model_input_names if k in enc]
    order = list(LengthSortedSampler([len(ids) for ids in enc["input_ids"]], batch_size))
    out = []
    for start in range(0, len(order), batch_size):
        ids = order[start : start + batch_size]
        padded = tokenizer.pad({k: [enc[k][i] for i in ids] for k in names}, return_tensors="pt")
        out.append((ids, {k: padded[k] for k in names}))
    return out


def metric_batches(
    tokenizer, texts: list[str], labels: list[int], batch_size: int, max_length: int, rows: bool = False
) -> list[dict]:
    """Labelled batches of ``texts`` in order of token count (:func:`length_sorted_batches`).

    The metric pass pads little, and scores each row in the batch a training stage's test pass scored it in.
    ``rows``: each batch also carries ``rows``, its rows' positions in ``texts``, and :func:`task_metrics` then gives
    the predictions too, in the texts' order.
    """
    return [
        {**inputs, "labels": torch.tensor([labels[i] for i in ids]), **({"rows": list(ids)} if rows else {})}
        for ids, inputs in length_sorted_batches(tokenizer, texts, batch_size, max_length)
    ]


def latency_ms(runner: Callable[[dict], torch.Tensor], batches: list[dict], repeats: int = 3) -> float:
    """Median over ``repeats`` passes of the milliseconds per example over ``batches`` (after one warm-up)."""
    n = sum(b["input_ids"].shape[0] for b in batches)
    runner(batches[0])
    times = []
    for _ in range(max(1, repeats)):
        start = time.perf_counter()
        for b in batches:
            runner(b)
        times.append((time.perf_counter() - start) * 1000 / n)
    return round(statistics.median(times), 3)


def task_metrics(runner, batches: list[dict], num_labels: int, label_names: list[str] | None = None) -> dict[str, Any]:
    """Accuracy and macro-F1 (the training modules' own torchmetrics definitions) over labelled batches.

    Batches that carry ``rows`` (``metric_batches(rows=True)``) also give ``predictions``: ``{"gold", "pred",
    "labels"}``, the gold and predicted label ids in the texts' order and the number of labels, which a paired
    comparison of two variants reads (:mod:`domainbert.deploy.recommend`), and ``names``, the labels' names in id
    order, when ``label_names`` is given.
    """
    from domainbert.modules.metrics import classification_metrics

    metrics = classification_metrics(num_labels)
    kept: dict[int, tuple[int, int]] = {}
    for b in batches:
        logits = runner({k: v for k, v in b.items() if k != "rows"})
        metrics.update(logits, b["labels"])
        kept.update(zip(b.get("rows", ()), zip(b["labels"].tolist(), logits.argmax(-1).tolist())))
    names = {"acc": "accuracy"}
    out: dict[str, Any] = {names.get(k, k): round(float(v), 5) for k, v in metrics.compute().items()}
    if kept:
        order = sorted(kept)
        out["predictions"] = {"gold": [kept[i][0] for i in order], "pred": [kept[i][1] for i in order]}
        out["predictions"]["labels"] = num_labels
        if label_names is not None:
            out["predictions"]["names"] = list(label_names)
    return out


def known_metrics(path: str | Path, labels: list[int] | None, label_names: list[str] | None, num_labels: int | None):
    """Accuracy and macro-F1 of the test predictions a training stage already made over the same rows.

    ``path`` is a JSON file of ``{"gold", "pred", "labels"}`` (the pipeline's ``test_predictions.json``): the gold
    and predicted label ids of every row of ``--data`` in file order, and the label names in id order. Its metrics
    are those of the stage's own test pass, so the rows are not run through the model again.

    Returns:
        ``{"accuracy", "f1_macro"}`` as :func:`task_metrics` rounds them, or None (with the reason logged) when the
        file does not describe these rows and labels: then the rows are run through the model after all.
    """
    import json
    import logging

    from domainbert.modules.metrics import classification_metrics

    log = logging.getLogger(__name__)
    try:
        known = json.loads(Path(path).read_text(encoding="utf-8"))
        gold, pred, names = list(known["gold"]), list(known["pred"]), list(known["labels"])
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as err:
        log.warning("%s: not test predictions (%s); the rows are run through the model instead", path, err)
        return None
    if labels is None or not num_labels or gold != list(labels) or len(pred) != len(gold):
        log.warning("%s: its gold labels are not those of --data's rows; the rows are run through the model", path)
        return None
    if label_names is not None and names != list(label_names):
        log.warning("%s: its labels are not the model's, in its order; the rows are run through the model", path)
        return None
    metrics = classification_metrics(num_labels)
    metrics.update(torch.tensor(pred), torch.tensor(gold))
    names_out = {"acc": "accuracy"}
    return {names_out.get(k, k): round(float(v), 5) for k, v in metrics.compute().items()}


def weights_size(folder: Path) -> int:
    """Bytes of the weight files (safetensors, pt, onnx) in ``folder``."""
    return sum(f.stat().st_size for f in folder.iterdir() if f.is_file() and f.name.endswith(WEIGHT_SUFFIXES))


def num_params(model: nn.Module) -> int:
    """Parameters of a model (a quantized model counts the float model's)."""
    return sum(p.numel() for p in model.parameters())


@dataclass
class EvalSet:
    """What every variant is measured on: batches for the metric and for latency at batch 1 and 32.

    ``b32`` holds the batches :func:`~domainbert.deploy.classifier.classify` and ``domainbert predict`` serve: rows
    of similar length batched together (:func:`length_sorted_batches`), so the batch-32 latency is the one a user
    sees.
    """

    metric_batches: list[dict] | None
    b1: list[dict]
    b32: list[dict]
    num_labels: int | None
    repeats: int
    labels: list[int] | None = None

    @classmethod
    def build(
        cls,
        tokenizer,
        texts: list[str],
        labels: list[int] | None,
        num_labels: int | None,
        batch_size: int = 32,
        max_length: int = 128,
        latency_examples: int = 32,
        repeats: int = 3,
        b32_examples: int = 256,
    ) -> EvalSet:
        """Tokenize ``texts`` for the metric pass and (repeated as needed) for the latency passes.

        Args:
            tokenizer: the model's tokenizer.
            texts: the examples (at least one).
            labels: their label ids, or None: no metric pass.
            num_labels: the model's number of labels (None: no metric pass).
            batch_size: batch size of the metric pass (batched in order of token count).
            max_length: truncation length.
            latency_examples: examples timed one by one (batch 1).
            repeats: timing passes; the median is reported.
            b32_examples: examples timed in batches of 32, batched as ``classify`` serves them.
        """
        served = length_sorted_batches(tokenizer, repeated(texts, b32_examples), 32, max_length)
        return cls(
            metric_batches=None if labels is None else metric_batches(tokenizer, texts, labels, batch_size, max_length),
            b1=encode(tokenizer, repeated(texts, latency_examples), 1, max_length),
            b32=[inputs for _, inputs in served],
            num_labels=num_labels,
            repeats=repeats,
            labels=labels,
        )

    def b32_padding(self) -> float:
        """The share of the batch-32 latency inputs that is padding (rows padded to the longest in their batch)."""
        masks = [b["attention_mask"] for b in self.b32 if "attention_mask" in b]
        total = sum(m.numel() for m in masks)
        return round(1 - sum(int(m.sum()) for m in masks) / total, 3) if total else 0.0


def repeated(texts: list[str], n: int) -> list[str]:
    """The first ``n`` of ``texts`` repeated end to end (``texts`` again from its start when it holds fewer)."""
    return (texts * -(-n // len(texts)))[:n]


def measure(runner, evalset: EvalSet, known: dict | None = None) -> dict[str, Any]:
    """Latency per example at batch 1 and 32 (ms), and the task metric when there are labels.

    ``known``: the task metric already computed from a training stage's own test pass over the same rows
    (:func:`known_metrics`); the rows are then not run again, and the row says where its metric came from.
    """
    out: dict[str, Any] = {
        "latency_ms_b1": latency_ms(runner, evalset.b1, evalset.repeats),
        "latency_ms_b32": latency_ms(runner, evalset.b32, evalset.repeats),
    }
    if known is not None:
        out.update(known)
    elif evalset.metric_batches and evalset.num_labels:
        out.update(task_metrics(runner, evalset.metric_batches, evalset.num_labels))
    return out
