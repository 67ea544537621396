"""Data set-up time of ``CorpusDataModule``, first run against second run: the tokenization cache at work.

Each run is a fresh process (as a second ``domainbert fit`` would be) that builds ``CorpusDataModule`` on the
Debian corpus (``examples/data/debian-packages/corpus.txt.gz``, 38k package descriptions) with the model's
tokenizer and times ``setup("fit")``: reading, the validation split, tokenization and packing. Both runs share
one fresh ``datasets`` cache folder (``HF_DATASETS_CACHE``), so the first one starts cold and the second one
finds everything cached.

    python examples/benchmarks/data_cache.py            # the whole corpus, all-MiniLM-L6-v2's tokenizer
    python examples/benchmarks/data_cache.py --quick    # 500 documents, a tiny tokenizer (what the tests run)
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402


def child(args) -> None:
    """Time one ``setup("fit")``; print a key=value line."""
    common.quiet()
    common.set_threads(args.threads)
    from domainbert.core.hf import load_tokenizer
    from domainbert.data.corpus import CorpusDataModule

    tokenizer = load_tokenizer(args.model)
    dm = CorpusDataModule(
        train=args.corpus, val_ratio=0.02, max_length=args.max_length, batch_size=32, num_proc=args.num_proc
    )
    dm.connect(tokenizer)
    start = time.perf_counter()
    dm.setup("fit")
    first = next(iter(dm.train_dataloader()))  # the data is usable, not only described
    seconds = time.perf_counter() - start
    print(
        common.kv_line(
            {
                "setup_s": seconds,
                "train_blocks": len(dm.train_ds),
                "val_blocks": len(dm.val_ds),
                "batch_tokens": first["input_ids"].numel(),
            }
        )
    )


def run_once(args, corpus: str, model_path: str, cache: str) -> dict:
    """One set-up in a fresh process sharing the ``datasets`` cache folder ``cache``."""
    cmd = [sys.executable, __file__, "--child", "--corpus", corpus, "--model", model_path]
    cmd += ["--max-length", str(args.max_length)]
    if args.num_proc:
        cmd += ["--num-proc", str(args.num_proc)]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    env = {**os.environ, "HF_DATASETS_CACHE": cache}
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    lines = [line for line in proc.stdout.splitlines() if line.startswith("setup_s=")]
    if proc.returncode != 0 or not lines:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-6000:])
        raise SystemExit(f"data_cache: the set-up run failed (exit {proc.returncode})")
    return {**{k: float(v) for k, v in common.parse_kv(lines[-1]).items()}, "process_s": wall}


def main(argv: list[str] | None = None) -> dict:
    """Two runs on a fresh cache; print the table and the key=value line."""
    p = common.base_parser(__doc__.splitlines()[0], steps=0, warmup=0)
    p.add_argument("--corpus", default=str(common.DATA / "corpus.txt.gz"), help="the corpus to set up")
    p.add_argument("--documents", type=int, default=None, help="use only the first N documents of the corpus")
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--num-proc", type=int, default=None, help="tokenization processes (datasets.map num_proc)")
    p.add_argument("--runs", type=int, default=2, help="set-ups on the same cache (the first is cold)")
    p.add_argument("--child", action="store_true", help=__import__("argparse").SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args)
        return {}
    if args.quick:
        args.documents = args.documents or 500
    common.quiet()
    threads = args.threads or os.cpu_count()
    common.print_machine(threads)
    model_path = common.resolve_model(args.model, args.quick)
    with tempfile.TemporaryDirectory(prefix="domainbert-bench-cache-") as tmp:
        corpus = args.corpus
        if args.documents:
            corpus = str(common.corpus_subset(args.documents, tmp))
        print(f"# corpus: {corpus}; tokenizer: {model_path}; max length {args.max_length}; fresh cache {tmp}/cache")
        runs = [run_once(args, corpus, model_path, f"{tmp}/cache") for _ in range(max(2, args.runs))]
    rows = [
        {
            "run": i + 1,
            "cache": "cold" if i == 0 else "warm",
            "setup s": r["setup_s"],
            "speed-up": runs[0]["setup_s"] / r["setup_s"],
            "process s": r["process_s"],
            "train blocks": int(r["train_blocks"]),
            "val blocks": int(r["val_blocks"]),
        }
        for i, r in enumerate(runs)
    ]
    print(common.table(rows, list(rows[0])))
    first, second = runs[0]["setup_s"], runs[1]["setup_s"]
    figures = {
        "first_setup_s": first,
        "second_setup_s": second,
        "ratio": first / second,
        "first_process_s": runs[0]["process_s"],
        "second_process_s": runs[1]["process_s"],
        "train_blocks": int(runs[0]["train_blocks"]),
        "isa": common.isa_summary(),
    }
    print(common.kv_line(figures))
    return figures


if __name__ == "__main__":
    main()
