"""Where a served model's time goes: ``classify`` profiled by operator, and what ``torch.compile`` would buy.

One single-label classifier folder (an ``fp32``, ``bf16``, ``student``, ``teacher_bf16``, ``onnx`` or ``onnx_int8``
folder of ``domainbert export``, or a run's ``hf/``), the validation texts of a bundled domain, and ``classify`` as
it serves by default (length-sorted batches of 32, the recorded length and precision):

- the milliseconds per example of ``classify``, the median of ``--steps`` passes after ``--warmup`` passes;
- each operator's share of the operators' self CPU time in one pass (``torch.profiler``; an ONNX folder:
  onnxruntime's own profiler, by op type, fused and quantized kernels such as ``DynamicQuantizeMatMul`` among them;
  tokenization and Python work are not operators);
- with ``--compile``: the same batches, in the same precision, through ``torch.compile`` (inductor, dynamic shapes,
  frozen weights), with the same softmax per row; its first pass (the compile), its median pass, and how many
  predicted labels agree with ``classify``'s;
- ``--attention eager``: every figure with transformers' ``eager`` attention in place of ``sdpa`` (PyTorch only).

    python examples/benchmarks/serving_profile.py --model runs/export/teacher_bf16 --threads 2 --compile
    python examples/benchmarks/serving_profile.py --model runs/export/teacher_bf16 --threads 2 --attention eager
    python examples/benchmarks/serving_profile.py --model runs/export/bf16 --data examples/data/python-docs
    python examples/benchmarks/serving_profile.py --model runs/export/teacher_onnx_int8 --threads 2
    python examples/benchmarks/serving_profile.py --quick   # a tiny sample classifier, 16 texts (what the tests run)
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402


def parse(argv: list[str] | None):
    """The options (``--help``)."""
    p = common.base_parser(__doc__.splitlines()[0], steps=5, warmup=1)
    p.add_argument("--data", default=str(common.DATA), help="a folder with validation.jsonl (a `text` per row)")
    p.add_argument("--ops", type=int, default=12, help="operators listed, by self CPU time")
    p.add_argument("--compile", action="store_true", help="also time the model under torch.compile")
    p.add_argument("--attention", choices=["sdpa", "eager"], default="sdpa", help="transformers' attention function")
    p.add_argument("--onnx", action="store_true", help="--quick: the tiny classifier's onnx_int8 export instead")
    args = p.parse_args(argv)
    if args.quick:
        args.steps, args.ops = 1, 5
    elif args.model is None:
        p.error("--model: a classifier folder (an export variant run by PyTorch, or a run's hf/)")
    return args


def quick_onnx_int8(folder: str, out: Path, threads: int | None) -> Path:
    """``--quick --onnx``: the tiny classifier exported with int8 and ONNX (no labelled file); its ``onnx_int8``."""
    import contextlib

    from domainbert.deploy.command import export

    with contextlib.redirect_stdout(sys.stderr):  # its own report is not this benchmark's table
        export(
            model=str(folder), out=str(out), int8=True, onnx=True, latency_examples=32, repeats=1, threads=threads,
        )  # fmt: skip
    return out / "onnx_int8"


def timed(run, passes: int, warmup: int) -> tuple[float, float, list]:
    """(the first pass's seconds, the median of ``passes`` timed passes after ``warmup`` passes, the last output)."""
    start = time.perf_counter()
    out = run()
    first = time.perf_counter() - start
    for _ in range(warmup - 1):
        run()
    times = []
    for _ in range(max(1, passes)):
        start = time.perf_counter()
        out = run()
        times.append(time.perf_counter() - start)
    return first, statistics.median(times), out


def profile_table(run, rows: int) -> list[dict]:
    """Each operator's calls, self milliseconds and share of the operators' self CPU time in one ``run()``."""
    window = common.WindowProfile(warmup=0)
    run()
    return window.table(rows)


def onnx_profile_table(model, run, rows: int, threads: int | None) -> list[dict]:
    """:func:`profile_table` for an ``OnnxModel``: onnxruntime's own profiler over one ``run()``, by op type.

    The model's session is swapped for a profiling one on the same file for the pass, then restored.
    """
    import onnxruntime as ort

    runner = model.runner
    with tempfile.TemporaryDirectory(prefix="domainbert-bench-ort-") as tmp:
        opts = ort.SessionOptions()
        opts.enable_profiling, opts.profile_file_prefix, opts.log_severity_level = True, str(Path(tmp) / "ort"), 3
        if threads:
            opts.intra_op_num_threads = threads
        profiled = ort.InferenceSession(str(runner.path), opts, providers=["CPUExecutionProvider"])
        kept, runner.session = runner.session, profiled
        try:
            run()
            events = json.loads(Path(runner.session.end_profiling()).read_text(encoding="utf-8"))
        finally:
            runner.session = kept
    calls: dict[str, int] = {}
    micros: dict[str, float] = {}
    for event in events:  # one "<node>_kernel_time" event per node run; its op type in args
        if event.get("cat") == "Node" and event.get("name", "").endswith("_kernel_time"):
            op = event["args"]["op_name"]
            calls[op], micros[op] = calls.get(op, 0) + 1, micros.get(op, 0.0) + event["dur"]
    total = sum(micros.values()) or 1.0
    ranked = sorted(micros, key=micros.__getitem__, reverse=True)[:rows]
    return [
        {"operator": op, "calls": calls[op], "self ms": round(micros[op] / 1000, 1),
         "share": round(micros[op] / total, 3)}
        for op in ranked
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> dict:
    """Run the profile; print the table and the key=value line; return the figures."""
    import torch

    from domainbert.core.scoring import scored_length
    from domainbert.deploy import classify, load_variant
    from domainbert.deploy.bench import length_sorted_batches, served_runner
    from domainbert.deploy.onnx_export import OnnxModel, OnnxRunner
    from domainbert.errors import DomainBertError

    args = parse(argv)
    threads = common.set_threads(args.threads)
    common.print_machine(threads)
    path = Path(args.data) / "validation.jsonl"
    texts = [json.loads(line)["text"] for line in open(path, encoding="utf-8")]
    folder, scratch = args.model, None
    if args.quick:  # any --model is a base model here: a seeded tiny classifier stands in, kept until the run ends
        from domainbert.deploy.sample import sample_classifier

        scratch = tempfile.TemporaryDirectory(prefix="domainbert-bench-profile-")
        texts, folder = texts[:16], sample_classifier(Path(scratch.name) / "model")
        if args.onnx:
            folder = quick_onnx_int8(folder, Path(scratch.name) / "export", threads)
    model, tok, _ = load_variant(folder)
    onnx = isinstance(model, OnnxModel)
    if getattr(model.config, "problem_type", None) == "multi_label_classification":
        raise DomainBertError(f"--model {folder}: expected a single-label classifier")
    if onnx and (args.compile or args.attention != "sdpa"):
        raise DomainBertError(f"--model {folder}: an ONNX graph; --compile and --attention are for PyTorch models")
    if onnx:  # the benchmark's thread count
        model.runner = OnnxRunner(model.runner.path, threads)
    if args.attention != "sdpa":
        model.set_attn_implementation(args.attention)
    n = len(texts)

    def served() -> list[str]:
        return [r["label"] for r in classify(model, tok, texts)]

    first, median, rows = timed(served, args.steps, args.warmup)
    out = {"examples": n, "classify_ms": round(median * 1000 / n, 3)}
    how = model.runner.engine if onnx else f"attention {args.attention}"
    print(f"# {folder}: {n} texts from {path}; {how}; classify {out['classify_ms']} ms/example")
    table = onnx_profile_table(model, served, args.ops, threads) if onnx else profile_table(served, args.ops)
    print(common.table(table, list(table[0])))
    out.update({f"share_{row['operator'].replace('::', '_')}": row["share"] for row in table[:5]})

    if args.compile:
        autocast = served_runner(model).autocast  # bf16 weights run as they are; float32 ones as classify runs them
        length = scored_length(model.config, tok, None)
        names = [model.config.id2label[i] for i in sorted(model.config.id2label)]
        fn = torch.compile(model, dynamic=True, options={"freezing": True})

        def run_compiled() -> list[str]:
            labels: dict[int, str] = {}
            with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                for ids, batch in length_sorted_batches(tok, texts, 32, length):
                    probs = torch.softmax(fn(**batch).logits.float(), -1).tolist()
                    labels.update(
                        (i, names[max(range(len(p)), key=p.__getitem__)]) for i, p in zip(ids, probs, strict=True)
                    )
            return [labels[i] for i in range(n)]

        first_c, median_c, compiled_rows = timed(run_compiled, args.steps, args.warmup)
        out.update({
            "compiled_ms": round(median_c * 1000 / n, 3),
            "compile_s": round(first_c, 1),
            "compiled_speedup": round(median / median_c, 3),
            "compiled_agree": sum(a == b for a, b in zip(rows, compiled_rows, strict=True)),
        })  # fmt: skip
        print(
            f"# compiled: {out['compiled_ms']} ms/example, {out['compiled_speedup']}x classify, first pass (the "
            f"compile) {out['compile_s']} s, {out['compiled_agree']}/{n} labels as classify's"
        )
    out["attention"] = "onnxruntime" if onnx else args.attention
    out.update({"isa": common.isa_summary(), "threads": threads})
    print(common.kv_line(out))
    if scratch is not None:
        scratch.cleanup()
    return out


if __name__ == "__main__":
    main()
