"""Serving speed: domainbert predict and the exported variants against a plain Hugging Face ``pipeline``.

Every side goes from raw text to every label's probability, on the same fine-tuned teacher (``--model``: a
classifier exported over the Debian labels; any other checkpoint gets one seeded head, exported once, so every
side loads the same weights), the same validation texts, maximum length and thread count, in this one process:

- ``hf``: ``pipeline("text-classification", top_k=None)``, the reference;
- ``domainbert``: ``SequenceClassificationModule.predict_step`` on consecutive padded batches (bf16 autocast
  where the CPU multiplies bf16 natively);
- ``domainbert_sorted``: the same module on batches of rows of similar length, the predictions put back in the
  texts' order: what ``domainbert predict`` does with a file (``LengthSortedSampler``, ``PredictionWriter``);
- ``export_<variant>``: each model folder of ``--export DIR`` (written by ``domainbert export``: ``student``,
  ``pruned``, ``int8``, ``bf16``, ``onnx``, ``onnx_int8``), loaded with ``load_variant`` and served by
  ``deploy.classify`` as it is by default: batches by sorted length, the length and precision the folder records
  (bf16 as it is for ``bf16``, bf16 autocast for a float32 folder scored in bf16 where bf16 is native;
  onnxruntime for ONNX).

No side runs code from a folder: mean-pooling exports load through domainbert's own class, tokenizers through
``load_tokenizer`` (plain ``AutoTokenizer`` would read such an export's config and ask on stdin to run its code).

Each side: batch-1 latency p50/p90 (``--steps`` calls on one text), batch-32 throughput (the first
``--file-texts`` validation texts scored at batch ``--big-batch``, median of ``--passes`` timed passes) and the
macro-F1 of those predictions against the texts' gold labels, so that "faster" and "as accurate" show together.

    python examples/benchmarks/inference_latency.py --model runs/<fine-tuned>/version_0/hf --export runs/export \
        --passes 3 --threads 2
    python examples/benchmarks/inference_latency.py --quick   # tiny model and a tiny export (what the tests run)
"""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import json
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

#: probabilities of every label, by name, for each text
Scores = list[dict[str, float]]


@dataclass
class Side:
    """One way of serving the model: ``score(texts, batch_size)`` -> each text's label probabilities, in order.

    Attributes:
        name: the side's name in the table and the key=value line.
        score: the serving call, timed.
        lengths: texts -> their token counts (truncated), for the FLOPs (outside the clock).
        by_length: whether ``score`` batches rows by sorted length (else consecutive rows).
        model: a model (meta device is enough) whose weights and shape give the FLOPs per token.
        precision: the precision its matmuls run in (``fp32``/``bf16``; ``int8``: no MFU).
    """

    name: str
    score: Callable[[list[str], int], Scores]
    lengths: Callable[[list[str]], list[int]]
    by_length: bool
    model: object
    precision: str


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (nearest rank) of ``values``."""
    v = sorted(values)
    return v[min(len(v) - 1, max(0, round(q * (len(v) - 1))))] if v else float("nan")


def batches(lengths: list[int], batch_size: int, by_length: bool) -> list[list[int]]:
    """Row indices of each batch: consecutive rows, or rows grouped by length as ``domainbert predict`` groups them."""
    from domainbert.data.batching import LengthSortedSampler

    order = list(LengthSortedSampler(lengths, batch_size)) if by_length else list(range(len(lengths)))
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def token_lengths(tokenizer, max_length: int) -> Callable[[list[str]], list[int]]:
    """texts -> their token counts after truncation."""
    return lambda texts: [len(x) for x in tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]]


def sorted_scorer(tokenizer, max_length: int, run: Callable[[dict], Scores]) -> Callable[[list[str], int], Scores]:
    """Tokenize every text once, batch them by sorted length, pad each batch, run it and put the rows back in order."""

    def score(texts: list[str], batch_size: int) -> Scores:
        enc = tokenizer(texts, truncation=True, max_length=max_length)
        out: Scores = [{}] * len(texts)
        for idx in batches([len(x) for x in enc["input_ids"]], batch_size, by_length=True):
            rows = tokenizer.pad({k: [enc[k][i] for i in idx] for k in enc}, return_tensors="pt")
            for i, probs in zip(idx, run(dict(rows))):
                out[i] = probs
        return out

    return score


# -- the sides ----------------------------------------------------------------------------------------------
def teacher_folder(model_path: str, labels: list[str], seed: int, scratch: Path) -> str:
    """``model_path`` when it is a classifier over ``labels``; else it with one seeded new head, exported once."""
    import torch

    from domainbert.core.hf import load_config
    from domainbert.modules.classification import SequenceClassificationModule

    config = load_config(model_path)  # a mean-pooling export as its family's config, never its remote code
    arch = (getattr(config, "architectures", None) or [""])[0]
    if arch.endswith("ForSequenceClassification") and {str(v) for v in config.id2label.values()} == set(labels):
        return model_path
    print(
        f"# {model_path} has no head over the {len(labels)} labels: a seeded new one is added (macro-F1 then only "
        "checks that the sides agree)"
    )
    torch.manual_seed(seed)
    module = SequenceClassificationModule(init_from=model_path, label_names=labels)
    return str(module.export_hf(scratch / "teacher"))


def hf_side(teacher: str, max_length: int, kind: str) -> Side:
    """``pipeline("text-classification", top_k=None)`` on the teacher (its own architecture and labels)."""
    import torch
    import transformers
    from transformers import pipeline

    from domainbert.core.hf import load_config, load_tokenizer
    from domainbert.deploy.load import model_class

    config = load_config(teacher)  # a mean-pooling teacher: domainbert's own class, not the folder's remote code
    model = model_class(config).from_pretrained(
        teacher, config=config, dtype=torch.bfloat16 if kind == "bf16" else torch.float32
    )
    tok = load_tokenizer(teacher)  # AutoTokenizer would read the export's config and ask to run its code
    # the pipeline calls a mean-pooling head "not supported", and runs it all the same
    transformers.logging.set_verbosity(transformers.logging.CRITICAL)
    pipe = pipeline("text-classification", model=model, tokenizer=tok, top_k=None, device="cpu")
    transformers.logging.set_verbosity_error()

    def score(texts: list[str], batch_size: int) -> Scores:
        out = pipe(texts, batch_size=batch_size, truncation=True, max_length=max_length)
        return [{d["label"]: d["score"] for d in row} for row in out]

    return Side("hf", score, token_lengths(tok, max_length), False, model, kind)


def domainbert_side(teacher: str, max_length: int, kind: str, by_length: bool) -> Side:
    """``SequenceClassificationModule.predict_step`` on consecutive batches, or batched by sorted length."""
    import torch

    from domainbert.modules.classification import SequenceClassificationModule

    module = SequenceClassificationModule(init_from=teacher).eval()
    tok = module.tokenizer

    def run(batch: dict) -> Scores:
        autocast = torch.autocast("cpu", dtype=torch.bfloat16) if kind == "bf16" else contextlib.nullcontext()
        with torch.inference_mode(), autocast:
            return [row["probabilities"] for row in module.predict_step(batch, 0)]

    def consecutive(texts: list[str], batch_size: int) -> Scores:
        out: Scores = []
        for start in range(0, len(texts), batch_size):
            chunk = texts[start : start + batch_size]
            out += run(dict(tok(chunk, truncation=True, max_length=max_length, padding=True, return_tensors="pt")))
        return out

    score = sorted_scorer(tok, max_length, run) if by_length else consecutive
    name = "domainbert_sorted" if by_length else "domainbert"
    return Side(name, score, token_lengths(tok, max_length), by_length, module.model, kind)


def variant_side(folder: Path, max_length: int | None, threads: int, trust_pickle: bool) -> Side:
    """A folder of ``domainbert export``, loaded with ``load_variant`` and served by ``classify`` as it is by default
    (batches by sorted length; the folder's recorded length and precision unless ``max_length`` is given)."""
    import torch

    from domainbert.core.hf import load_config
    from domainbert.core.scoring import scored_length
    from domainbert.deploy.classifier import classify
    from domainbert.deploy.load import load_variant, model_class
    from domainbert.deploy.onnx_export import OnnxModel, OnnxRunner

    model, tok, info = load_variant(folder, trust_pickle=trust_pickle)
    if isinstance(model, OnnxModel):  # the benchmark's thread count, as for every other side
        model.runner = OnnxRunner(folder / info.get("file", "model.onnx"), threads)

    def score(texts: list[str], batch_size: int) -> Scores:
        return [row["probabilities"] for row in classify(model, tok, texts, batch_size, max_length)]

    config = load_config(str(folder))
    with torch.device("meta"):  # the FLOPs count the float model's weights, whatever the variant stores
        shape_model = model_class(config)(config)
    length = scored_length(model.config, tok, max_length)
    name = f"export_{folder.name}"
    return Side(name, score, token_lengths(tok, length), True, shape_model, variant_precision(folder, model))


def variant_precision(folder: Path, model=None) -> str:
    """The precision an export folder's matmuls run in: ``bf16``, ``int8`` (no probed peak: no MFU) or ``fp32``.

    With the loaded ``model``: as ``classify`` runs it by default (an fp32 folder recorded as scored in bf16 runs in
    bf16 where bf16 is native).
    """
    from domainbert.deploy.load import VARIANT_FILE

    f = folder / VARIANT_FILE
    variant = json.loads(f.read_text(encoding="utf-8")).get("variant") if f.exists() else "fp32"
    precision = {"bf16": "bf16", "int8": "int8", "onnx_int8": "int8"}.get(variant, "fp32")
    if precision == "fp32" and variant == "fp32" and model is not None:
        from domainbert.deploy.bench import served_runner

        return "bf16" if served_runner(model).bf16 else "fp32"
    return precision


def export_folders(root: Path) -> list[Path]:
    """The model folders of an export (``teacher/`` holds only a report: skipped, with a note)."""
    if not root.is_dir():
        raise SystemExit(f"--export {root}: no such folder")
    out = []
    for sub in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if (sub / "config.json").exists():
            out.append(sub)
        else:
            print(f"# export: {sub.name}/ holds no model (a report only): skipped")
    return out


def quick_export(teacher: str, out: Path, max_length: int, threads: int) -> Path:
    """A tiny export of ``teacher`` for ``--quick``: student, int8, bf16 and, with onnxruntime, onnx and onnx_int8."""
    from domainbert.deploy.command import export

    has_ort = importlib.util.find_spec("onnxruntime") is not None
    with contextlib.redirect_stdout(sys.stderr):  # its own report is not this benchmark's table
        export(
            model=teacher,
            out=str(out),
            data=str(common.DATA / "validation.jsonl"),
            limit=16,
            int8=True,
            bf16=True,
            onnx=has_ort,
            max_length=max_length,
            latency_examples=32,
            repeats=1,
            threads=threads,
        )
    return out


# -- measuring ----------------------------------------------------------------------------------------------
def macro_f1(scores: Scores, gold: list[str], labels: list[str]) -> float:
    """Macro-F1 of the most probable labels against ``gold`` (the training modules' own torchmetrics definition)."""
    import torch

    from domainbert.modules.metrics import classification_metrics

    index = {name: i for i, name in enumerate(labels)}
    unknown = {max(s, key=s.get) for s in scores} - set(index)
    if unknown:
        raise SystemExit(f"the model predicts labels the data does not have: {sorted(unknown)[:5]}")
    pred = torch.tensor([index[max(s, key=s.get)] for s in scores])
    metrics = classification_metrics(len(labels))
    metrics.update(torch.nn.functional.one_hot(pred, len(labels)).float(), torch.tensor([index[g] for g in gold]))
    return float(metrics.compute()["f1_macro"])


def pass_flops(side: Side, texts: list[str], batch_size: int) -> float:
    """Model FLOPs of one scoring of ``texts``: every batch padded to its longest row."""
    out = 0.0
    lengths = side.lengths(texts)
    for idx in batches(lengths, batch_size, side.by_length):
        width = max(lengths[i] for i in idx)
        out += len(idx) * width * common.flops_per_token(side.model, width, training=False)
    return out


def measure_b1(side: Side, texts: list[str], calls: int, warmup: int) -> tuple[list[float], float]:
    """Seconds of each of ``calls`` one-text calls (after ``warmup``), and the model FLOPs/s over them."""
    times, work = [], 0.0
    for i in range(warmup + calls):
        text = [texts[i % len(texts)]]
        start = time.perf_counter()
        result = side.score(text, 1)
        elapsed = time.perf_counter() - start
        if len(result) != 1:
            raise RuntimeError(f"{side.name}: {len(result)} predictions for 1 input")
        if i >= warmup:
            times.append(elapsed)
            work += pass_flops(side, text, 1)
    return times, work / sum(times)


def measure_file(side: Side, texts: list[str], batch_size: int, passes: int) -> tuple[list[float], Scores, float]:
    """Seconds of each timed scoring of all ``texts`` at ``batch_size`` (after one untimed batch), the first
    pass's predictions, and the model FLOPs/s."""
    side.score(texts[:batch_size], batch_size)
    times, first = [], None
    for _ in range(max(1, passes)):
        start = time.perf_counter()
        scores = side.score(texts, batch_size)
        times.append(time.perf_counter() - start)
        first = first or scores
    if len(first) != len(texts) or not all(first):
        raise RuntimeError(f"{side.name}: {len(first)} predictions for {len(texts)} inputs")
    return times, first, pass_flops(side, texts, batch_size) * len(times) / sum(times)


def run_side(side: Side, texts: list[str], gold: list[str], labels: list[str], args, peaks: dict) -> dict:
    """Every figure of one side."""
    one, one_flops = measure_b1(side, texts, args.steps, args.warmup)
    file_texts = texts[: args.file_texts or None]
    many, scores, many_flops = measure_file(side, file_texts, args.big_batch, args.passes)
    n_batches = -(-len(file_texts) // args.big_batch)
    peak = peaks.get(side.precision)
    return {
        "b1_p50_ms": 1000 * common.median(one),
        "b1_p90_ms": 1000 * percentile(one, 0.9),
        "bN_ms": 1000 * common.median(many) / n_batches,
        "bN_examples_per_s": len(file_texts) / common.median(many),
        "f1_macro": macro_f1(scores, gold[: len(file_texts)], labels),
        "peak_rss_mb": common.peak_rss_mb(),
        "mfu_b1": common.mfu(one_flops, peak),
        "mfu_bN": common.mfu(many_flops, peak),
        "mfu_ref": common.reference_mfu(many_flops, "bf16"),
    }


# -- output -------------------------------------------------------------------------------------------------
def table_rows(results: dict[str, dict], n: int) -> list[dict]:
    """The side-by-side table; ratios and macro-F1 differences against the pipeline."""
    hf = results["hf"]
    return [
        {
            "side": side,
            "b1 p50 ms": r["b1_p50_ms"],
            "b1 p90 ms": r["b1_p90_ms"],
            f"b{n} examples/s": r["bN_examples_per_s"],
            "× pipeline": r["bN_examples_per_s"] / hf["bN_examples_per_s"],
            "× pipeline b1": hf["b1_p50_ms"] / r["b1_p50_ms"],
            "macro-F1": r["f1_macro"],
            "ΔF1 pts": 100 * (r["f1_macro"] - hf["f1_macro"]),
            "peak RSS MB": r["peak_rss_mb"],
            "MFU b1": r["mfu_b1"],
            f"MFU b{n}": r["mfu_bN"],
        }
        for side, r in results.items()
    ]


def side_figures(results: dict[str, dict], tolerance_points: float = 0.5) -> dict:
    """Per side: ``speedup_b32_<side>`` (throughput over the pipeline's), ``speedup_b1_<side>``, ``f1_<side>`` and
    ``f1_drop_points_<side>``; and the fastest side whose macro-F1 is within ``tolerance_points`` of the pipeline's."""
    hf = results["hf"]
    out: dict = {"f1_hf": hf["f1_macro"]}
    best, best_speed = "hf", 1.0
    for side, r in results.items():
        if side == "hf":
            continue
        speed = r["bN_examples_per_s"] / hf["bN_examples_per_s"]
        drop = 100 * (hf["f1_macro"] - r["f1_macro"])
        out[f"speedup_b32_{side}"] = speed
        out[f"speedup_b1_{side}"] = hf["b1_p50_ms"] / r["b1_p50_ms"]
        out[f"f1_{side}"] = r["f1_macro"]
        out[f"f1_drop_points_{side}"] = drop
        if drop <= tolerance_points and speed > best_speed:
            best, best_speed = side, speed
    out.update({"fastest_within_f1": best, "fastest_within_f1_speedup_b32": best_speed})
    return out


def figures(results: dict[str, dict], n: int, peaks: dict, kind: str, threads: int) -> dict:
    """The key=value line: the figures of earlier versions (domainbert against hf), then every side's."""
    ours, hf = results["domainbert"], results["hf"]
    return {
        "latency_b1_ms": ours["b1_p50_ms"],
        "hf_latency_b1_ms": hf["b1_p50_ms"],
        "ratio_b1": hf["b1_p50_ms"] / ours["b1_p50_ms"],
        f"latency_b{n}_ms": ours["bN_ms"],
        f"hf_latency_b{n}_ms": hf["bN_ms"],
        f"ratio_b{n}": hf["bN_ms"] / ours["bN_ms"],
        "examples_per_s": ours["bN_examples_per_s"],
        "hf_examples_per_s": hf["bN_examples_per_s"],
        "peak_rss_mb": ours["peak_rss_mb"],
        "hf_peak_rss_mb": hf["peak_rss_mb"],
        "mfu": ours["mfu_bN"],
        "hf_mfu": hf["mfu_bN"],
        "mfu_b1": ours["mfu_b1"],
        "hf_mfu_b1": hf["mfu_b1"],
        "mfu_ref": ours["mfu_ref"],
        **side_figures(results),
        **common.peak_figures(peaks),
        "precision": kind,
        "isa": common.isa_summary(),
        "threads": threads,
    }


def parse(argv: list[str] | None):
    """The options (``--help``)."""
    p = common.base_parser(__doc__.splitlines()[0], steps=30, warmup=3)
    p.add_argument(
        "--max-length",
        type=int,
        default=None,
        help="tokens per text, every side (default: the length the teacher was trained at, else 128; the export's "
        "sides then read the length their folders record, as `classify` does by default)",
    )
    p.add_argument("--big-batch", type=int, default=32)
    p.add_argument("--file-texts", type=int, default=0, help="validation texts scored at --big-batch (0: all)")
    p.add_argument("--passes", type=int, default=1, help="timed passes over those texts (the median is reported)")
    p.add_argument("--precision", choices=["auto", "bf16", "fp32"], default="auto", help="of hf and domainbert")
    p.add_argument("--export", default=None, help="a folder written by `domainbert export`: each variant is a side")
    p.add_argument("--trust-pickle", action="store_true", help="let --export hold torchao int8 (pickled) weights")
    args = p.parse_args(argv)
    if args.quick:
        args.steps, args.warmup, args.big_batch, args.file_texts = min(args.steps, 3), 1, 8, 16
    return args


def main(argv: list[str] | None = None) -> dict:
    """Run the benchmark; print the table and the key=value line; return the figures."""
    args = parse(argv)
    threads, kind = common.start(args)
    rows = [json.loads(line) for line in open(common.DATA / "validation.jsonl", encoding="utf-8")]
    train_labels = {json.loads(line)["label"] for line in open(common.DATA / "train.jsonl", encoding="utf-8")}
    labels = sorted(str(x) for x in train_labels)
    texts, gold = [r["text"] for r in rows], [str(r["label"]) for r in rows]
    scratch = Path(tempfile.mkdtemp(prefix="domainbert-bench-serving-"))
    teacher = teacher_folder(common.resolve_model(args.model, args.quick), labels, args.seed, scratch)
    from domainbert.core.hf import load_config
    from domainbert.core.scoring import export_length
    from domainbert.errors import DomainBertError

    config = load_config(teacher)
    served_length = args.max_length  # None: each export folder's own record, as classify reads it
    args.max_length = export_length(config, args.max_length)
    export_root = quick_export(teacher, scratch / "export", args.max_length, threads) if args.quick else args.export
    folders = export_folders(Path(export_root)) if export_root else []
    n_file = len(texts[: args.file_texts or None])
    print(
        f"# teacher: {teacher}; export: {export_root or '-'}; max length {args.max_length}, precision {kind} (hf, "
        f"domainbert); batch 1: {args.warmup} warm-up + {args.steps} timed calls; batch {args.big_batch}: "
        f"{n_file} texts, 1 warm-up batch + {args.passes} timed pass(es)"
    )
    precisions = {kind} | {variant_precision(f) for f in folders} - {"int8"}
    peaks = common.probe_peaks(precisions, config, args.big_batch * args.max_length, args.quick)
    builders = [
        lambda: hf_side(teacher, args.max_length, kind),
        lambda: domainbert_side(teacher, args.max_length, kind, by_length=False),
        lambda: domainbert_side(teacher, args.max_length, kind, by_length=True),
    ] + [lambda f=f: variant_side(f, served_length, threads, args.trust_pickle) for f in folders]
    results = {}
    for build in builders:
        gc.collect()
        common.reset_peak_rss()
        try:
            side = build()
        except DomainBertError as err:  # a variant that cannot load here (torchao int8 without --trust-pickle)
            print(f"# skipped: {err}")
            continue
        results[side.name] = run_side(side, texts, gold, labels, args, peaks)
        r = results[side.name]
        print(f"# {side.name}: batch 1 p50 {r['b1_p50_ms']:.1f} ms, {r['bN_examples_per_s']:.1f} ex/s", flush=True)
        del side
    table = table_rows(results, args.big_batch)
    print(common.table(table, list(table[0])))
    out = figures(results, args.big_batch, peaks, kind, threads)
    print(common.kv_line(out))
    return out


if __name__ == "__main__":
    main()
