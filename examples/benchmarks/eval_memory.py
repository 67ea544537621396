"""Peak memory of a validation pass with 1x and 4x the validation data: it should not grow with the data.

Evaluation streams: the masked-LM perplexity and the classification metrics accumulate sums (a weighted mean,
stat scores), never the logits, so the peak resident set size of ``trainer.validate`` is set by one batch, not
by the number of batches. Each measurement runs in its own subprocess (a fresh peak), with domainbert's
modules and datamodules, the same model, batch size and precision:

- ``mlm``: ``MaskedLMModule`` + ``CorpusDataModule``, validation documents from the Debian corpus;
- ``classification``: ``SequenceClassificationModule`` + ``ClassificationDataModule``, the Debian validation
  split (4x: the split four times over).

    python examples/benchmarks/eval_memory.py                 # all-MiniLM-L6-v2, both tasks
    python examples/benchmarks/eval_memory.py --quick         # tiny model, mlm only (what the tests run)
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402


def mlm_parts(args, model_path: str, tmp: str):
    """The MLM module and a datamodule whose validation split holds ``scale`` times the documents."""
    from domainbert.data.corpus import CorpusDataModule
    from domainbert.modules.mlm import MaskedLMModule

    train = common.corpus_subset(32, tmp, name="train.txt")
    val = common.corpus_subset(args.docs * args.scale, tmp, offset=1000, name="val.txt")
    module = MaskedLMModule(init_from=model_path, head_warmup_steps=0)
    dm = CorpusDataModule(train=str(train), val=str(val), max_length=args.max_length, batch_size=args.batch)
    dm.connect(module.tokenizer)
    return module, dm


def classification_parts(args, model_path: str, tmp: str):
    """The classification module and a datamodule whose validation split is the Debian one ``scale`` times."""
    from domainbert.data.classification import ClassificationDataModule
    from domainbert.modules.classification import SequenceClassificationModule

    lines = (common.DATA / "validation.jsonl").read_text(encoding="utf-8").splitlines()
    lines = [line for line in lines if line.strip()][: args.rows]
    val = Path(tmp) / "val.jsonl"
    val.write_text("\n".join(lines * args.scale) + "\n", encoding="utf-8")
    dm = ClassificationDataModule(
        train=str(common.DATA / "train.jsonl"), val=str(val), batch_size=args.batch, max_length=args.max_length
    )
    # the memory of an evaluation, whatever the head predicts: a fresh head is asked for
    module = SequenceClassificationModule(init_from=model_path, label_names=dm.label_names, head_init="random")
    dm.connect(module.tokenizer)
    return module, dm


def child(args) -> None:
    """One measurement: set up, then validate with a fresh peak; print a key=value line."""
    import lightning.pytorch as L

    from domainbert.core.callbacks import TrainingGuard

    common.quiet()
    common.set_threads(args.threads)
    L.seed_everything(0, verbose=False)
    with tempfile.TemporaryDirectory(prefix="domainbert-bench-eval-") as tmp:
        build = mlm_parts if args.task == "mlm" else classification_parts
        module, dm = build(args, args.model, tmp)
        dm.setup("validate")
        loader = dm.val_dataloader()
        rows, batches = len(loader.dataset), len(loader)
        trainer = L.Trainer(
            accelerator="cpu",
            devices=1,
            precision=common.LIGHTNING_PRECISION[args.kind],
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            # as `domainbert fit` does: the guard returns freed heap memory after each evaluation batch
            callbacks=[TrainingGuard(release_memory=not args.no_release_memory)],
        )
        gc.collect()
        before = common.rss_mb()
        common.reset_peak_rss()
        metrics = trainer.validate(module, datamodule=dm, verbose=False)[0]
        peak = common.peak_rss_mb()
    print(
        common.kv_line(
            {
                "rows": rows,
                "batches": batches,
                "rss_before_mb": before,
                "peak_mb": peak,
                "val_loss": metrics["val/loss"],
            }
        )
    )


def measure(args, task: str, scale: int, model_path: str, kind: str) -> dict:
    """Run one child process and read its key=value line."""
    cmd = [
        sys.executable,
        __file__,
        "--child",
        "--task",
        task,
        "--scale",
        str(scale),
        "--model",
        model_path,
        "--kind",
        kind,
        "--docs",
        str(args.docs),
        "--rows",
        str(args.rows),
        "--batch",
        str(args.batch),
        "--max-length",
        str(args.max_length),
    ]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    if args.no_release_memory:
        cmd += ["--no-release-memory"]
    env = os.environ.copy()
    if args.steady_malloc:
        env["MALLOC_MMAP_THRESHOLD_"] = str(1 << 20)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("rows=")]
    if proc.returncode != 0 or not lines:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-6000:])
        raise SystemExit(f"eval_memory: the {task} x{scale} measurement failed (exit {proc.returncode})")
    out = {k: float(v) for k, v in common.parse_kv(lines[-1]).items()}
    return {"task": task, "scale": scale, **out}


def main(argv: list[str] | None = None) -> dict:
    """Measure 1x and 4x for each task; print the table and the key=value line."""
    p = common.base_parser(__doc__.splitlines()[0], steps=0, warmup=0)
    p.add_argument("--task", choices=["mlm", "classification", "both"], default="both")
    p.add_argument("--docs", type=int, default=512, help="mlm: validation documents at 1x (about 10 batches)")
    p.add_argument("--rows", type=int, default=383, help="classification: validation rows at 1x (383: all)")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--scale", type=int, default=4, help="the larger validation set, in multiples of 1x")
    p.add_argument("--tolerance-mb", type=float, default=32.0, help="growth still counted as flat (also 5%%)")
    p.add_argument("--precision", choices=["auto", "bf16", "fp32"], default="auto")
    p.add_argument(
        "--steady-malloc",
        action="store_true",
        help="fix glibc's mmap threshold at 1 MiB (MALLOC_MMAP_THRESHOLD_) so that freed activations go back to "
        "the system at once: the peak then shows live memory, without the allocator's heap drift",
    )
    p.add_argument(
        "--no-release-memory",
        action="store_true",
        help="turn off what `domainbert fit` does by default (TrainingGuard.release_memory: glibc's malloc_trim "
        "after every evaluation batch), to see the allocator's own retention",
    )
    p.add_argument("--child", action="store_true", help=__import__("argparse").SUPPRESS)
    p.add_argument("--kind", default="fp32", help=__import__("argparse").SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args)
        return {}
    if args.quick:
        args.docs, args.rows, args.batch, args.max_length = 8, 16, 4, 64
        if args.task == "both":
            args.task = "mlm"
    common.quiet()
    threads = args.threads or os.cpu_count()
    common.print_machine(threads)
    kind = args.precision if args.precision != "auto" else ("bf16" if common.native_bf16() else "fp32")
    model_path = common.resolve_model(args.model, args.quick)
    tasks = ["mlm", "classification"] if args.task == "both" else [args.task]
    malloc = "MALLOC_MMAP_THRESHOLD_=1MiB" if args.steady_malloc else "default malloc"
    malloc += ", no malloc_trim (--no-release-memory)" if args.no_release_memory else ", malloc_trim after each batch"
    print(f"# model: {model_path}; batch {args.batch}, max length {args.max_length}, precision {kind}; {malloc}")
    rows, figures, flat = [], {}, True
    for task in tasks:
        one = measure(args, task, 1, model_path, kind)
        many = measure(args, task, args.scale, model_path, kind)
        growth = many["peak_mb"] - one["peak_mb"]
        ok = growth <= max(args.tolerance_mb, 0.05 * one["peak_mb"])
        flat = flat and ok
        for r in (one, many):
            rows.append(
                {
                    "task": task,
                    "data": f"{r['scale']}x",
                    "rows": int(r["rows"]),
                    "batches": int(r["batches"]),
                    "RSS before MB": r["rss_before_mb"],
                    "peak MB": r["peak_mb"],
                    "pass growth MB": r["peak_mb"] - r["rss_before_mb"],
                }
            )
        short = "mlm" if task == "mlm" else "cls"
        figures.update(
            {
                f"{short}_peak_rss_1x_mb": one["peak_mb"],
                f"{short}_peak_rss_{args.scale}x_mb": many["peak_mb"],
                f"{short}_growth_mb": growth,
            }
        )
    print(common.table(rows, list(rows[0])))
    peaks = [r["peak MB"] for r in rows]
    growths = [v for k, v in figures.items() if k.endswith("_growth_mb")]
    figures = {
        **figures,
        "peak_rss_mb": max(peaks),
        "max_growth_mb": max(growths),
        "flat": flat,
        "precision": kind,
        "steady_malloc": args.steady_malloc,
        "release_memory": not args.no_release_memory,
        "isa": common.isa_summary(),
    }
    print(common.kv_line(figures))
    return figures


if __name__ == "__main__":
    main()
