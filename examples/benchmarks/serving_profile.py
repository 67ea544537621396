"""Where a served model's time goes: ``classify`` profiled by operator, and what ``torch.compile`` would buy.

One model folder (any variant ``domainbert export`` writes, or a run's ``hf/``), the validation texts of a bundled
domain, ``classify`` as it serves by default (length-sorted batches of 32, the recorded length and precision):

- the milliseconds per example of ``classify``, the median of ``--passes`` passes after one warm-up pass;
- the share of one pass each PyTorch operator takes (``torch.profiler``, self CPU time);
- with ``--compile``: the same batches through ``torch.compile`` (inductor, dynamic shapes, frozen weights), its
  first pass (the compile) and its median pass, and how many predicted labels agree with ``classify``'s.

    python examples/benchmarks/serving_profile.py --model runs/export/teacher_bf16 --threads 2 --compile
    python examples/benchmarks/serving_profile.py --model runs/export/bf16 --data examples/data/python-docs
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
    p = common.base_parser(__doc__.splitlines()[0], steps=0, warmup=1)
    p.add_argument("--data", default=str(common.DATA), help="a folder with validation.jsonl (a `text` per row)")
    p.add_argument("--passes", type=int, default=5, help="timed passes over the texts (the median is reported)")
    p.add_argument("--ops", type=int, default=12, help="operators listed, by self CPU time")
    p.add_argument("--compile", action="store_true", help="also time the model under torch.compile")
    args = p.parse_args(argv)
    if args.quick:
        args.passes, args.ops = 1, 5
    elif args.model is None:
        p.error("--model: a model folder (an export variant or a run's hf/)")
    return args


def timed(run, passes: int) -> tuple[float, float, list]:
    """(first pass s, median pass s, the last pass's output)."""
    start = time.perf_counter()
    out = run()
    first = time.perf_counter() - start
    times = []
    for _ in range(passes):
        start = time.perf_counter()
        out = run()
        times.append(time.perf_counter() - start)
    return first, statistics.median(times), out


def main(argv: list[str] | None = None) -> dict:
    """Run the profile; print the tables and the key=value line; return the figures."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from domainbert.core.scoring import scored_length
    from domainbert.deploy import classify, load_variant
    from domainbert.deploy.bench import length_sorted_batches, served_runner

    args = parse(argv)
    threads = common.set_threads(args.threads)
    common.print_machine(threads)
    path = Path(args.data) / "validation.jsonl"
    texts = [json.loads(line)["text"] for line in open(path, encoding="utf-8")]
    folder = args.model
    if args.quick:  # any --model is a base model here: a seeded tiny classifier stands in
        from domainbert.deploy.sample import sample_classifier

        texts, folder = texts[:16], sample_classifier(Path(tempfile.mkdtemp(prefix="domainbert-bench-profile-")))
    model, tok, _ = load_variant(folder)
    n = len(texts)

    first, median, rows = timed(lambda: [r["label"] for r in classify(model, tok, texts)], args.passes)
    out = {"examples": n, "classify_ms": round(median * 1000 / n, 3)}
    print(f"# {folder}: {n} texts from {path}; classify {out['classify_ms']} ms/example (median of {args.passes})")

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        classify(model, tok, texts)
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in events) or 1
    table = [
        {"operator": e.key, "calls": e.count, "self ms": round(e.self_cpu_time_total / 1000, 1),
         "share": round(e.self_cpu_time_total / total, 3)}
        for e in events[: args.ops]
    ]  # fmt: skip
    print(common.table(table, list(table[0])))
    out.update({f"share_{row['operator'].replace('::', '_')}": row["share"] for row in table[:5]})

    if args.compile:
        runner = served_runner(model)
        length = scored_length(model.config, tok, None)
        names = [model.config.id2label[i] for i in sorted(model.config.id2label)]
        fn = torch.compile(model, dynamic=True, options={"freezing": True})

        def run_compiled() -> list[str]:
            ctx = torch.autocast("cpu", dtype=torch.bfloat16, enabled=runner.autocast)
            labels: dict[int, str] = {}
            with torch.inference_mode(), ctx:
                for ids, batch in length_sorted_batches(tok, texts, 32, length):
                    for i, k in zip(ids, fn(**batch).logits.argmax(-1).tolist(), strict=True):
                        labels[i] = names[k]
            return [labels[i] for i in range(n)]

        first_c, median_c, compiled_rows = timed(run_compiled, args.passes)
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
    out.update({"isa": common.isa_summary(), "threads": threads})
    print(common.kv_line(out))
    return out


if __name__ == "__main__":
    main()
