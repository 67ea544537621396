"""Where a served model's time goes: ``classify`` profiled by operator, and what ``torch.compile`` would buy.

One single-label classifier folder that PyTorch runs (an ``fp32``, ``bf16``, ``student`` or ``teacher_bf16`` folder
of ``domainbert export``, or a run's ``hf/``), the validation texts of a bundled domain, and ``classify`` as it
serves by default (length-sorted batches of 32, the recorded length and precision):

- the milliseconds per example of ``classify``, the median of ``--steps`` passes after ``--warmup`` passes;
- each PyTorch operator's share of the operators' self CPU time in one pass (``torch.profiler``; tokenization and
  Python work are not operators);
- with ``--compile``: the same batches, in the same precision, through ``torch.compile`` (inductor, dynamic shapes,
  frozen weights), with the same softmax per row; its first pass (the compile), its median pass, and how many
  predicted labels agree with ``classify``'s;
- ``--attention eager``: every figure with transformers' ``eager`` attention in place of ``sdpa``.

    python examples/benchmarks/serving_profile.py --model runs/export/teacher_bf16 --threads 2 --compile
    python examples/benchmarks/serving_profile.py --model runs/export/teacher_bf16 --threads 2 --attention eager
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
    p = common.base_parser(__doc__.splitlines()[0], steps=5, warmup=1)
    p.add_argument("--data", default=str(common.DATA), help="a folder with validation.jsonl (a `text` per row)")
    p.add_argument("--ops", type=int, default=12, help="operators listed, by self CPU time")
    p.add_argument("--compile", action="store_true", help="also time the model under torch.compile")
    p.add_argument("--attention", choices=["sdpa", "eager"], default="sdpa", help="transformers' attention function")
    args = p.parse_args(argv)
    if args.quick:
        args.steps, args.ops = 1, 5
    elif args.model is None:
        p.error("--model: a classifier folder (an export variant run by PyTorch, or a run's hf/)")
    return args


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


def main(argv: list[str] | None = None) -> dict:
    """Run the profile; print the table and the key=value line; return the figures."""
    import torch

    from domainbert.core.scoring import scored_length
    from domainbert.deploy import classify, load_variant
    from domainbert.deploy.bench import length_sorted_batches, served_runner
    from domainbert.deploy.onnx_export import OnnxModel
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
        texts, folder = texts[:16], sample_classifier(scratch.name)
    model, tok, _ = load_variant(folder)
    if isinstance(model, OnnxModel) or getattr(model.config, "problem_type", None) == "multi_label_classification":
        raise DomainBertError(f"--model {folder}: expected a single-label classifier that PyTorch runs")
    if args.attention != "sdpa":
        model.set_attn_implementation(args.attention)
    n = len(texts)

    def served() -> list[str]:
        return [r["label"] for r in classify(model, tok, texts)]

    first, median, rows = timed(served, args.steps, args.warmup)
    out = {"examples": n, "classify_ms": round(median * 1000 / n, 3)}
    print(f"# {folder}: {n} texts from {path}; attention {args.attention}; classify {out['classify_ms']} ms/example")
    table = profile_table(served, args.ops)
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
    out.update({"attention": args.attention, "isa": common.isa_summary(), "threads": threads})
    print(common.kv_line(out))
    if scratch is not None:
        scratch.cleanup()
    return out


if __name__ == "__main__":
    main()
