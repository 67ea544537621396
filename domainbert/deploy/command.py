"""``domainbert export``: prepare a (distilled) model for CPU deployment and measure every variant.

From a Hugging Face folder (for example a distillation run's ``hf/`` export) it writes, under ``--out``:

- ``student/``: the model itself, re-saved with its tokenizer (whatever its role);
- ``pruned/`` (``--prune_heads F``): the model with the fraction ``F`` of its attention heads removed, lowest
  importance first (Michel et al., 2019: the importance of a head is the expected absolute gradient of the
  loss with respect to a mask on its output), then re-fitted for ``--refit_steps`` steps on ``--train``
  (with the teacher's soft targets when ``--teacher`` is given). The pruned variant is the base of the
  variants below;
- ``int8/`` (``--int8``): dynamic int8 quantization of every ``nn.Linear`` (torchao's
  ``Int8DynamicActivationInt8WeightConfig`` when torchao is installed and faster on this CPU, else
  ``torch.ao.quantization.quantize_dynamic``, which torch 2.13 still ships but marks deprecated), with one
  weight scale per output channel (``--int8_per_channel false``: one per weight tensor, torch.ao only);
- ``onnx_int8/`` (with ``--int8``, when onnxruntime is installed): onnxruntime's ``quantize_dynamic`` (int8
  weights, per output channel likewise) of the fp32 ONNX export, loaded without pickles;
- ``bf16/`` (``--bf16``; ``--bf16 auto``: where this CPU multiplies bf16 natively): bf16 weights, run in bf16 as
  they are (fast on CPUs with AMX or AVX512-BF16);
- ``onnx/`` (``--onnx``): ``model.onnx`` from the standard exporter (``torch.onnx.export(dynamo=True)``),
  with dynamic batch and sequence axes, checked against PyTorch with onnxruntime (or the ONNX reference
  evaluator when onnxruntime is missing). Where onnxruntime is installed, both ONNX graphs are rewritten into its
  fused attention, residual-LayerNorm and GELU kernels (``--onnx_fuse``, :mod:`domainbert.deploy.onnx_fuse`),
  which only onnxruntime runs; ``--onnx_fuse false`` keeps the exporter's portable graph.

Each format is one module of :mod:`domainbert.deploy.formats` (its writer, loader and runner), in a table that
other packages extend through the entry-point group ``domainbert.export_formats``; ``--formats [name, ...]`` writes
any of them by name.

With ``--teacher``, the teacher is measured beside the variants (``teacher/``: its report), and its own bf16, int8
and ONNX int8 are written too when the model gets them (``teacher_bf16/``, ``teacher_int8/``,
``teacher_onnx_int8/``; ``--teacher_variants false``: not): a fine-tuned teacher's conversion can be faster than a
student and better. With
``--probe`` (a frozen-embedding probe classifier's folder), the probe is measured too (``probe/``). Rows are named
by role: the model's (``--role``; ``student`` with a teacher, else ``model``), ``teacher``, ``probe``.

Each variant's folder gets ``report.json`` and ``report.md``: parameter count, weight-file size, CPU latency
per example at batch 1 (``--latency_examples`` texts of ``--data``, one at a time) and at batch 32
(``--b32_examples`` texts, in the batches :func:`~domainbert.deploy.classifier.classify` and ``domainbert predict``
serve: rows of similar length together; ``b32_padding`` is their share of padding), and accuracy / macro-F1 on
``--data`` (and on ``--val`` when given). The top-level ``report.json`` / ``report.md`` put all variants side by
side, with the difference from the teacher in macro-F1 points, recommend the variant to ship (among those at most
``--max_ms`` ms/example, the fastest at batch 32 whose macro-F1 is shown to be at most ``--max_drop`` points
below the best: its paired bootstrap interval on ``--val`` lies at or above ``-max_drop``; on ``--data``'s point
estimates without ``--val``; a conversion no faster than its own model is left out first:
:mod:`domainbert.deploy.recommend`), plot latency against macro-F1
(``tradeoff.png``), and say which of bf16 and int8 is faster on this machine. Every folder and file is written
atomically. The measurements reuse freed memory from batch to batch (glibc; :mod:`domainbert.core.cpu_memory`).

Load any variant back with :func:`domainbert.deploy.load.load_variant`. Nothing in a folder can make loading run
code: torchao's ``model_int8.pt`` (a pickle) loads only with ``--trust_pickle true`` / ``load_variant(...,
trust_pickle=True)``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from domainbert.core.cpu_memory import reusing_freed_memory
from domainbert.core.scoring import export_length, set_scoring
from domainbert.deploy.bench import EvalSet, encode, known_metrics, metric_batches
from domainbert.deploy.formats import ExportFormat, enabled, option_values
from domainbert.deploy.load import load_variant
from domainbert.deploy.prune import prune_and_refit
from domainbert.deploy.report import joined_rows, summary, summary_markdown, write_summary
from domainbert.deploy.variants import Outputs, measured_in_place, write_variant
from domainbert.errors import DomainBertError

log = logging.getLogger(__name__)

#: The text timed when no ``--data`` is given.
SYNTHETIC = "The package provides a command line tool and a library for parsing configuration files on unix systems."


def export(
    model: str,
    out: str,
    teacher: str | None = None,
    probe: str | None = None,
    data: str | None = None,
    val: str | None = None,
    train: str | None = None,
    text_column: str = "text",
    label_column: str = "label",
    max_length: int | None = None,
    role: str | None = None,
    int8: bool = False,
    bf16: bool | Literal["auto"] = False,
    onnx: bool = False,
    formats: list[str] | None = None,
    format_options: dict[str, Any] | None = None,
    teacher_variants: bool = True,
    prune_heads: float = 0.0,
    importance_batches: int = 8,
    refit_steps: int = 0,
    refit_lr: float = 3e-5,
    batch_size: int = 32,
    limit: int | None = None,
    latency_examples: int = 32,
    b32_examples: int = 256,
    repeats: int = 3,
    threads: int | None = None,
    seed: int = 0,
    trust_pickle: bool = False,
    max_drop: float | None = 1.0,
    max_ms: float | None = None,
    predictions: str | None = None,
    teacher_predictions: str | None = None,
    probe_predictions: str | None = None,
    join: list[str] | None = None,
) -> dict:
    """Write the deployment variants of ``model`` under ``out``, each with its report, and recommend one.

    Args:
        model: the Hugging Face folder to deploy (e.g. a distillation run's ``hf/``).
        out: the output folder: new, empty, or one domainbert wrote (never an input, the root, a home or a project
            folder); existing variant folders in it are replaced once the new ones are complete.
        teacher: the teacher's folder: measured beside the variants (row ``teacher``), its soft targets join the
            re-fit, and with ``teacher_variants`` its own bf16, int8 and onnx_int8 are written too (those the
            model gets).
        probe: a frozen-embedding probe classifier's folder (the pipeline's ``probe/hf``): measured beside the
            variants as row ``probe``, the floor every variant is checked against.
        data: labelled test file (JSONL/CSV/...) for the task metric and the latency inputs.
        val: labelled validation file: every variant's task metric on it too (``val_f1_macro``...), and the
            recommendation is made on it instead of on ``data``.
        train: labelled training file for the head importance and the re-fit (needed by ``prune_heads``).
        text_column: the text column of ``data``, ``val`` and ``train``.
        label_column: the label column (names as in the model's ``id2label``).
        max_length: truncation length of the inputs; default: the training length ``model`` records
            (:mod:`domainbert.core.scoring`), else 128. Every variant folder records it (``model_max_length`` of its
            tokenizer, which ``pipeline(..., truncation=True)`` and :func:`~domainbert.deploy.classifier.classify`
            read), so that each answers as its row was scored.
        role: what ``model`` is, the label of its rows (``student int8``...); default: ``student`` when a
            ``teacher`` is given, else ``model``. Its fp32 folder is ``student/`` either way.
        int8: write ``int8/``, dynamic int8 quantization of the Linear layers (``model_int8.pt``, for PyTorch), and
            ``onnx_int8/``, the same quantization of the ONNX export (onnxruntime's ``quantize_dynamic``), which any
            ONNX runtime loads without pickles (needs onnxruntime; skipped with a warning without it).
        bf16: write ``bf16/``, bf16 weights run in bf16 as they are; ``auto``: where this CPU multiplies bf16
            natively (AMX or AVX512-BF16, :func:`~domainbert.core.hardware.cpu_has_fast_bf16`), the pipeline's
            default.
        onnx: write ``onnx/model.onnx`` (``torch.onnx.export(dynamo=True)``) and check it against PyTorch.
        formats: more formats to write, by name: built-in (``bf16``, ``int8``, ``onnx``, ``onnx_int8``) or
            installed under the entry-point group ``domainbert.export_formats``.
        format_options: the formats' own options, by name (each format declares them,
            :func:`~domainbert.deploy.formats.option_defaults`): int8's ``int8_backend`` (``auto``: torchao when
            installed and faster here, else torch.ao; ``torchao``; ``torch``) and ``int8_per_channel`` (weight scales
            per output channel for int8 and onnx_int8, the default; false: one per tensor), onnx's ``onnx_opset``
            (default: the exporter's) and ``onnx_fuse`` (the graphs rewritten into onnxruntime's fused kernels, the
            default; false: the exporter's portable graph). On the command line each is also an option of its own:
            ``--int8_backend torch``, ``--onnx_fuse false``.
        teacher_variants: with ``teacher``, also write the teacher's bf16 and quantized variants (``teacher_bf16/``,
            ``teacher_int8/``, ``teacher_onnx_int8/``) when the model gets them: a teacher's conversion can beat a
            student that is no faster.
        prune_heads: fraction of attention heads to prune by importance (0 = none); writes ``pruned/``, which
            then is the base of the int8, bf16 and ONNX variants.
        importance_batches: training batches used to score the heads.
        refit_steps: optimizer steps of re-fitting after pruning.
        refit_lr: learning rate of the re-fit.
        batch_size: batch size of the metric pass, the importance pass and the re-fit.
        limit: use at most this many examples of ``data`` (and of ``val``).
        latency_examples: examples of ``data`` timed one by one: the batch-1 latency (``data`` repeated when it
            holds fewer).
        b32_examples: examples of ``data`` timed in batches of 32 (at least 32; ``data`` repeated when it holds
            fewer), batched as :func:`~domainbert.deploy.classifier.classify` and ``domainbert predict`` serve them
            (rows of similar length together): the batch-32 latency, which the recommendation reads.
        repeats: timing passes; the median is reported.
        threads: CPU threads for PyTorch and onnxruntime (default: PyTorch's default).
        seed: random seed (re-fit order and dropout).
        trust_pickle: let ``--model`` and ``--teacher`` be torchao int8 folders, whose weights load only by a full
            unpickling (which can run code): only for folders you trust.
        max_drop: the recommendation's rule: the fastest variant (ms/example at batch 32) whose macro-F1 is shown to
            be at most this many points below the best's (its 95% paired bootstrap interval on ``val`` lies at or
            above ``-max_drop``); None: no limit on the drop.
        max_ms: the recommendation's latency limit: only variants at most this many ms/example at batch 32 (with
            ``max_drop``, both limits hold); None: no limit.
        predictions: the model's test predictions over ``data`` from a pass already made (a JSON file of
            ``{"gold", "pred", "labels"}``, as the pipeline's training stages write ``test_predictions.json``): the
            model's fp32 row takes its task metric from them instead of a pass of its own over the rows (which runs
            after all, with a warning, when the file's gold labels or label names are not those of ``data`` and the
            model). Latency is still measured.
        teacher_predictions: the same for the teacher's row.
        probe_predictions: the same for the probe's row.
        join: the folders of other exports (another model, with its own tokenizer) whose rows join this one's
            summary: its table, plot and recommendation (:func:`~domainbert.deploy.report.joined_rows`).

    Returns:
        The summary report (also written to ``out/report.json``), with its ``recommendation``.
    """
    from domainbert.core.files import claim_folder
    from domainbert.deploy.recommend import check_rule

    check_rule(max_drop, max_ms)
    _check_timing(latency_examples, b32_examples)
    bf16 = _bf16_here(bf16)
    options = {**option_values(format_options), "threads": threads}
    inputs = [p for p in (model, teacher, data, train, predictions, teacher_predictions) if p and Path(p).exists()]
    out = claim_folder(out, inputs, "export: --out")  # before any work: new, empty or domainbert's; no input
    with _threads(threads), reusing_freed_memory():
        torch.manual_seed(seed)
        base, tokenizer, max_length, label2id = _deployed_model(model, trust_pickle, max_length, (prune_heads, train))
        read = partial(_read_split, text_column=text_column, label_column=label_column, label2id=label2id)
        sizes = Sizes(batch_size, max_length, latency_examples, b32_examples, repeats, limit)
        outs, known = _outputs(Path(out), tokenizer, read, (data, val), sizes, options)
        role = role or ("student" if teacher is not None else "model")
        others = {"teacher": (teacher, teacher_predictions), "probe": (probe, probe_predictions)}
        teacher_model = _measure_others(outs, known, model, others, trust_pickle)
        extra = {"source": str(model)}
        write_variant(outs, "fp32", base, "student", role, extra=extra, known=known(predictions, base.config))
        refit = {"heads": prune_heads, "importance_batches": importance_batches, "steps": refit_steps, "lr": refit_lr}
        refit.update(seed=seed, batch_size=batch_size, train=read(train, limit=None) if prune_heads > 0 else None)
        deployed = _pruned(outs, base, refit, teacher_model, role)
        chosen = enabled({"int8": int8, "bf16": bf16, "onnx": onnx}, formats)
        _write_formats(outs, deployed, chosen, role)
        if teacher_model is not None and teacher_variants:
            _write_formats(outs, teacher_model, [f for f in chosen if f.teacher], "teacher", prefix="teacher_")
        return _summary(outs, join, max_drop, max_ms)


def _bf16_here(bf16: bool | str) -> bool:
    """``--bf16``: true, false, or ``auto`` (true where this CPU multiplies bf16 natively)."""
    if bf16 == "auto":
        from domainbert.core.hardware import cpu_has_fast_bf16

        return cpu_has_fast_bf16()
    if not isinstance(bf16, bool):
        raise DomainBertError(f"export: --bf16 {bf16!r}: expected true, false or auto")
    return bf16


@dataclass(frozen=True)
class Sizes:
    """How much of the data every variant is measured on (:func:`export`'s options of the same names)."""

    batch_size: int
    max_length: int
    latency_examples: int
    b32_examples: int
    repeats: int
    limit: int | None


def _deployed_model(model: str, trust_pickle: bool, max_length: int | None, pruning: tuple):
    """The model at ``model`` in float32 eval mode, its tokenizer, the input length and its label ids.

    The length is recorded in the model's config and the tokenizer; ``pruning`` (``(prune_heads, train)``) is
    checked against the labels (:func:`_check_pruning`).
    """
    base, tokenizer, _ = load_variant(model, trust_pickle=trust_pickle)
    base = base.float().eval()
    label2id = _label2id(base.config)
    _check_pruning(*pruning, label2id)
    max_length = _fitting_length(export_length(base.config, max_length), base.config)
    set_scoring(base.config, max_length=max_length)
    tokenizer.model_max_length = max_length  # saved in every variant folder: its users cut inputs there
    return base, tokenizer, max_length, label2id


def _outputs(out: Path, tokenizer, read: Callable, files: tuple, sizes: Sizes, options: dict):
    """The export's shared outputs (what every variant is measured on) and its ``known`` (a model's earlier metric).

    Args:
        out: the output folder.
        tokenizer: the model's tokenizer.
        read: the reader of a labelled file (:func:`_read_split`, its columns and labels given).
        files: ``(data, val)``, either None.
        sizes: how much is measured.
        options: the formats' options.
    """
    data, val = files
    texts, labels = _eval_texts(read, data, sizes.limit, sizes.latency_examples)
    label2id = read.keywords["label2id"]
    num_labels = len(label2id) if label2id else None
    timing = {"latency_examples": sizes.latency_examples, "b32_examples": sizes.b32_examples, "repeats": sizes.repeats}
    evalset = EvalSet.build(tokenizer, texts, labels, num_labels, sizes.batch_size, sizes.max_length, **timing)
    common = {"examples": len(texts), "data": data, "limit": sizes.limit, "threads": torch.get_num_threads()}
    common.update(max_length=sizes.max_length, val=val, b32_padding=evalset.b32_padding())
    outs = Outputs(out, tokenizer, evalset, common, options)
    outs.label_names = sorted(label2id, key=label2id.get) if label2id else None
    outs.val_batches = _val_batches(read, val, sizes.limit, tokenizer, sizes.batch_size, sizes.max_length, num_labels)
    known = partial(_known, labels=None if sizes.limit else labels, num_labels=num_labels)
    return outs, known


def _measure_others(outs: Outputs, known: Callable, model: str, others: dict, trust_pickle: bool) -> nn.Module | None:
    """Measure the teacher and the probe where they are (rows ``teacher``, ``probe``); the teacher, or None.

    ``others``: ``{"teacher": (folder or None, its test predictions or None), "probe": (...)}``.
    """
    (teacher_path, teacher_predictions), (probe_path, probe_predictions) = others["teacher"], others["probe"]
    teacher_model = None
    if teacher_path is not None:
        teacher_model = _load_other(teacher_path, outs.tokenizer, model, trust_pickle)
        set_scoring(teacher_model.config, max_length=outs.common["max_length"])  # its variants are measured so
        known_teacher = known(teacher_predictions, teacher_model.config)
        measured_in_place(outs, "teacher", "teacher", teacher_path, teacher_model, known_teacher)
    probe_model = _load_probe(probe_path, outs.tokenizer, model)
    if probe_model is not None:
        known_probe = known(probe_predictions, probe_model.config)
        measured_in_place(outs, "probe", "probe", probe_path, probe_model, known_probe)
    return teacher_model


def _pruned(outs: Outputs, base: nn.Module, refit: dict, teacher: nn.Module | None, role: str) -> nn.Module:
    """``base`` with the share ``refit["heads"]`` of its heads pruned and re-fitted (written as ``pruned/``).

    Args:
        outs: the export's outputs.
        base: the float32 model.
        refit: ``heads``, ``importance_batches``, ``steps``, ``lr``, ``seed`` and ``batch_size`` (:func:`export`'s
            ``prune_heads``, ``importance_batches``, ``refit_steps``, ``refit_lr``, ``seed``, ``batch_size``), and
            ``train``: the labelled training split ``(texts, labels)``; None: no pruning, ``base`` itself is returned.
        teacher: the teacher, whose soft targets join the re-fit; None: the labels only.
        role: the model's role (its rows' label).
    """
    if refit["train"] is None or refit["heads"] <= 0:
        return base
    max_length = outs.common["max_length"]
    batches = _train_batches(refit["train"], outs.tokenizer, refit["batch_size"], max_length, refit["seed"])
    deployed, extra = prune_and_refit(
        base, batches, refit["heads"], refit["importance_batches"], refit["steps"], refit["lr"], teacher
    )
    write_variant(outs, "fp32", deployed, "pruned", role, extra=extra)
    return deployed


def _summary(outs: Outputs, join: list[str] | None, max_drop: float | None, max_ms: float | None) -> dict:
    """The summary of every row (and of the exports ``join`` names), written to ``out/`` and printed."""
    result = summary(outs.rows + joined_rows(join or []), max_drop=max_drop, max_ms=max_ms)
    write_summary(outs.out, result)
    print(summary_markdown(result))
    return result


def _write_formats(outs: Outputs, model: nn.Module, chosen: list[ExportFormat], role: str, prefix: str = "") -> None:
    """Write ``model`` in each format of ``chosen``, in order (``<prefix><format>/``); warn of those that cannot be."""
    ctx = outs.context()
    for fmt in chosen:
        missing = fmt.available()
        if missing:
            log.warning(
                "%s is not installed: no %s%s/ variant (pip install %s)", missing[0], prefix, fmt.name, *missing
            )
            continue
        write_variant(outs, fmt, model, f"{prefix}{fmt.name}", role, ctx=ctx)


def _fitting_length(max_length: int, config) -> int:
    """``max_length``, lowered to what the model's position embeddings hold (a model of 64 positions reads 64)."""
    from domainbert.core.families import max_positions

    limit = max_positions(config)
    if limit is not None and max_length > limit:
        log.info(
            "export: --max_length %d is beyond the model's %d positions; inputs are cut at %d", max_length, limit, limit
        )
        return limit
    return max_length


def _val_batches(read: Callable, val: str | None, limit, tokenizer, batch_size: int, max_length: int, num_labels):
    """The labelled batches of ``val`` for every row's validation metric; None without ``val`` or labels."""
    if val is None or not num_labels:
        return None
    texts, labels = read(val, limit=limit)
    if not texts:
        raise DomainBertError(f"{val}: no examples")
    return metric_batches(tokenizer, texts, labels, batch_size, max_length, rows=True)  # rows' predictions kept


def _known(path: str | None, config, labels: list[int] | None, num_labels: int | None) -> dict | None:
    """The task metric of a model's earlier test pass over the rows (``--predictions``), with ``from``: the file."""
    if path is None or labels is None:
        return None
    id2label = getattr(config, "id2label", None) or {}
    names = [str(id2label[i]) for i in range(len(id2label))] if id2label else None
    metrics = known_metrics(path, labels, names, num_labels)
    return {**metrics, "from": str(path)} if metrics is not None else None


def _check_timing(latency_examples: int, b32_examples: int) -> None:
    """Refuse latency passes that time nothing, or a batch-32 pass without one batch of 32."""
    if latency_examples < 1:
        raise DomainBertError(f"latency_examples={latency_examples}: expected at least 1 example timed at batch 1")
    if b32_examples < 32:
        raise DomainBertError(f"b32_examples={b32_examples}: expected at least 32 examples timed at batch 32")


def _check_pruning(prune_heads: float, train: str | None, label2id: dict | None) -> None:
    """Refuse head pruning without training rows or on a model that is not a single-label sequence classifier."""
    if prune_heads > 0 and train is None:
        raise DomainBertError("--prune_heads needs --train: labelled data to score the heads and re-fit")
    if prune_heads > 0 and label2id is None:
        raise DomainBertError("--prune_heads supports single-label sequence classifiers")


def _eval_texts(read: Callable, data: str | None, limit: int | None, latency_examples: int):
    """The texts (and labels, or None) that every variant is measured on: ``data``, or a synthetic sentence."""
    if data is None:
        log.warning("no --data: latency is timed on a synthetic sentence and no task metric is computed")
        return [SYNTHETIC] * max(32, latency_examples), None
    texts, labels = read(data, limit=limit)
    if not texts:
        raise DomainBertError(f"{data}: no examples")
    return texts, labels


def _load_other(folder: str, tokenizer, model: str, trust_pickle: bool) -> nn.Module:
    """The teacher (or probe) at ``folder`` in float32 eval mode, checked to share the model's tokenizer."""
    from domainbert.distill.student import check_same_tokenizer

    other, other_tokenizer, _ = load_variant(folder, trust_pickle=trust_pickle)
    check_same_tokenizer(other_tokenizer, tokenizer, folder, model)
    return other.float().eval()


def _load_probe(probe: str | None, tokenizer, model: str) -> nn.Module | None:
    """The probe classifier at ``probe`` (None without one, or with a warning when its tokenizer is another)."""
    if probe is None:
        return None
    try:
        return _load_other(probe, tokenizer, model, trust_pickle=False)
    except DomainBertError as err:
        log.warning("--probe %s is not measured: %s", probe, err)
        return None


def _train_batches(split, tokenizer, batch_size: int, max_length: int, seed: int) -> list[dict]:
    """The labelled training batches of ``split`` (``(texts, labels)``), in an order shuffled by ``seed``."""
    texts, labels = split
    batches = encode(tokenizer, texts, batch_size, max_length, labels)
    order = torch.randperm(len(batches), generator=torch.Generator().manual_seed(seed)).tolist()
    return [batches[i] for i in order]


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


def _read_split(spec: str, text_column: str, label_column: str, label2id: dict | None, limit: int | None):
    """The texts of ``spec`` (at most ``limit``) and their label ids (None when ``label2id`` is None)."""
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


def _format_flags(argv: list[str]) -> list[str]:
    """``argv`` with each format's option given on its own (``--int8_backend torch``) moved into ``--format_options``.

    Every format's options (:func:`~domainbert.deploy.formats.option_defaults`) are taken so; a boolean one may
    stand alone (``--onnx_fuse``: true). Values are read as YAML (``false``, ``null``, ``17``); those of a
    ``--format_options`` given too are kept, under these.
    """
    import yaml

    from domainbert.deploy.formats import option_defaults

    known, rest, given, i = option_defaults(), [], {}, 0
    while i < len(argv):
        name, eq, value = argv[i].partition("=")
        if not (name.startswith("--") and name[2:] in known):
            rest.append(argv[i])
        elif eq:
            given[name[2:]] = yaml.safe_load(value)
        elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            given[name[2:]] = yaml.safe_load(argv[i + 1])
            i += 1
        else:
            given[name[2:]] = True  # a boolean option standing alone
        i += 1
    if not given:
        return rest
    for j, arg in enumerate(rest[:-1]):
        if arg == "--format_options":  # the options given as one mapping, under those given one by one
            given = {**(yaml.safe_load(rest[j + 1]) or {}), **given}
            del rest[j : j + 2]
            break
    return [*rest, "--format_options", json.dumps(given)]


def main(argv: list[str] | None = None) -> None:
    """``domainbert export``: parse the options (``--help`` lists them) and run :func:`export`."""
    from domainbert.cli.tool_cli import run_function

    flags = ("int8", "bf16", "onnx", "trust_pickle", "teacher_variants")
    argv = _flag_values(_format_flags(list(sys.argv[1:] if argv is None else argv)), flags)
    description = (
        "Write a model's deployment variants (HF, pruned, int8, bf16, ONNX), each with a report; recommend one."
    )
    run_function(export, argv, prog="domainbert export", description=description)
