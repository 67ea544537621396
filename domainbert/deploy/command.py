"""``domainbert export``: prepare a (distilled) model for CPU deployment and measure every variant.

From a Hugging Face folder (for example a distillation run's ``hf/`` export) it writes, under ``--out``:

- ``student/``: the model itself, re-saved with its tokenizer;
- ``pruned/`` (``--prune_heads F``): the model with the fraction ``F`` of its attention heads removed, lowest
  importance first (Michel et al., 2019: the importance of a head is the expected absolute gradient of the
  loss with respect to a mask on its output), then re-fitted for ``--refit_steps`` steps on ``--train``
  (with the teacher's soft targets when ``--teacher`` is given). The pruned variant is the base of the
  variants below;
- ``int8/`` (``--int8``): dynamic int8 quantization of every ``nn.Linear`` (torchao's
  ``Int8DynamicActivationInt8WeightConfig`` when torchao is installed and faster on this CPU, else
  ``torch.ao.quantization.quantize_dynamic``, which torch 2.13 still ships but marks deprecated);
- ``onnx_int8/`` (with ``--int8``, when onnxruntime is installed): onnxruntime's ``quantize_dynamic`` (int8
  weights) of the fp32 ONNX export: a portable int8 model that any ONNX runtime loads, without pickles;
- ``bf16/`` (``--bf16``): bf16 weights, run under CPU bf16 autocast (fast on CPUs with AMX or AVX512-BF16);
- ``onnx/`` (``--onnx``): ``model.onnx`` from the standard exporter (``torch.onnx.export(dynamo=True)``),
  with dynamic batch and sequence axes, checked against PyTorch with onnxruntime (or the ONNX reference
  evaluator when onnxruntime is missing).

Each variant's folder gets ``report.json`` and ``report.md``: parameter count, weight-file size, CPU latency
per example at batch 1 and batch 32, and accuracy / macro-F1 on ``--data`` (sequence classification). The
top-level ``report.json`` / ``report.md`` put all variants side by side, with the teacher when ``--teacher``
is given, and say which of bf16 and int8 is faster on this machine. Every folder and file is written
atomically.

Load any variant back with :func:`load_variant`. Nothing in a folder can make loading run code: torchao's
``model_int8.pt`` (a pickle) loads only with ``--trust_pickle true`` / ``load_variant(..., trust_pickle=True)``.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import json
import logging
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from domainbert.core.files import atomic_dir, atomic_write_text
from domainbert.core.hf import load_tokenizer, write_modeling_file
from domainbert.errors import DomainBertError

log = logging.getLogger(__name__)

VARIANT_FILE = "domainbert_variant.json"
INT8_WEIGHTS = "model_int8.pt"
PRUNED_KEY = "domainbert_pruned_heads"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".onnx", ".onnx.data", ".data")

# =====================================================================================================
# loading
# =====================================================================================================


def model_class(config):
    """The ``transformers`` class named by ``config.architectures`` (the head the model was saved with).

    A mean-pooling classifier's export names a remote-code class; domainbert's own build of it is used instead.
    """
    import transformers

    from domainbert.modules.pooled import is_mean_pooled, pooled_class

    if is_mean_pooled(config):
        return pooled_class(config)
    for name in getattr(config, "architectures", None) or []:
        cls = getattr(transformers, name, None)
        if cls is not None:
            return cls
    raise DomainBertError(f"the config names no known architecture ({getattr(config, 'architectures', None)})")


VARIANTS = ("fp32", "bf16", "int8", "onnx", "onnx_int8")
TRUST_FLAG = "--trust_pickle true"


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

    Raises:
        DomainBertError: a folder that is not an export, or pickled weights without ``trust_pickle``.
    """
    from transformers import AutoConfig

    path = Path(path)
    if not (path / "config.json").exists():
        raise DomainBertError(f"{path}: no config.json; expected a folder written by `domainbert export`")
    info = _variant_info(path)
    if info["variant"] == "int8" and info.get("backend", "torch") != "torch" and not trust_pickle:
        raise DomainBertError(
            f"{path}: its int8 weights ({INT8_WEIGHTS}, backend {info.get('backend')!r}) load only by unpickling, "
            f"which can run code; pass {TRUST_FLAG} only for a folder you trust (or load its int8 ONNX variant)"
        )
    config = AutoConfig.from_pretrained(path)
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
        model = cls.from_pretrained(path, dtype=dtype)
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


class OnnxModel(nn.Module):
    """An ONNX export behind the call interface of a ``transformers`` model: ``model(**batch).logits``."""

    def __init__(self, path: Path, config, threads: int | None = None) -> None:
        """Open ``path`` with onnxruntime (no pickles: an ONNX file is a protobuf)."""
        super().__init__()
        if not path.is_file():
            raise DomainBertError(f"{path}: no such ONNX file")
        self.config = config
        self.runner = OnnxRunner(path, threads)

    def forward(self, input_ids, attention_mask, token_type_ids=None):  # noqa: D102
        from types import SimpleNamespace

        batch = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None:
            batch["token_type_ids"] = token_type_ids
        return SimpleNamespace(logits=self.runner(batch))


# =====================================================================================================
# head pruning (Michel et al., 2019)
# =====================================================================================================


@dataclass
class HeadBlock:
    """One self-attention block: its query/key/value projections, output projection and head size."""

    name: str
    attention: nn.Module
    qkv: tuple[str, str, str]
    out_owner: nn.Module
    out_attr: str
    head_size: int

    @property
    def heads(self) -> int:
        """The block's current number of heads."""
        return getattr(self.attention, self.qkv[0]).out_features // self.head_size

    @property
    def out(self) -> nn.Linear:
        """The projection that mixes the heads' outputs."""
        return getattr(self.out_owner, self.out_attr)


def head_blocks(model: nn.Module) -> list[HeadBlock]:
    """Every self-attention block of a BERT, RoBERTa, ELECTRA, ALBERT or DistilBERT model, in order.

    ALBERT has one block shared by all its layers, so pruning it prunes every layer alike.
    """
    blocks = []
    for name, mod in model.named_modules():
        if all(hasattr(mod, a) for a in ("query", "key", "value")) and hasattr(mod, "attention_head_size"):
            if hasattr(mod, "dense"):  # ALBERT: the output projection lives in the same module
                owner, attr = mod, "dense"
            else:  # BERT family: <...>.attention.self + <...>.attention.output.dense
                parent = model.get_submodule(name.rsplit(".", 1)[0])
                owner, attr = parent.output, "dense"
            blocks.append(HeadBlock(name, mod, ("query", "key", "value"), owner, attr, mod.attention_head_size))
        elif all(hasattr(mod, a) for a in ("q_lin", "k_lin", "v_lin", "out_lin")):  # DistilBERT
            blocks.append(HeadBlock(name, mod, ("q_lin", "k_lin", "v_lin"), mod, "out_lin", mod.attention_head_size))
    if not blocks:
        raise DomainBertError(f"{type(model).__name__}: no self-attention blocks found to prune")
    return blocks


def count_heads(model: nn.Module) -> int:
    """Total attention heads over all blocks."""
    return sum(b.heads for b in head_blocks(model))


@contextlib.contextmanager
def head_masks(model: nn.Module):
    """Attach a ones mask per head (a leaf tensor with gradients) on every block's output; yield the masks."""
    blocks = head_blocks(model)
    masks, handles = [], []
    for block in blocks:
        mask = torch.ones(block.heads, requires_grad=True)
        masks.append(mask)

        def hook(_module, args, mask=mask, d=block.head_size):
            x = args[0]
            return (x * mask.to(x.dtype).repeat_interleave(d),) + tuple(args[1:])

        handles.append(block.out.register_forward_pre_hook(hook))
    try:
        yield blocks, masks
    finally:
        for h in handles:
            h.remove()


def head_importance(
    model: nn.Module, batches: Iterable[dict], loss_fn: Callable[[Any, dict], torch.Tensor], normalize: bool = True
) -> dict[str, torch.Tensor]:
    """Importance of each head: ``sum over batches of |dL/d mask_h|`` (Michel et al., 2019).

    Args:
        model: the model (its weights get no update; their gradients are cleared).
        batches: labelled batches.
        loss_fn: ``(model_output, batch) -> loss``.
        normalize: divide each block's scores by their L2 norm, as the paper does before ranking globally.

    Returns:
        ``{block name: scores (heads,)}``.
    """
    was_training = model.training
    model.eval()
    with head_masks(model) as (blocks, masks):
        scores = [torch.zeros(len(m)) for m in masks]
        for batch in batches:
            out = model(**model_inputs(model, batch))
            loss = loss_fn(out, batch)
            grads = torch.autograd.grad(loss, masks, allow_unused=True)
            for s, g in zip(scores, grads):
                if g is not None:
                    s += g.detach().abs()
    model.zero_grad(set_to_none=True)
    model.train(was_training)
    if normalize:
        scores = [s / s.norm().clamp_min(1e-12) for s in scores]
    return {b.name: s for b, s in zip(blocks, scores)}


def choose_heads(importance: dict[str, torch.Tensor], fraction: float) -> dict[str, list[int]]:
    """The least important ``fraction`` of all heads, ranked globally, keeping at least one head per block."""
    if not 0.0 <= fraction < 1.0:
        raise DomainBertError(f"prune_heads={fraction}: expected a fraction in [0, 1)")
    ranked = sorted((float(s), name, h) for name, scores in importance.items() for h, s in enumerate(scores))
    target = int(round(fraction * len(ranked)))
    left = {name: len(scores) for name, scores in importance.items()}
    chosen: dict[str, list[int]] = {}
    for _, name, h in ranked:
        if sum(len(v) for v in chosen.values()) >= target:
            break
        if left[name] <= 1:
            continue
        chosen.setdefault(name, []).append(h)
        left[name] -= 1
    return {k: sorted(v) for k, v in chosen.items()}


def _slice_linear(lin: nn.Linear, index: torch.Tensor, dim: int) -> nn.Linear:
    w = lin.weight.index_select(dim, index).detach().clone()
    new = nn.Linear(w.shape[1], w.shape[0], bias=lin.bias is not None, dtype=w.dtype, device=w.device)
    new.weight.data.copy_(w)
    if lin.bias is not None:
        b = lin.bias.detach().clone() if dim == 1 else lin.bias.index_select(0, index).detach().clone()
        new.bias.data.copy_(b)
    return new


def prune_heads(model: nn.Module, heads: dict[str, list[int]]) -> dict[str, list[int]]:
    """Remove ``heads`` (``{block name: head indexes}``) from the model, in place.

    The query/key/value projections lose the heads' rows and the output projection their columns, so the
    model is smaller and faster, with the same input and output shapes. The config records the original
    indexes under ``domainbert_pruned_heads`` so that :func:`load_variant` can rebuild the structure.

    Returns:
        All heads pruned so far, by block.
    """
    if not heads:
        return dict(getattr(model.config, PRUNED_KEY, None) or {})
    blocks = {b.name: b for b in head_blocks(model)}
    record = {k: list(v) for k, v in (getattr(model.config, PRUNED_KEY, None) or {}).items()}
    for name, drop in heads.items():
        if name not in blocks:
            raise DomainBertError(f"no attention block {name!r} in {type(model).__name__}")
        block = blocks[name]
        n, d = block.heads, block.head_size
        drop = sorted(set(int(h) for h in drop))
        if any(not 0 <= h < n for h in drop) or len(drop) >= n:
            raise DomainBertError(f"{name}: cannot prune heads {drop} of {n} (at least one must stay)")
        keep = [h for h in range(n) if h not in drop]
        index = torch.cat([torch.arange(h * d, (h + 1) * d) for h in keep])
        for attr in block.qkv:
            setattr(block.attention, attr, _slice_linear(getattr(block.attention, attr), index, 0))
        setattr(block.out_owner, block.out_attr, _slice_linear(block.out, index, 1))
        for attr in ("num_attention_heads", "n_heads"):
            if hasattr(block.attention, attr):
                setattr(block.attention, attr, len(keep))
        if hasattr(block.attention, "all_head_size"):
            block.attention.all_head_size = len(keep) * d
        # record the original head numbers (heads pruned earlier shift the current ones)
        before = sorted(record.get(name, []))
        original = [h for h in range(n + len(before)) if h not in before]
        record[name] = sorted(before + [original[h] for h in drop])
    setattr(model.config, PRUNED_KEY, record)
    return record


def refit(
    model: nn.Module,
    batches: list[dict],
    steps: int,
    learning_rate: float = 3e-5,
    teacher: nn.Module | None = None,
    temperature: float = 2.0,
    alpha: float = 0.5,
) -> list[float]:
    """A short re-fit after pruning: cross-entropy on the labels, plus the teacher's soft targets if given.

    Returns:
        The loss of each step.
    """
    if steps <= 0:
        return []
    if not batches:
        raise DomainBertError("--refit_steps needs labelled training data: give --train")
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=learning_rate, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: max(0.0, 1 - s / steps))
    losses = []
    for step in range(steps):
        batch = batches[step % len(batches)]
        logits = model(**model_inputs(model, batch)).logits
        loss = F.cross_entropy(logits, batch["labels"])
        if teacher is not None:
            with torch.no_grad():
                t = teacher(**model_inputs(teacher, batch)).logits
            kl = F.kl_div(
                F.log_softmax(logits / temperature, -1),
                F.log_softmax(t / temperature, -1),
                log_target=True,
                reduction="batchmean",
            )
            loss = (1 - alpha) * loss + alpha * kl * temperature**2
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(float(loss))
    model.eval()
    return losses


# =====================================================================================================
# int8, bf16 and ONNX
# =====================================================================================================


def _torchao_int8():
    """The quantize function and int8 dynamic-quantization config class of torchao; None without torchao."""
    try:
        with _quiet():
            from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_
    except Exception:  # noqa: BLE001 - ImportError, or a torchao built for another torch
        return None
    return quantize_, Int8DynamicActivationInt8WeightConfig


@contextlib.contextmanager
def _quiet():
    """Silence deprecation warnings (and torchao's import-time messages) inside the block."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def quantize_int8(
    model: nn.Module, backend: Literal["auto", "torchao", "torch"] = "auto", probe: dict | None = None
) -> tuple[nn.Module, dict]:
    """A copy of ``model`` with dynamic int8 quantization of every ``nn.Linear`` (weights int8, activations per batch).

    Args:
        model: a float32 model in eval mode.
        backend: ``torchao`` (``Int8DynamicActivationInt8WeightConfig``), ``torch``
            (``torch.ao.quantization.quantize_dynamic``) or ``auto``: when torchao is installed, both are built
            and timed on ``probe`` and the faster one is kept (torchao's int8 kernels are fast on some CPUs and
            much slower than torch.ao's fbgemm kernels on others); without torchao, ``torch``.
        probe: a batch to time the two backends on (``auto`` only).

    Returns:
        ``(quantized model, info)``; ``info["backend"]`` is the backend used, ``info["probe_ms"]`` the timings.
    """
    if backend not in ("auto", "torchao", "torch"):
        raise DomainBertError(f"int8_backend={backend!r}: expected auto, torchao or torch")
    info: dict[str, Any] = {}
    tao = _torchao_int8() if backend in ("auto", "torchao") else None
    if backend == "torchao" and tao is None:
        raise DomainBertError("int8_backend=torchao: torchao is not installed (pip install torchao)")
    built: dict[str, nn.Module] = {}
    if tao is not None:
        quantize_, config_cls = tao
        q = copy.deepcopy(model).eval()
        with _quiet():
            quantize_(q, config_cls())
        built["torchao"] = q
    if backend in ("auto", "torch"):
        with _quiet():
            built["torch"] = torch.ao.quantization.quantize_dynamic(
                copy.deepcopy(model).eval(), {nn.Linear}, dtype=torch.qint8
            )
    if len(built) > 1 and probe is not None:
        timings = {}
        for name, q in built.items():
            runner = TorchRunner(q)
            runner(probe)
            start = time.perf_counter()
            runner(probe)
            timings[name] = round((time.perf_counter() - start) * 1000, 2)
        info["probe_ms"] = timings
        chosen = min(timings, key=timings.get)
    else:
        chosen = "torchao" if "torchao" in built else "torch"
    info["backend"] = chosen
    return built[chosen].eval(), info


def export_onnx(model: nn.Module, path: Path, example: dict, opset: int | None = None) -> None:
    """Export ``model``'s logits to ONNX with ``torch.onnx.export(dynamo=True)``; batch and length are dynamic."""
    names = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in example]
    wrapper = _LogitsOf(model, names).eval()
    limit = getattr(model.config, "max_position_embeddings", 512)
    if model.config.model_type in ("roberta", "xlm-roberta", "camembert"):
        limit -= 2
    batch_dim = torch.export.Dim("batch", min=1, max=4096)
    seq_dim = torch.export.Dim("sequence", min=1, max=limit)
    args = tuple(example[k] for k in names)
    kw: dict[str, Any] = {"dynamo": True, "input_names": names, "output_names": ["logits"], "verbose": False}
    kw["dynamic_shapes"] = {k: {0: batch_dim, 1: seq_dim} for k in names}
    if opset is not None:
        kw["opset_version"] = opset
    for name in ("onnx_ir", "onnxscript", "torch.onnx"):  # every graph rewrite, and torchvision ops it skips
        logging.getLogger(name).setLevel(logging.ERROR)
    with _quiet(), _silence_stdout():
        torch.onnx.export(wrapper, args, str(path), **kw)


@contextlib.contextmanager
def _silence_stdout():
    """The ONNX exporter prints its progress; keep the command's own output readable."""
    with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
        yield


class _LogitsOf(nn.Module):
    def __init__(self, model: nn.Module, names: list[str]) -> None:
        super().__init__()
        self.model = model
        self.names = names

    def forward(self, input_ids, attention_mask, token_type_ids=None):
        kw = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None:
            kw["token_type_ids"] = token_type_ids
        return self.model(**kw).logits


# =====================================================================================================
# running and measuring
# =====================================================================================================


def model_inputs(model: nn.Module, batch: dict) -> dict:
    """The entries of ``batch`` the model's ``forward`` takes (no labels)."""
    import inspect

    accepted = set(inspect.signature(model.forward).parameters)
    return {k: v for k, v in batch.items() if k in accepted and k != "labels" and torch.is_tensor(v)}


class TorchRunner:
    """Logits of a PyTorch model, under ``inference_mode`` (and bf16 autocast for bf16 models)."""

    def __init__(self, model: nn.Module, bf16: bool = False) -> None:
        """Wrap ``model``; ``bf16`` runs it under CPU bf16 autocast."""
        self.model = model.eval()
        self.bf16 = bf16

    def __call__(self, batch: dict) -> torch.Tensor:  # noqa: D102
        ctx = torch.autocast("cpu", dtype=torch.bfloat16) if self.bf16 else contextlib.nullcontext()
        with torch.inference_mode(), ctx:
            return self.model(**model_inputs(self.model, batch)).logits.float()


class OnnxRunner:
    """Logits of an ONNX model through onnxruntime (or the ONNX reference evaluator)."""

    def __init__(self, path: Path, threads: int | None = None) -> None:
        """Open ``path``; raises ImportError when neither onnxruntime nor onnx is installed."""
        try:
            import onnxruntime as ort
        except ImportError:
            from onnx.reference import ReferenceEvaluator

            self.engine = "onnx.reference"
            self.session = ReferenceEvaluator(str(path))
            self.inputs = list(self.session.input_names)
            return
        opts = ort.SessionOptions()
        if threads:
            opts.intra_op_num_threads = threads
        opts.log_severity_level = 3
        self.engine = f"onnxruntime {ort.__version__}"
        self.session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]

    def __call__(self, batch: dict) -> torch.Tensor:  # noqa: D102
        feed = {k: batch[k].numpy() for k in self.inputs}
        return torch.from_numpy(self.session.run(None, feed)[0]).float()


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


def task_metrics(runner, batches: list[dict], num_labels: int) -> dict[str, float]:
    """Accuracy and macro-F1 (the training modules' own torchmetrics definitions) over labelled batches."""
    from domainbert.modules.metrics import classification_metrics

    metrics = classification_metrics(num_labels)
    for b in batches:
        metrics.update(runner(b), b["labels"])
    names = {"acc": "accuracy"}
    return {names.get(k, k): round(float(v), 5) for k, v in metrics.compute().items()}


def weights_size(folder: Path) -> int:
    """Bytes of the weight files (safetensors, pt, onnx) in ``folder``."""
    return sum(f.stat().st_size for f in folder.iterdir() if f.is_file() and f.name.endswith(WEIGHT_SUFFIXES))


def num_params(model: nn.Module) -> int:
    """Parameters of a model (a quantized model counts the float model's)."""
    return sum(p.numel() for p in model.parameters())


@dataclass
class EvalSet:
    """What every variant is measured on: batches for the metric and for latency at batch 1 and 32."""

    metric_batches: list[dict] | None
    b1: list[dict]
    b32: list[dict]
    num_labels: int | None
    repeats: int


def measure(runner, evalset: EvalSet) -> dict[str, Any]:
    """Latency per example at batch 1 and 32 (ms), and the task metric when there are labels."""
    out: dict[str, Any] = {
        "latency_ms_b1": latency_ms(runner, evalset.b1, evalset.repeats),
        "latency_ms_b32": latency_ms(runner, evalset.b32, evalset.repeats),
    }
    if evalset.metric_batches and evalset.num_labels:
        out.update(task_metrics(runner, evalset.metric_batches, evalset.num_labels))
    return out


# =====================================================================================================
# reports
# =====================================================================================================

COLUMNS = [
    ("variant", "variant"),
    ("params", "params"),
    ("size_mb", "size (MB)"),
    ("latency_ms_b1", "ms/example b1"),
    ("latency_ms_b32", "ms/example b32"),
    ("accuracy", "accuracy"),
    ("f1_macro", "macro-F1"),
]


def _table(rows: list[dict], columns=COLUMNS) -> str:
    head = "| " + " | ".join(t for _, t in columns) + " |"
    sep = "|" + "|".join("---" for _ in columns) + "|"
    body = ["| " + " | ".join("" if r.get(k) is None else str(r.get(k)) for k, _ in columns) + " |" for r in rows]
    return "\n".join([head, sep, *body])


def write_report(folder: Path, report: dict) -> None:
    """``report.json`` and ``report.md`` of one variant, in ``folder`` (atomically)."""
    atomic_write_text(folder / "report.json", json.dumps(report, indent=2, sort_keys=True) + "\n")
    extra = {k: v for k, v in report.items() if k not in dict(COLUMNS)}
    lines = [f"# {report['variant']}", "", _table([report]), ""]
    lines += [f"- **{k}:** {json.dumps(v) if not isinstance(v, str) else v}" for k, v in sorted(extra.items())]
    atomic_write_text(folder / "report.md", "\n".join(lines) + "\n")


def with_ratios(rows: list[dict], base: str) -> list[dict]:
    """Add speed-up, size and F1 columns relative to the row named ``base``."""
    ref = next((r for r in rows if r["variant"] == base), None)
    if ref is None:
        return rows
    out = []
    for r in rows:
        r = dict(r)
        for k in ("latency_ms_b1", "latency_ms_b32"):
            if r.get(k) and ref.get(k):
                r[f"speedup_{k[-3:].strip('_')}_vs_{base}"] = round(ref[k] / r[k], 2)
        if r.get("size_mb") and ref.get("size_mb"):
            r[f"size_vs_{base}"] = round(r["size_mb"] / ref["size_mb"], 3)
        if r.get("f1_macro") is not None and ref.get("f1_macro"):
            r[f"f1_vs_{base}"] = round(r["f1_macro"] / ref["f1_macro"], 4)
        out.append(r)
    return out


def summary(rows: list[dict], base: str = "student") -> dict:
    """The side-by-side report: every row with ratio columns, and which of bf16 / int8 is faster at batch 32."""
    rows = with_ratios(rows, base)
    if any(r["variant"] == "teacher" for r in rows):
        rows = with_ratios(rows, "teacher")
    result: dict[str, Any] = {"variants": rows, "base": base}
    by = {r["variant"]: r for r in rows}
    if "int8" in by and "bf16" in by:
        i, b = by["int8"]["latency_ms_b32"], by["bf16"]["latency_ms_b32"]
        result["faster_at_b32"] = "int8" if i < b else "bf16"
        result["verdict"] = (
            f"at batch 32 {result['faster_at_b32']} is faster on this CPU: int8 {i} ms/example, bf16 {b} ms/example"
            f" ({_cpu_note()})"
        )
    return result


def _cpu_note() -> str:
    flags = ""
    with contextlib.suppress(OSError):
        flags = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    feats = [f for f in ("amx_bf16", "avx512_bf16", "avx512_vnni", "avx512f", "avx2") if f" {f}" in flags]
    return f"{torch.get_num_threads()} threads; CPU features: {', '.join(feats) or 'unknown'}"


def summary_markdown(result: dict) -> str:
    """The Markdown of :func:`summary`."""
    rows = result["variants"]
    base = result["base"]
    cols = list(COLUMNS) + [
        (f"speedup_b32_vs_{base}", f"speed-up b32 vs {base}"),
        (f"size_vs_{base}", f"size vs {base}"),
        (f"f1_vs_{base}", f"F1 vs {base}"),
    ]
    if any(r["variant"] == "teacher" for r in rows):
        cols += [("speedup_b32_vs_teacher", "speed-up b32 vs teacher"), ("f1_vs_teacher", "F1 vs teacher")]
    lines = ["# Deployment variants", "", _table(rows, cols), ""]
    if "verdict" in result:
        lines += [f"**bf16 or int8:** {result['verdict']}.", ""]
    return "\n".join(lines)


# =====================================================================================================
# the command
# =====================================================================================================


def _read_split(spec: str, text_column: str, label_column: str, label2id: dict | None, limit: int | None):
    from domainbert.data.readers import read

    has_labels = label2id is not None
    ds = read(spec, columns=[text_column] + ([label_column] if has_labels else []), split="test")
    texts = [str(t) for t in ds[text_column]][: limit or None]
    if not has_labels:
        return texts, None
    labels = []
    for row, value in enumerate(ds[label_column][: len(texts)], 1):
        if str(value) not in label2id:
            raise DomainBertError(
                f"{spec}: row {row}: label {value!r} is not one of the model's labels ({sorted(label2id)[:10]}...)"
            )
        labels.append(label2id[str(value)])
    return texts, labels


def _label2id(config) -> dict[str, int] | None:
    """The model's label ids, for sequence classifiers with single labels; None otherwise."""
    arch = (getattr(config, "architectures", None) or [""])[0]
    if not arch.endswith("ForSequenceClassification") or config.problem_type == "multi_label_classification":
        return None
    return {str(v): int(k) for k, v in config.id2label.items()}


SYNTHETIC = "The package provides a command line tool and a library for parsing configuration files on unix systems."


def _flag_values(argv: list[str], flags: Iterable[str]) -> list[str]:
    """Let boolean options stand alone (``--int8``) as well as take a value (``--int8 false``)."""
    out: list[str] = []
    flags = {f"--{f}" for f in flags}
    for i, arg in enumerate(argv):
        out.append(arg)
        if arg in flags:
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            if nxt is None or nxt.startswith("--"):
                out.append("true")
    return out


prune_heads_fn = prune_heads  # ``export``'s option of the same name shadows the function inside it


def export(
    model: str,
    out: str,
    teacher: str | None = None,
    data: str | None = None,
    train: str | None = None,
    text_column: str = "text",
    label_column: str = "label",
    max_length: int = 128,
    int8: bool = False,
    int8_backend: Literal["auto", "torchao", "torch"] = "auto",
    bf16: bool = False,
    onnx: bool = False,
    onnx_opset: int | None = None,
    prune_heads: float = 0.0,
    importance_batches: int = 8,
    refit_steps: int = 0,
    refit_lr: float = 3e-5,
    batch_size: int = 32,
    limit: int | None = None,
    latency_examples: int = 64,
    repeats: int = 3,
    threads: int | None = None,
    seed: int = 0,
    trust_pickle: bool = False,
) -> dict:
    """Write the deployment variants of ``model`` under ``out``, each with its report.

    Args:
        model: the Hugging Face folder to deploy (e.g. a distillation run's ``hf/``).
        out: the output folder; existing variant folders in it are replaced once the new ones are complete.
        teacher: the teacher's folder: measured beside the variants, and its soft targets join the re-fit.
        data: labelled test file (JSONL/CSV/...) for the task metric and the latency inputs.
        train: labelled training file for the head importance and the re-fit (needed by ``prune_heads``).
        text_column: the text column of ``data`` and ``train``.
        label_column: the label column (names as in the model's ``id2label``).
        max_length: truncation length of the inputs.
        int8: write ``int8/``, dynamic int8 quantization of the Linear layers (``model_int8.pt``, for PyTorch), and
            ``onnx_int8/``, the same quantization of the ONNX export (onnxruntime's ``quantize_dynamic``), which any
            ONNX runtime loads without pickles (needs onnxruntime; skipped with a warning without it).
        int8_backend: ``auto`` (torchao when installed and faster here, else torch.ao), ``torchao`` or ``torch``.
        bf16: write ``bf16/``, bf16 weights run under CPU bf16 autocast.
        onnx: write ``onnx/model.onnx`` (``torch.onnx.export(dynamo=True)``) and check it against PyTorch.
        onnx_opset: ONNX opset (default: the exporter's).
        prune_heads: fraction of attention heads to prune by importance (0 = none); writes ``pruned/``, which
            then is the base of the int8, bf16 and ONNX variants.
        importance_batches: training batches used to score the heads.
        refit_steps: optimizer steps of re-fitting after pruning.
        refit_lr: learning rate of the re-fit.
        batch_size: batch size of the metric pass, the importance pass and the re-fit.
        limit: use at most this many examples of ``data``.
        latency_examples: examples timed one by one for the batch-1 latency (and batched by 32 for batch 32).
        repeats: timing passes; the median is reported.
        threads: CPU threads for PyTorch and onnxruntime (default: PyTorch's default).
        seed: random seed (re-fit order and dropout).
        trust_pickle: let ``--model`` and ``--teacher`` be torchao int8 folders, whose weights load only by a full
            unpickling (which can run code): only for folders you trust.

    Returns:
        The summary report (also written to ``out/report.json``).
    """
    with _threads(threads):
        torch.manual_seed(seed)
        out_dir = Path(out)
        base_model, tokenizer, _ = load_variant(model, trust_pickle=trust_pickle)
        base_model = base_model.float().eval()
        label2id = _label2id(base_model.config)
        if prune_heads > 0 and train is None:
            raise DomainBertError("--prune_heads needs --train: labelled data to score the heads and re-fit")
        if prune_heads > 0 and label2id is None:
            raise DomainBertError("--prune_heads supports single-label sequence classifiers")
        if data is not None:
            texts, labels = _read_split(data, text_column, label_column, label2id, limit)
        else:
            log.warning("no --data: latency is timed on a synthetic sentence and no task metric is computed")
            texts, labels = [SYNTHETIC] * max(32, latency_examples), None
        if not texts:
            raise DomainBertError(f"{data}: no examples")
        timed = (texts * (1 + latency_examples // len(texts)))[: max(latency_examples, 32)]
        evalset = EvalSet(
            metric_batches=encode(tokenizer, texts, batch_size, max_length, labels) if labels is not None else None,
            b1=encode(tokenizer, timed[: min(latency_examples, 32)], 1, max_length),
            b32=encode(tokenizer, timed[: max(32, latency_examples // 32 * 32)], 32, max_length),
            num_labels=len(label2id) if label2id else None,
            repeats=repeats,
        )
        common = {"examples": len(texts), "data": data, "threads": torch.get_num_threads(), "max_length": max_length}
        rows: list[dict] = []

        teacher_model = None
        if teacher is not None:
            teacher_model, t_tok, _ = load_variant(teacher, trust_pickle=trust_pickle)
            teacher_model = teacher_model.float().eval()
            from domainbert.distill.student import check_same_tokenizer

            check_same_tokenizer(t_tok, tokenizer, teacher, model)
            row = {"variant": "teacher", "path": str(teacher), "params": num_params(teacher_model)}
            row["size_mb"] = round(weights_size(Path(teacher)) / 1e6, 3)
            row.update(measure(TorchRunner(teacher_model), evalset), **common)
            with atomic_dir(out_dir / "teacher") as tmp:
                write_report(tmp, row)
            rows.append(row)
            print(_progress(row))

        def save_hf(name: str, m: nn.Module, runner, extra: dict) -> dict:
            with atomic_dir(out_dir / name) as tmp:
                m.save_pretrained(tmp)
                write_modeling_file(m, tmp)
                tokenizer.save_pretrained(tmp)
                if name == "bf16":
                    atomic_write_text(tmp / VARIANT_FILE, json.dumps({"variant": "bf16"}) + "\n")
                row = {"variant": name, "path": str(out_dir / name), "params": num_params(m)}
                row["size_mb"] = round(weights_size(tmp) / 1e6, 3)
                row.update(measure(runner, evalset), **common, **extra)
                write_report(tmp, row)
            print(_progress(row))
            return row

        rows.append(save_hf("student", base_model, TorchRunner(base_model), {"source": str(model)}))
        deploy_model = base_model

        if prune_heads > 0:
            t_texts, t_labels = _read_split(train, text_column, label_column, label2id, None)
            train_batches = encode(tokenizer, t_texts, batch_size, max_length, t_labels)
            g = torch.Generator().manual_seed(seed)
            order = torch.randperm(len(train_batches), generator=g).tolist()
            train_batches = [train_batches[i] for i in order]
            pruned = copy.deepcopy(base_model)
            heads_before = count_heads(pruned)
            importance = head_importance(
                pruned, train_batches[:importance_batches], lambda o, b: F.cross_entropy(o.logits, b["labels"])
            )
            chosen = choose_heads(importance, prune_heads)
            record = prune_heads_fn(pruned, chosen)
            losses = refit(pruned, train_batches, refit_steps, refit_lr, teacher_model)
            extra = {
                "heads_before": heads_before,
                "heads_after": count_heads(pruned),
                "pruned_heads": record,
                "refit_steps": refit_steps,
                "refit_loss_first_last": [round(losses[0], 4), round(losses[-1], 4)] if losses else None,
                "importance": {k: [round(float(x), 4) for x in v] for k, v in importance.items()},
            }
            rows.append(save_hf("pruned", pruned, TorchRunner(pruned), extra))
            deploy_model = pruned

        if bf16:
            m16 = copy.deepcopy(deploy_model).to(torch.bfloat16).eval()
            rows.append(save_hf("bf16", m16, TorchRunner(m16, bf16=True), {"runtime": "bf16 weights + CPU autocast"}))

        if int8:
            q, qinfo = quantize_int8(deploy_model, int8_backend, probe=evalset.b32[0])
            with atomic_dir(out_dir / "int8") as tmp:
                deploy_model.config.save_pretrained(tmp)
                tokenizer.save_pretrained(tmp)
                torch.save(q.state_dict(), tmp / INT8_WEIGHTS)
                atomic_write_text(tmp / VARIANT_FILE, json.dumps({"variant": "int8", **qinfo}) + "\n")
                row = {"variant": "int8", "path": str(out_dir / "int8"), "params": num_params(deploy_model)}
                row["size_mb"] = round(weights_size(tmp) / 1e6, 3)
                row.update(measure(TorchRunner(q), evalset), **common, int8_backend=qinfo["backend"])
                if "probe_ms" in qinfo:
                    row["int8_backend_probe_ms"] = qinfo["probe_ms"]
                write_report(tmp, row)
            rows.append(row)
            print(_progress(row))

        if onnx:
            rows.append(_onnx_variant(deploy_model, tokenizer, out_dir, evalset, common, onnx_opset, threads))
        if int8 and importlib.util.find_spec("onnxruntime") is None:
            log.warning("onnxruntime is not installed: no onnx_int8/ variant (pip install onnxruntime)")
        elif int8:
            fp32 = out_dir / "onnx" / "model.onnx" if onnx else None
            rows.append(
                _onnx_int8_variant(deploy_model, tokenizer, out_dir, evalset, common, onnx_opset, threads, fp32)
            )

        result = summary(rows)
        atomic_write_text(out_dir / "report.json", json.dumps(result, indent=2, sort_keys=True) + "\n")
        atomic_write_text(out_dir / "report.md", summary_markdown(result))
        print(summary_markdown(result))
        return result


@contextlib.contextmanager
def _threads(n: int | None):
    """Run with ``n`` PyTorch threads (if given), restoring the previous count afterwards."""
    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _onnx_variant(model, tokenizer, out_dir: Path, evalset: EvalSet, common: dict, opset, threads) -> dict:
    example = {k: v for k, v in evalset.b32[0].items() if k != "labels"}
    example = {k: v[:2] for k, v in example.items()}
    check = {k: v[:3, : max(2, v.shape[1] - 1)] for k, v in evalset.b32[-1].items() if k != "labels"}
    with atomic_dir(out_dir / "onnx") as tmp:
        export_onnx(model, tmp / "model.onnx", example, opset)
        tokenizer.save_pretrained(tmp)
        model.config.save_pretrained(tmp)
        atomic_write_text(tmp / VARIANT_FILE, json.dumps({"variant": "onnx", "file": "model.onnx"}) + "\n")
        import onnx as onnx_lib

        onnx_lib.checker.check_model(str(tmp / "model.onnx"))
        row = {"variant": "onnx", "path": str(out_dir / "onnx"), "params": num_params(model)}
        row["size_mb"] = round(weights_size(tmp) / 1e6, 3)
        try:
            runner = OnnxRunner(tmp / "model.onnx", threads)
        except ImportError:
            runner = None
            row["check"] = "skipped: neither onnxruntime nor onnx is installed"
        if runner is not None:
            ref = TorchRunner(model)(check)
            diff = float((runner(check) - ref).abs().max())
            row["engine"] = runner.engine
            row["max_abs_diff_vs_torch"] = diff
            row["check"] = "ok" if diff < 1e-3 else "MISMATCH"
            if diff >= 1e-3:
                raise DomainBertError(f"the ONNX model's logits differ from PyTorch's by {diff:.2e}")
            if runner.engine.startswith("onnxruntime"):
                row.update(measure(runner, evalset))
        row.update(common)
        write_report(tmp, row)
    print(_progress(row))
    return row


def _onnx_int8_variant(
    model, tokenizer, out_dir: Path, evalset: EvalSet, common: dict, opset, threads, fp32: Path | None
) -> dict:
    """``onnx_int8/``: onnxruntime's dynamic int8 quantization of the fp32 ONNX export (exported here if needed)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with contextlib.ExitStack() as stack:
        if fp32 is None:
            scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=".onnx-fp32-", dir=out_dir)))
            example = {k: v[:2] for k, v in evalset.b32[0].items() if k != "labels"}
            fp32 = scratch / "model.onnx"
            export_onnx(model, fp32, example, opset)
        with atomic_dir(out_dir / "onnx_int8", what="the int8 ONNX variant") as tmp:
            with _quiet():
                quantize_dynamic(str(fp32), str(tmp / "model.onnx"), weight_type=QuantType.QInt8)
            tokenizer.save_pretrained(tmp)
            model.config.save_pretrained(tmp)
            info = {"variant": "onnx_int8", "file": "model.onnx", "quantization": "onnxruntime quantize_dynamic QInt8"}
            atomic_write_text(tmp / VARIANT_FILE, json.dumps(info) + "\n")
            runner = OnnxRunner(tmp / "model.onnx", threads)
            row = {"variant": "onnx_int8", "path": str(out_dir / "onnx_int8"), "params": num_params(model)}
            row["size_mb"] = round(weights_size(tmp) / 1e6, 3)
            row["engine"] = runner.engine
            row.update(measure(runner, evalset), **common)
            write_report(tmp, row)
    print(_progress(row))
    return row


def _progress(row: dict) -> str:
    keys = ("params", "size_mb", "latency_ms_b1", "latency_ms_b32", "f1_macro")
    return f"[{row['variant']}] " + " ".join(f"{k}={row[k]}" for k in keys if row.get(k) is not None)


def main(argv: list[str] | None = None) -> None:
    """``domainbert export``: parse the options (``--help`` lists them) and run :func:`export`."""
    from jsonargparse import ArgumentParser

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = ArgumentParser(
        prog="domainbert export",
        allow_abbrev=False,  # a misspelt option is an error, not a guess
        description="Write a model's deployment variants (HF, pruned, int8, bf16, ONNX), each with a report.",
    )
    parser.add_function_arguments(export, as_positional=False)
    cfg = parser.parse_args(_flag_values(argv, ("int8", "bf16", "onnx", "trust_pickle")))
    export(**cfg.as_dict())
