"""MLM training throughput: domainbert against the Hugging Face Trainer (``run_mlm.py`` style), side by side.

domainbert's way: ``lightning.pytorch.Trainer`` with ``MaskedLMModule`` (logits only at the masked
positions, masks drawn in the step) and ``CorpusDataModule`` (cached tokenization, packed blocks),
at ``--precision`` (``auto``: ``bf16-mixed`` where the CPU multiplies bf16 in hardware, else ``32-true``).
The Hugging Face way: tokenize + ``group_texts`` + ``DataCollatorForLanguageModeling`` + ``Trainer``,
with its defaults (fp32) and with ``bf16=True``.

Every side runs in this one process on the same model, the same documents, batch size, sequence length and
thread count. Data set-up is excluded; after ``--warmup`` steps, ``--steps`` optimizer steps are timed.

    python examples/benchmarks/mlm_throughput.py                  # all-MiniLM-L6-v2, seq 128, batch 32
    python examples/benchmarks/mlm_throughput.py --quick          # tiny model, seconds (what the tests run)
    python examples/benchmarks/mlm_throughput.py --sides domainbert,domainbert_dense,hf   # what sparse logits give
    python examples/benchmarks/mlm_throughput.py --sides domainbert,domainbert_compiled,domainbert_dropout0 --warmup 3
    python examples/benchmarks/mlm_throughput.py --sides domainbert,domainbert_sdpa --precision bf16 --repeats 3

``domainbert_sdpa`` trains with ``DOMAINBERT_CPU_DROPOUT=0``: PyTorch's own dropout and transformers' ``sdpa``
attention in training too, where the default attends eagerly on a CPU (``domainbert.core.cpu_dropout``).

The ``warm-up s`` column is the time from building the trainer to the end of the warm-up steps: for
``domainbert_compiled`` it holds ``torch.compile``'s compile time, which a run pays once.
"""

from __future__ import annotations

import gc
import sys
import tempfile
from itertools import chain
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

#: side name -> options; ``kind`` None means ``--precision``. Unnamed options take the defaults of ``SIDE``.
SIDE = {
    "impl": "domainbert",
    "kind": None,
    "sparse": True,
    "fused": False,
    "compile": False,
    "dropout": None,
    "library_kernels": False,
}
SIDES = {
    "domainbert": {},
    "domainbert_fp32": {"kind": "fp32"},
    "domainbert_bf16": {"kind": "bf16"},
    "domainbert_dense": {"sparse": False},
    "domainbert_fused": {"fused": True},
    "domainbert_compiled": {"compile": True},
    "domainbert_dropout0": {"dropout": 0.0},
    "domainbert_sdpa": {"library_kernels": True},
    "hf": {"impl": "hf", "kind": "fp32"},
    "hf_bf16": {"impl": "hf", "kind": "bf16"},
}


def run_domainbert(args, model_path: str, corpus: Path, kind: str, side: dict) -> dict:
    """Train with Lightning + MaskedLMModule + CorpusDataModule; return the clock and the model.

    ``side["fused"]`` injects ``torch.optim.AdamW(fused=True)`` (what the HF Trainer uses by default) through
    the module's ``optimizer`` argument, instead of the default AdamW (a per-tensor loop on CPU);
    ``side["compile"]`` sets the module's ``compile``; ``side["dropout"]`` overrides hidden and attention dropout;
    ``side["library_kernels"]`` trains with ``DOMAINBERT_CPU_DROPOUT=0`` (PyTorch's dropout, ``sdpa`` attention).
    """
    import functools

    import lightning.pytorch as L
    import torch

    from domainbert.data.corpus import CorpusDataModule
    from domainbert.modules.mlm import MaskedLMModule

    L.seed_everything(args.seed, verbose=False)
    module = MaskedLMModule(
        init_from=model_path,
        learning_rate=5e-5,
        mlm_probability=0.15,
        head_warmup_steps=0,  # the encoder trains from the first step, as in the HF Trainer
        sparse_logits=side["sparse"],
        compile=side["compile"],
        hidden_dropout=side["dropout"],
        attention_dropout=side["dropout"],
        seed=args.seed,
        optimizer=functools.partial(torch.optim.AdamW, fused=True) if side["fused"] else None,
    )
    dm = CorpusDataModule(train=str(corpus), val_ratio=0, max_length=args.seq, batch_size=args.batch, seed=args.seed)
    dm.connect(module.tokenizer)
    dm.setup("fit")  # not timed: the data set-up (see data_cache.py)
    clock = common.StepClock(args.warmup)

    class Clock(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            clock.tick(batch["input_ids"].numel())

    trainer = common.lightning_trainer(kind, args.warmup + args.steps, [Clock()])
    common.reset_peak_rss()
    with common.environment(DOMAINBERT_CPU_DROPOUT="0" if side["library_kernels"] else None):
        trainer.fit(module, datamodule=dm)
    return {"clock": clock, "model": module.model, "peak_rss_mb": common.peak_rss_mb()}


def run_hf(args, model_path: str, corpus: Path, kind: str) -> dict:
    """Train the ``run_mlm.py`` way: tokenize, group_texts, DataCollatorForLanguageModeling, Trainer."""
    import datasets
    from transformers import (
        AutoModelForMaskedLM,
        AutoTokenizer,
        DataCollatorForLanguageModeling,
        PrinterCallback,
        Trainer,
        TrainerCallback,
        set_seed,
    )

    set_seed(args.seed)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForMaskedLM.from_pretrained(model_path)
    raw = datasets.load_dataset("text", data_files=str(corpus), split="train")
    tokenized = raw.map(
        lambda b: tokenizer(b["text"], return_special_tokens_mask=True), batched=True, remove_columns=["text"]
    )
    block = args.seq

    def group_texts(examples):
        joined = {k: list(chain(*examples[k])) for k in examples}
        total = len(joined["input_ids"]) // block * block
        return {k: [t[i : i + block] for i in range(0, total, block)] for k, t in joined.items()}

    lm = tokenized.map(group_texts, batched=True)
    mlm = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15)
    sizes: list[int] = []

    def collate(rows):
        batch = mlm(rows)
        sizes.append(batch["input_ids"].numel())
        return batch

    clock = common.StepClock(args.warmup)

    class Clock(TrainerCallback):
        def on_step_end(self, targs, state, control, **kw):
            clock.tick(sizes[-1] if sizes else 0)

    with tempfile.TemporaryDirectory(prefix="domainbert-bench-hf-") as out:
        targs = common.hf_training_args(args, out, kind)
        trainer = Trainer(model=model, args=targs, train_dataset=lm, data_collator=collate, callbacks=[Clock()])
        trainer.remove_callback(PrinterCallback)  # no metrics dict printed over the table
        common.reset_peak_rss()
        trainer.train()
    return {"clock": clock, "model": model, "peak_rss_mb": common.peak_rss_mb()}


def default_sides(precision: str) -> list[str]:
    """Every side that is practical on this CPU: the bf16 HF run only where bf16 is native."""
    if precision == "auto" and not common.native_bf16():
        return ["domainbert", "hf"]
    return ["domainbert", "hf", "hf_bf16"]


def main(argv: list[str] | None = None) -> dict:
    """Run the benchmark; print the table and the key=value line; return the figures."""
    p = common.base_parser(__doc__.splitlines()[0], steps=5, warmup=2)
    p.add_argument("--seq", type=int, default=128, help="tokens per block")
    p.add_argument("--batch", type=int, default=32, help="blocks per batch")
    p.add_argument("--documents", type=int, default=2000, help="documents of the Debian corpus to use")
    p.add_argument(
        "--precision",
        choices=["auto", "bf16", "fp32"],
        default="auto",
        help="domainbert's precision; auto: bf16-mixed where the CPU has AMX/AVX512-BF16, else fp32",
    )
    p.add_argument("--sides", default=None, help=f"comma-separated sides from {sorted(SIDES)}; default: all practical")
    p.add_argument("--repeats", type=int, default=1, help="run every side this many times (interleaved); median")
    args = p.parse_args(argv)
    if args.quick:
        args.seq, args.batch, args.documents = 64, 8, 200
        args.steps, args.warmup = min(args.steps, 1), min(args.warmup, 1)
    threads, kind = common.start(args)
    sides = args.sides.split(",") if args.sides else default_sides(args.precision)
    unknown = [s for s in sides if s not in SIDES]
    if unknown:
        p.error(f"unknown sides {unknown}; choose from {sorted(SIDES)}")
    model_path = common.resolve_model(args.model, args.quick)
    print(
        f"# model: {model_path}; seq {args.seq}, batch {args.batch}, {args.warmup} warm-up + {args.steps} timed steps"
    )
    if kind == "bf16" and not common.native_bf16():
        print("# warning: this CPU has no native bf16 (AMX/AVX512-BF16): bf16 matmuls are emulated and far slower")
    from transformers import AutoConfig

    kinds = {SIDES[s].get("kind") or kind for s in sides}
    matmul = common.probe_peaks(kinds, AutoConfig.from_pretrained(model_path), args.batch * args.seq, args.quick)

    results: dict[str, list[dict]] = {s: [] for s in sides}
    fpt = None
    with tempfile.TemporaryDirectory(prefix="domainbert-bench-mlm-") as tmp:
        corpus = common.corpus_subset(args.documents, tmp)
        for _ in range(args.repeats):
            for side in sides:
                opts = {**SIDE, **SIDES[side]}
                side_kind = opts["kind"] or kind
                gc.collect()
                if opts["impl"] == "domainbert":
                    res = run_domainbert(args, model_path, corpus, side_kind, opts)
                else:
                    res = run_hf(args, model_path, corpus, side_kind)
                if fpt is None:
                    fpt = common.flops_per_token(res["model"], args.seq, training=True, mlm_probability=0.15)
                clock = res.pop("clock")
                res.pop("model")
                res.update(
                    kind=side_kind,
                    rate=clock.rate(),
                    cpu_rate=clock.cpu_rate(),
                    step_s=common.median(clock.step_seconds()),
                    warmup_s=clock.warmup_seconds(),
                )
                results[side].append(res)
                print(f"# {side}: {res['rate']:.1f} tokens/s ({res['step_s']:.3g} s/step)", flush=True)
                gc.collect()

    rate = {s: common.median([r["rate"] for r in rs]) for s, rs in results.items()}
    cpu_rate = {s: common.median([r["cpu_rate"] for r in rs]) for s, rs in results.items()}
    hf = rate.get("hf", float("nan"))
    rows = []
    for side, rs in results.items():
        k = rs[0]["kind"]
        flops = rate[side] * fpt
        rows.append(
            {
                "side": side,
                "precision": k,
                "tokens/s": rate[side],
                "vs hf fp32": rate[side] / hf,
                "tokens/CPU-s": cpu_rate[side],
                "CPU-s vs hf": cpu_rate[side] / cpu_rate.get("hf", float("nan")),
                "s/step": common.median([r["step_s"] for r in rs]),
                "warm-up s": common.median([r["warmup_s"] for r in rs]),
                "peak RSS MB": max(r["peak_rss_mb"] for r in rs),
                "MFU": common.mfu(flops, matmul[k]),
                "MFU (ref. bf16 2.6T)": common.reference_mfu(flops, "bf16"),
            }
        )
    print(common.table(rows, list(rows[0])))
    nan = float("nan")
    bf16_side = "domainbert" if kind == "bf16" else "domainbert_bf16"
    ours = rate.get("domainbert", nan)
    rss = {s: max(r["peak_rss_mb"] for r in rs) for s, rs in results.items()}
    figures = {
        "tokens_per_s": ours,
        "hf_tokens_per_s": hf,
        "hf_bf16_tokens_per_s": rate.get("hf_bf16", nan),
        "ratio": ours / hf,
        "ratio_fp32": ours / hf,
        "ratio_bf16": rate.get(bf16_side, nan) / rate.get("hf_bf16", nan),
        "cpu_ratio_fp32": cpu_rate.get("domainbert", nan) / cpu_rate.get("hf", nan),
        "cpu_ratio_bf16": cpu_rate.get(bf16_side, nan) / cpu_rate.get("hf_bf16", nan),
        "peak_rss_mb": rss.get("domainbert", nan),
        "hf_peak_rss_mb": rss.get("hf", nan),
        # the module's default (no dropout), against the HF Trainer with the checkpoint's dropout
        "ratio_dropout0": rate.get("domainbert_dropout0", nan) / hf,
        "mfu_dropout0": common.mfu(rate.get("domainbert_dropout0", nan) * fpt, matmul.get(kind)),
        "mfu": common.mfu(ours * fpt, matmul.get(kind)),
        "hf_mfu": common.mfu(hf * fpt, matmul.get("fp32")),
        "mfu_ref": common.reference_mfu(ours * fpt, "bf16"),
        "hf_mfu_ref": common.reference_mfu(hf * fpt, "bf16"),
        **common.peak_figures(matmul),
        "precision": kind,
        "native_bf16": common.native_bf16(),
        "isa": common.isa_summary(),
        "threads": threads,
    }
    print(common.kv_line(figures))
    return figures


if __name__ == "__main__":
    main()
