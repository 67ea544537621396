"""Sequence-classification fine-tuning throughput: domainbert against the Hugging Face Trainer, side by side.

domainbert's way: ``lightning.pytorch.Trainer`` with ``SequenceClassificationModule`` and
``ClassificationDataModule`` (dynamic padding; length-grouped batches with ``data.group_by_length: true``,
on here unless ``--no-group-by-length``). The Hugging Face way: tokenize + ``DataCollatorWithPadding`` +
``Trainer`` with its defaults (random order, dynamic padding). Both at the same precision (``--precision``;
``auto``: bf16 where the CPU multiplies bf16 in hardware, else fp32), on the Debian package data (15 labels),
in this one process, on the same model, batch size, maximum length and thread count.

By default each side runs one epoch of the 1,483 training rows (47 steps at batch 32), the first 2 untimed.
Length-grouped batches differ in width from one to the next, so a window of a few steps times whichever widths
come first; over the epoch both sides see every row once.

    python examples/benchmarks/finetune_throughput.py            # all-MiniLM-L6-v2, max length 128, batch 32
    python examples/benchmarks/finetune_throughput.py --quick    # tiny model (what the tests run)
    python examples/benchmarks/finetune_throughput.py --sides domainbert,hf,hf_grouped
    python examples/benchmarks/finetune_throughput.py --profile 12   # each side's 12 costliest operators

``--profile N`` runs each side's timed window under ``torch.profiler`` and prints its N operators of most self CPU
time: where a step's time goes (matrix products, attention, dropout masks, casts). The profiler slows the many small
operators most, so the rates of a profiled run are not the benchmark's figures.
"""

from __future__ import annotations

import gc
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

#: side name -> (implementation, length-grouped batches or None for ``--group-by-length``, fused AdamW)
SIDES = {
    "domainbert": ("domainbert", None, False),
    "domainbert_ungrouped": ("domainbert", False, False),
    "domainbert_fused": ("domainbert", None, True),
    "domainbert_dropout0": ("domainbert", None, False),  # no hidden or attention dropout: what the masks cost
    "hf": ("hf", False, None),
    "hf_grouped": ("hf", True, None),
}


def run_domainbert(
    args, model_path: str, train: Path, kind: str, grouped: bool, fused: bool = False, dropout: float | None = None
) -> dict:
    """Fine-tune with Lightning + SequenceClassificationModule + ClassificationDataModule.

    ``fused`` injects ``torch.optim.AdamW(fused=True)`` (the HF Trainer's default) as the module's optimizer;
    ``dropout`` sets the hidden and attention dropout (None: the module's default, 0.1).
    """
    import functools

    import lightning.pytorch as L
    import torch

    from domainbert.data.classification import ClassificationDataModule
    from domainbert.modules.classification import SequenceClassificationModule

    L.seed_everything(args.seed, verbose=False)
    dm = ClassificationDataModule(
        train=str(train),
        text_column="text",
        label_column="label",
        batch_size=args.batch,
        max_length=args.max_length,
        group_by_length=grouped,
        seed=args.seed,
    )
    module = SequenceClassificationModule(
        init_from=model_path,
        label_names=dm.label_names,
        learning_rate=5e-5,
        optimizer=functools.partial(torch.optim.AdamW, fused=True) if fused else None,
        **({} if dropout is None else {"hidden_dropout": dropout, "attention_dropout": dropout}),
    )
    dm.connect(module.tokenizer)
    dm.setup("fit")  # not timed
    clock = common.StepClock(args.warmup)
    window = common.WindowProfile(args.warmup, args.steps, enabled=bool(args.profile))
    tokens: list[tuple[int, int]] = []

    class Clock(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            clock.tick(batch["input_ids"].shape[0])
            window.tick()
            tokens.append((int(batch["attention_mask"].sum()), batch["input_ids"].numel()))

    trainer = common.lightning_trainer(kind, args.warmup + args.steps, [Clock()])
    common.reset_peak_rss()
    trainer.fit(module, datamodule=dm)
    rss = common.peak_rss_mb()
    return {"clock": clock, "tokens": tokens, "model": module.model, "peak_rss_mb": rss, "window": window}


def run_hf(args, model_path: str, train: Path, kind: str, grouped: bool, fused: bool | None = None) -> dict:
    """Fine-tune the Hugging Face way: tokenize, DataCollatorWithPadding, Trainer (its AdamW is fused already)."""
    from transformers import (
        DataCollatorWithPadding,
        PrinterCallback,
        Trainer,
        TrainerCallback,
        set_seed,
    )

    set_seed(args.seed)
    tokenizer, model, names, encoded = common.hf_classification(model_path, train, args.max_length)
    pad = DataCollatorWithPadding(tokenizer)
    seen: list[tuple[int, int, int]] = []

    def collate(rows):
        batch = pad(rows)
        seen.append((batch["input_ids"].shape[0], int(batch["attention_mask"].sum()), batch["input_ids"].numel()))
        return batch

    clock = common.StepClock(args.warmup)
    window = common.WindowProfile(args.warmup, args.steps, enabled=bool(args.profile))
    tokens: list[tuple[int, int]] = []

    class Clock(TrainerCallback):
        def on_step_end(self, targs, state, control, **kw):
            n, real, padded = seen[-1] if seen else (0, 0, 0)
            clock.tick(n)
            window.tick()
            tokens.append((real, padded))

    with tempfile.TemporaryDirectory(prefix="domainbert-bench-hf-") as out:
        sampling = "group_by_length" if grouped else "random"
        targs = common.hf_training_args(args, out, kind, train_sampling_strategy=sampling)
        trainer = Trainer(model=model, args=targs, train_dataset=encoded, data_collator=collate, callbacks=[Clock()])
        trainer.remove_callback(PrinterCallback)
        common.reset_peak_rss()
        trainer.train()
    return {"clock": clock, "tokens": tokens, "model": model, "peak_rss_mb": common.peak_rss_mb(), "window": window}


def subset(n_rows: int, out_dir: str) -> Path:
    """The first ``n_rows`` of the Debian training split, as JSONL."""
    out = Path(out_dir) / "train.jsonl"
    with open(common.DATA / "train.jsonl", encoding="utf-8") as src:
        rows = [json.loads(line) for _, line in zip(range(n_rows), src)]
    out.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> dict:
    """Run the benchmark; print the table and the key=value line; return the figures."""
    p = common.base_parser(__doc__.splitlines()[0], steps=45, warmup=2)
    p.add_argument("--max-length", type=int, default=128, help="longest tokenized input")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--rows", type=int, default=None, help="training rows to use (default: all 1,483)")
    p.add_argument("--precision", choices=["auto", "bf16", "fp32"], default="auto", help="of both sides")
    p.add_argument(
        "--group-by-length",
        action=__import__("argparse").BooleanOptionalAction,
        default=True,
        help="domainbert's length-grouped batches (data.group_by_length)",
    )
    p.add_argument("--sides", default="domainbert,hf", help=f"comma-separated sides from {sorted(SIDES)}")
    p.add_argument("--repeats", type=int, default=1, help="run every side this many times (interleaved); median")
    p.add_argument("--profile", type=int, default=0, metavar="N", help="print each side's N costliest operators")
    args = p.parse_args(argv)
    if args.quick:
        args.max_length, args.batch, args.rows = 64, 8, args.rows or 120
        args.steps, args.warmup = min(args.steps, 1), min(args.warmup, 1)
    threads, kind = common.start(args)
    sides = args.sides.split(",")
    unknown = [s for s in sides if s not in SIDES]
    if unknown:
        p.error(f"unknown sides {unknown}; choose from {sorted(SIDES)}")
    model_path = common.resolve_model(args.model, args.quick)
    print(
        f"# model: {model_path}; max length {args.max_length}, batch {args.batch}, precision {kind}, "
        f"{args.warmup} warm-up + {args.steps} timed steps; domainbert group_by_length={args.group_by_length}"
    )
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model_path)
    peak = common.probe_peaks([kind], config, args.batch * args.max_length, args.quick)[kind]
    results: dict[str, list[dict]] = {s: [] for s in sides}
    with tempfile.TemporaryDirectory(prefix="domainbert-bench-ft-") as tmp:
        train = subset(args.rows, tmp) if args.rows else common.DATA / "train.jsonl"
        for _ in range(args.repeats):
            for side in sides:
                impl, grouped, fused = SIDES[side]
                grouped = args.group_by_length if grouped is None else grouped
                gc.collect()
                run = run_domainbert if impl == "domainbert" else run_hf
                extra = {"dropout": 0.0} if side == "domainbert_dropout0" else {}
                res = run(args, model_path, train, kind, grouped, fused, **extra)
                clock, tokens, model = res.pop("clock"), res.pop("tokens"), res.pop("model")
                ops = res.pop("window").table(args.profile)
                seconds = clock.seconds()
                real_tokens = sum(t[0] for t in tokens[args.warmup :])
                padded_tokens = sum(t[1] for t in tokens[args.warmup :])
                fpt = common.flops_per_token(model, args.max_length, training=True)
                res.update(
                    grouped=grouped,
                    rate=clock.rate(),
                    cpu_rate=clock.cpu_rate(),
                    tokens_per_s=real_tokens / seconds,
                    pad_efficiency=real_tokens / max(1, padded_tokens),
                    step_s=common.median(clock.step_seconds()),
                    flops_per_s=fpt * real_tokens / seconds,
                )
                results[side].append(res)
                print(f"# {side}: {res['rate']:.2f} examples/s ({res['step_s']:.3g} s/step)", flush=True)
                if ops:
                    print(f"# {side}: operators over the timed window (profiled: its rate is not the benchmark's)")
                    print(common.table(ops, list(ops[0])), flush=True)
                del model
                gc.collect()

    med = {
        s: {
            k: common.median([r[k] for r in rs])
            for k in ("rate", "cpu_rate", "tokens_per_s", "step_s", "flops_per_s", "pad_efficiency")
        }
        for s, rs in results.items()
    }
    nan = float("nan")
    hf = med.get("hf", {}).get("rate", nan)
    rows = [
        {
            "side": side,
            "grouped": rs[0]["grouped"],
            "examples/s": med[side]["rate"],
            "vs hf": med[side]["rate"] / hf,
            "examples/CPU-s": med[side]["cpu_rate"],
            "CPU-s vs hf": med[side]["cpu_rate"] / med.get("hf", {}).get("cpu_rate", nan),
            "tokens/s": med[side]["tokens_per_s"],
            "real/padded": med[side]["pad_efficiency"],
            "s/step": med[side]["step_s"],
            "peak RSS MB": max(r["peak_rss_mb"] for r in rs),
            "MFU": common.mfu(med[side]["flops_per_s"], peak),
            "MFU (ref. bf16 2.6T)": common.reference_mfu(med[side]["flops_per_s"], "bf16"),
        }
        for side, rs in results.items()
    ]
    print(common.table(rows, list(rows[0])))
    ours = med.get("domainbert", {}).get("rate", nan)
    rss = {s: max(r["peak_rss_mb"] for r in rs) for s, rs in results.items()}
    figures = {
        "examples_per_s": ours,
        "hf_examples_per_s": hf,
        "ratio": ours / hf,
        "cpu_ratio": med.get("domainbert", {}).get("cpu_rate", nan) / med.get("hf", {}).get("cpu_rate", nan),
        "peak_rss_mb": rss.get("domainbert", nan),
        "hf_peak_rss_mb": rss.get("hf", nan),
        "mfu": common.mfu(med.get("domainbert", {}).get("flops_per_s", nan), peak),
        "hf_mfu": common.mfu(med.get("hf", {}).get("flops_per_s", nan), peak),
        "mfu_ref": common.reference_mfu(med.get("domainbert", {}).get("flops_per_s", nan), "bf16"),
        "hf_mfu_ref": common.reference_mfu(med.get("hf", {}).get("flops_per_s", nan), "bf16"),
        **common.peak_figures({kind: peak}),
        "precision": kind,
        "group_by_length": args.group_by_length,
        "native_bf16": common.native_bf16(),
        "isa": common.isa_summary(),
        "threads": threads,
    }
    print(common.kv_line(figures))
    return figures


if __name__ == "__main__":
    main()
