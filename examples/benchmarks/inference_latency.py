"""Inference latency at batch 1 and batch 32: domainbert against a Hugging Face ``pipeline``, side by side.

domainbert's way: ``SequenceClassificationModule.predict_step`` (what ``domainbert predict`` runs) on
tokenized, dynamically padded batches, in ``torch.inference_mode``. The Hugging Face way:
``pipeline("text-classification", top_k=None)``. Both go from raw text to every label's probability, on
the same model (15 Debian labels), the same texts from the validation split, the same maximum length,
precision and thread count, in this one process.

    python examples/benchmarks/inference_latency.py           # all-MiniLM-L6-v2
    python examples/benchmarks/inference_latency.py --quick   # tiny model (what the tests run)
"""

from __future__ import annotations

import contextlib
import gc
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (nearest rank) of ``values``."""
    v = sorted(values)
    return v[min(len(v) - 1, max(0, round(q * (len(v) - 1))))] if v else float("nan")


def domainbert_predictor(model_path: str, labels: list[str], max_length: int, kind: str):
    """A function texts -> predictions built on ``SequenceClassificationModule``."""
    import torch

    from domainbert.modules.classification import SequenceClassificationModule

    module = SequenceClassificationModule(init_from=model_path, label_names=labels)
    module.eval()
    tok = module.tokenizer
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if kind == "bf16" else contextlib.nullcontext()

    def predict(texts: list[str]) -> list[dict]:
        with torch.inference_mode(), autocast:
            batch = dict(tok(texts, truncation=True, max_length=max_length, padding=True, return_tensors="pt"))
            return module.predict_step(batch, 0)

    return predict, module.model


def hf_predictor(model_path: str, labels: list[str], max_length: int, kind: str):
    """A function texts -> predictions built on ``transformers.pipeline``."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline

    model = AutoModelForSequenceClassification.from_pretrained(
        model_path,
        num_labels=len(labels),
        id2label=dict(enumerate(labels)),
        label2id={n: i for i, n in enumerate(labels)},
        dtype=torch.bfloat16 if kind == "bf16" else torch.float32,
    )
    tok = AutoTokenizer.from_pretrained(model_path)
    pipe = pipeline("text-classification", model=model, tokenizer=tok, top_k=None, device="cpu")

    def predict(texts: list[str]) -> list:
        return pipe(texts, batch_size=len(texts), truncation=True, max_length=max_length)

    return predict, model


def forward_flops(tokenizer, model, max_length: int):
    """A function texts -> model FLOPs of one forward pass on them, padded to the longest (as both sides pad)."""

    def flops(texts: list[str]) -> float:
        ids = tokenizer(texts, truncation=True, max_length=max_length, padding=True)["input_ids"]
        length = len(ids[0])
        return len(ids) * length * common.flops_per_token(model, length, training=False)

    return flops


def measure(predict, texts: list[str], batch: int, calls: int, warmup: int, flops) -> tuple[list[float], float]:
    """Time ``calls`` calls on consecutive batches of ``texts`` (after ``warmup`` untimed calls).

    Returns:
        The seconds of each timed call, and the model FLOPs per second over them (``flops``: texts -> the FLOPs
        of one call, counted outside the clock).
    """
    out, work = [], 0.0
    for i in range(warmup + calls):
        chunk = [texts[(i * batch + j) % len(texts)] for j in range(batch)]
        start = time.perf_counter()
        result = predict(chunk)
        elapsed = time.perf_counter() - start
        if len(result) != batch:
            raise RuntimeError(f"{len(result)} predictions for {batch} inputs")
        if i >= warmup:
            out.append(elapsed)
            work += flops(chunk)
    return out, work / sum(out)


def main(argv: list[str] | None = None) -> dict:
    """Run the benchmark; print the table and the key=value line; return the figures."""
    p = common.base_parser(__doc__.splitlines()[0], steps=30, warmup=3)
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--batch-calls", type=int, default=5, help="timed calls at batch 32")
    p.add_argument("--big-batch", type=int, default=32)
    p.add_argument("--precision", choices=["auto", "bf16", "fp32"], default="auto", help="of both sides")
    args = p.parse_args(argv)
    if args.quick:
        args.steps, args.warmup, args.batch_calls, args.big_batch = min(args.steps, 5), 1, 2, 8
    common.quiet()
    threads = common.set_threads(args.threads)
    common.print_machine(threads)
    kind = args.precision if args.precision != "auto" else ("bf16" if common.native_bf16() else "fp32")
    model_path = common.resolve_model(args.model, args.quick)
    rows_raw = [json.loads(line) for line in open(common.DATA / "validation.jsonl", encoding="utf-8")]
    train_labels = {json.loads(line)["label"] for line in open(common.DATA / "train.jsonl", encoding="utf-8")}
    labels = sorted(str(x) for x in train_labels)
    texts = [r["text"] for r in rows_raw]
    print(
        f"# model: {model_path}; max length {args.max_length}, precision {kind}; batch 1: {args.warmup} warm-up + "
        f"{args.steps} timed calls; batch {args.big_batch}: 1 warm-up + {args.batch_calls} timed calls"
    )
    import torch
    from transformers import AutoConfig, AutoTokenizer

    peak = common.probe_peaks(
        [kind], AutoConfig.from_pretrained(model_path), args.big_batch * args.max_length, args.quick
    )
    peak = peak[kind]
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    torch.manual_seed(args.seed)
    results = {}
    for side, build in (("domainbert", domainbert_predictor), ("hf", hf_predictor)):
        gc.collect()
        common.reset_peak_rss()
        predict, model = build(model_path, labels, args.max_length, kind)
        flops = forward_flops(tokenizer, model, args.max_length)
        one, one_flops = measure(predict, texts, 1, args.steps, args.warmup, flops)
        many, many_flops = measure(predict, texts, args.big_batch, args.batch_calls, 1, flops)
        results[side] = {
            "b1_p50_ms": 1000 * common.median(one),
            "b1_p90_ms": 1000 * percentile(one, 0.9),
            "bN_ms": 1000 * common.median(many),
            "bN_examples_per_s": args.big_batch / common.median(many),
            "peak_rss_mb": common.peak_rss_mb(),
            "b1_flops_per_s": one_flops,
            "bN_flops_per_s": many_flops,
        }
        print(f"# {side}: batch 1 p50 {results[side]['b1_p50_ms']:.1f} ms", flush=True)
        del predict, model, flops
        gc.collect()

    ours, hf = results["domainbert"], results["hf"]
    n = args.big_batch
    rows = [
        {
            "side": side,
            "batch 1 p50 ms": r["b1_p50_ms"],
            "batch 1 p90 ms": r["b1_p90_ms"],
            f"batch {n} ms": r["bN_ms"],
            f"batch {n} examples/s": r["bN_examples_per_s"],
            "speed-up b1": hf["b1_p50_ms"] / r["b1_p50_ms"],
            f"speed-up b{n}": hf["bN_ms"] / r["bN_ms"],
            "peak RSS MB": r["peak_rss_mb"],
            "MFU b1": common.mfu(r["b1_flops_per_s"], peak),
            f"MFU b{n}": common.mfu(r["bN_flops_per_s"], peak),
            f"MFU b{n} (ref. bf16 2.6T)": common.reference_mfu(r["bN_flops_per_s"], "bf16"),
        }
        for side, r in results.items()
    ]
    print(common.table(rows, list(rows[0])))
    figures = {
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
        "mfu": common.mfu(ours["bN_flops_per_s"], peak),
        "hf_mfu": common.mfu(hf["bN_flops_per_s"], peak),
        "mfu_b1": common.mfu(ours["b1_flops_per_s"], peak),
        "hf_mfu_b1": common.mfu(hf["b1_flops_per_s"], peak),
        "mfu_ref": common.reference_mfu(ours["bN_flops_per_s"], "bf16"),
        **common.peak_figures({kind: peak}),
        "precision": kind,
        "isa": common.isa_summary(),
        "threads": threads,
    }
    print(common.kv_line(figures))
    return figures


if __name__ == "__main__":
    main()
