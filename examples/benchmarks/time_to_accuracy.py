"""Time to accuracy: seconds from the base model to a test macro-F1 target, domainbert against the HF Trainer.

The figure users feel: how long, on the wall clock, from the base checkpoint to a classifier of the
Debian packages (15 sections) that reaches ``--target`` test macro-F1 (default 0.75). Both sides run in this one
process, at the same precision (``--precision``; ``auto``: bf16 where the CPU multiplies bf16 in hardware, else
fp32), thread count, batch size and maximum length:

- ``domainbert``: the recipe of ``configs/finetune/minilm_debian-sections.yaml`` as a user runs it:
  ``SequenceClassificationModule`` (learning rate 1e-4, warm-up ratio 0.1, ``pooling: auto``, ``head_init: auto``:
  the head starts from a logistic regression on the frozen mean-pooled embeddings) and
  ``ClassificationDataModule`` (batch 16, max length 128, ``group_by_length``), 3 epochs, in a Lightning
  ``Trainer`` (``common.lightning_trainer``: no per-epoch validation, checkpoint or logger, on either side);
- ``hf``: the Hugging Face text-classification tutorial: ``AutoModelForSequenceClassification`` (the family's
  [CLS] pooler, a random head), tokenize + ``DataCollatorWithPadding`` + ``Trainer`` with its defaults (learning
  rate 5e-5, linear decay, no warm-up, 3 epochs).

Each side's clock starts before anything of it is built (data reading, tokenization, model loading, the probe fit
of ``head_init`` all count). The test macro-F1 is measured before the first step, every ``--eval-every``
optimizer steps and at the end; the time of these evaluations is taken off the clock. Time to target: the clock at
the first evaluation that reaches the target.

    python examples/benchmarks/time_to_accuracy.py                  # all-MiniLM-L6-v2, target 0.75
    python examples/benchmarks/time_to_accuracy.py --quick          # tiny model, a few dozen rows (the tests)
    python examples/benchmarks/time_to_accuracy.py --target 0.8 --eval-every 15
    python examples/benchmarks/time_to_accuracy.py --stop-at-target   # each side stops at the target
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import sys
import tempfile
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

SIDES = ("domainbert", "hf")


class Clock:
    """The seconds (wall clock and CPU) since a side started, less those its test evaluations took.

    Each :meth:`record` scores the model off the clock and keeps ``step``, ``seconds``, ``cpu_s`` and ``f1``.
    """

    def __init__(self, side: str) -> None:
        """Start the clock. Args: side: the side's name, for the progress lines."""
        self.side = side
        self.points: list[dict] = []
        self.excluded = [0.0, 0.0]
        self.start = (time.perf_counter(), time.process_time())

    def now(self) -> tuple[float, float]:
        """Wall-clock and CPU seconds so far, evaluations excluded."""
        return (
            time.perf_counter() - self.start[0] - self.excluded[0],
            time.process_time() - self.start[1] - self.excluded[1],
        )

    def done(self, args) -> bool:
        """With ``--stop-at-target``: whether the last evaluation reached the target (the side may stop)."""
        return bool(args.stop_at_target and self.points and self.points[-1]["f1"] >= args.target)

    def record(self, step: int, score: Callable[[], float]) -> None:
        """Read the clock, then run ``score`` (the test macro-F1) with the clock stopped."""
        if self.points and self.points[-1]["step"] == step:
            return
        seconds, cpu = self.now()
        wall0, cpu0 = time.perf_counter(), time.process_time()
        f1 = score()
        self.excluded[0] += time.perf_counter() - wall0
        self.excluded[1] += time.process_time() - cpu0
        self.points.append({"step": step, "seconds": seconds, "cpu_s": cpu, "f1": f1})
        print(f"# {self.side}: step {step}, {seconds:.1f} s, test macro-F1 {f1:.4f}", flush=True)


class Scorer:
    """The test rows, tokenized once and batched by length: what every evaluation of every side scores."""

    def __init__(self, path: Path, tokenizer, max_length: int, labels: list[str], batch_size: int = 64) -> None:
        """Read and tokenize ``path`` (``text``/``label`` JSONL); ``labels`` is the label set in id order."""
        from domainbert.data.labels import label_text

        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        enc = tokenizer([r["text"] for r in rows], truncation=True, max_length=max_length)
        order = sorted(range(len(rows)), key=lambda i: len(enc["input_ids"][i]))
        self.batches = [
            tokenizer.pad([{k: enc[k][i] for k in enc} for i in order[s : s + batch_size]], return_tensors="pt")
            for s in range(0, len(order), batch_size)
        ]
        self.labels = labels
        self.gold = [labels.index(label_text(rows[i]["label"])) for i in order]

    def macro_f1(self, model, forward: Callable[[dict], object], names: list[str], kind: str) -> float:
        """Test macro-F1 (the modules' torchmetrics definition) of ``forward``'s logits, ``model`` in eval mode.

        Args:
            model: the ``nn.Module`` to put in eval mode meanwhile (its mode is restored).
            forward: a batch of the tokenizer's tensors -> logits.
            names: the model's label names in output order.
            kind: ``bf16`` (autocast) or ``fp32``.
        """
        import torch

        from domainbert.modules.metrics import classification_metrics

        index = [self.labels.index(n) for n in names]
        preds = []
        with evaluating(model), torch.no_grad(), autocast(kind):
            for batch in self.batches:
                preds += [index[i] for i in forward(dict(batch)).float().argmax(-1).tolist()]
        metrics = classification_metrics(len(self.labels))
        metrics.update(
            torch.nn.functional.one_hot(torch.tensor(preds), len(self.labels)).float(), torch.tensor(self.gold)
        )
        return float(metrics.compute()["f1_macro"])


@contextlib.contextmanager
def evaluating(model) -> Iterator[None]:
    """``model`` in eval mode inside the block, back in its former mode afterwards."""
    was = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was)


def autocast(kind: str):
    """bf16 autocast on the CPU for ``bf16``; nothing for ``fp32``."""
    import torch

    return torch.autocast("cpu", dtype=torch.bfloat16) if kind == "bf16" else contextlib.nullcontext()


def label_set(train: Path) -> list[str]:
    """The labels of the training rows, sorted: the label ids of both sides."""
    from domainbert.data.labels import label_text

    lines = train.read_text(encoding="utf-8").splitlines()
    return sorted({label_text(json.loads(line)["label"]) for line in lines if line.strip()})


def steps_per_epoch(train: Path, batch: int) -> int:
    """Optimizer steps of one epoch over ``train`` (the last, partial batch included, as on both sides)."""
    rows = sum(1 for line in train.read_text(encoding="utf-8").splitlines() if line.strip())
    return math.ceil(rows / batch)


def run_domainbert(args, model_path: str, files: dict[str, Path], test: Scorer, kind: str, steps: int) -> Clock:
    """The shipped config's recipe: SequenceClassificationModule + ClassificationDataModule in a Lightning Trainer."""
    import lightning.pytorch as L

    clock = Clock("domainbert")
    from domainbert.data.classification import ClassificationDataModule
    from domainbert.modules.classification import SequenceClassificationModule

    L.seed_everything(args.seed, verbose=False)
    dm = ClassificationDataModule(
        train=str(files["train"]),
        val=str(files["validation"]),
        text_column="text",
        label_column="label",
        batch_size=args.batch,
        max_length=args.max_length,
        group_by_length=True,
        cache_dir=str(files["cache"] / "domainbert"),
        seed=args.seed,
    )
    module = SequenceClassificationModule(
        init_from=model_path,
        label_names=dm.label_names,
        learning_rate=1e-4,
        weight_decay=0.01,
        warmup_ratio=0.1,
        pooling=args.pooling,
        head_init="auto",
    )
    dm.connect(module.tokenizer)

    def score(pl_module) -> float:
        return test.macro_f1(pl_module, pl_module, pl_module.label_names, kind)

    class Evaluate(L.Callback):
        def on_train_start(self, trainer, pl_module):
            clock.record(0, lambda: score(pl_module))

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if trainer.global_step % args.eval_every == 0:
                clock.record(trainer.global_step, lambda: score(pl_module))
            trainer.should_stop = trainer.should_stop or clock.done(args)

        def on_train_end(self, trainer, pl_module):
            clock.record(trainer.global_step, lambda: score(pl_module))

    trainer = common.lightning_trainer(kind, steps, [Evaluate()])
    trainer.fit(module, datamodule=dm)
    print(f"# domainbert: pooling {module.pooling}, head_init {module.head_init}", flush=True)
    return clock


def run_hf(args, model_path: str, files: dict[str, Path], test: Scorer, kind: str, steps: int) -> Clock:
    """The HF tutorial: tokenize, DataCollatorWithPadding, AutoModelForSequenceClassification, Trainer defaults."""
    from transformers import (
        DataCollatorWithPadding,
        PrinterCallback,
        Trainer,
        TrainerCallback,
        set_seed,
    )

    clock = Clock("hf")
    set_seed(args.seed)
    tokenizer, model, names, encoded = common.hf_classification(
        model_path, files["train"], args.max_length, cache_dir=str(files["cache"])
    )

    def score() -> float:
        return test.macro_f1(model, lambda batch: model(**batch).logits, names, kind)

    class Evaluate(TrainerCallback):
        def on_train_begin(self, targs, state, control, **kw):
            clock.record(0, score)

        def on_step_end(self, targs, state, control, **kw):
            if state.global_step % args.eval_every == 0:
                clock.record(state.global_step, score)
            control.should_training_stop = control.should_training_stop or clock.done(args)

        def on_train_end(self, targs, state, control, **kw):
            clock.record(state.global_step, score)

    with tempfile.TemporaryDirectory(prefix="domainbert-bench-tta-hf-") as out:
        # the TrainingArguments defaults but for batch and steps: lr 5e-5, linear decay, no warm-up
        run = types.SimpleNamespace(batch=args.batch, warmup=0, steps=steps, seed=args.seed)
        targs = common.hf_training_args(run, out, kind)
        pad = DataCollatorWithPadding(tokenizer)
        trainer = Trainer(model=model, args=targs, train_dataset=encoded, data_collator=pad, callbacks=[Evaluate()])
        trainer.remove_callback(PrinterCallback)
        trainer.train()
    return clock


def quick_files(out: Path, n_train: int = 48, n_eval: int = 24) -> dict[str, Path]:
    """A few dozen Debian rows for ``--quick``: validation and test keep the labels the training rows have."""
    files = {}
    train = [json.loads(line) for line in (common.DATA / "train.jsonl").read_text(encoding="utf-8").splitlines()]
    train = train[:n_train]
    known = {str(r["label"]) for r in train}
    for split in ("train", "validation", "test"):
        rows = train
        if split != "train":
            lines = (common.DATA / f"{split}.jsonl").read_text(encoding="utf-8").splitlines()
            rows = [r for r in map(json.loads, lines) if str(r["label"]) in known][:n_eval]
        files[split] = out / f"{split}.jsonl"
        files[split].write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return files


def summary(side: str, clock: Clock, target: float) -> dict:
    """A side's figures: time, CPU time and steps to the target (nan if not reached), best, first and last F1."""
    reached = next((p for p in clock.points if p["f1"] >= target), None)
    nan = float("nan")
    last = clock.points[-1]
    return {
        "side": side,
        "reached": reached is not None,
        "time_to_target_s": reached["seconds"] if reached else nan,
        "cpu_time_to_target_s": reached["cpu_s"] if reached else nan,
        "steps_to_target": reached["step"] if reached else -1,
        "f1_step0": clock.points[0]["f1"],
        "best_f1": max(p["f1"] for p in clock.points),
        "final_f1": last["f1"],
        "total_s": last["seconds"],
        "total_cpu_s": last["cpu_s"],
        "steps": last["step"],
    }


def ratio(results: dict[str, dict]) -> tuple[float, bool]:
    """hf's time to target over domainbert's, and whether it is a lower bound (hf never reached the target).

    A lower bound is hf's whole time over domainbert's time to target; nan when domainbert misses the target.
    """
    ours, hf = results.get("domainbert"), results.get("hf")
    if not ours or not hf or not ours["reached"]:
        return float("nan"), False
    if hf["reached"]:
        return hf["time_to_target_s"] / ours["time_to_target_s"], False
    return hf["total_s"] / ours["time_to_target_s"], True


def report(results: dict[str, dict], curves: dict[str, Clock], args, kind: str, threads: int) -> dict:
    """Print each side's curve, the summary table and the ratio; return the key=value figures."""
    for side, clock in curves.items():
        print(f"\n{side}: test macro-F1 by optimizer step (seconds and CPU seconds exclude the evaluations)")
        print(common.table(clock.points, ["step", "seconds", "cpu_s", "f1"]))
    rows = [
        {
            "side": r["side"],
            f"time to F1>={args.target} s": fmt_reached(r, "time_to_target_s"),
            "steps to target": r["steps_to_target"] if r["reached"] else "not reached",
            "F1 at step 0": r["f1_step0"],
            "best F1": r["best_f1"],
            "final F1": r["final_f1"],
            "total s": r["total_s"],
            "steps": r["steps"],
        }
        for r in results.values()
    ]
    print()
    print(common.table(rows, list(rows[0])))
    value, bound = ratio(results)
    print(f"\nhf / domainbert time to macro-F1 >= {args.target}: {'>= ' if bound else ''}{common.fmt(value)}x")
    figures: dict = {"target": args.target}
    for side, r in results.items():
        for key in ("time_to_target_s", "cpu_time_to_target_s", "steps_to_target", "f1_step0", "best_f1"):
            figures[f"{side}_{key}"] = r[key]
        figures.update({f"{side}_final_f1": r["final_f1"], f"{side}_total_s": r["total_s"]})
        figures[f"{side}_reached"] = r["reached"]
    figures.update(ratio=value, ratio_is_lower_bound=bound, eval_every=args.eval_every, epochs=args.epochs)
    figures.update(batch=args.batch, precision=kind, native_bf16=common.native_bf16(), isa=common.isa_summary())
    figures["threads"] = threads
    return figures


def fmt_reached(r: dict, key: str) -> str:
    """The figure ``key`` of a side's summary, or ``not reached`` (best F1 and total time are beside it)."""
    return common.fmt(r[key]) if r["reached"] else "not reached"


def parse(argv: list[str] | None):
    """The options (``--steps``/``--warmup`` of the other benchmarks do not apply: both sides train whole epochs)."""
    p = common.base_parser(__doc__.splitlines()[0], steps=0, warmup=0)
    p.add_argument("--target", type=float, default=None, help="test macro-F1 to reach (default 0.75; --quick: 0)")
    p.add_argument("--epochs", type=int, default=3, help="epochs of both sides (the config's max_epochs)")
    p.add_argument("--batch", type=int, default=16, help="training batch of both sides (the config's)")
    p.add_argument("--max-length", type=int, default=128, help="longest tokenized input")
    p.add_argument("--eval-every", "--eval_every", type=int, default=None, help="steps (default: a third of an epoch)")
    p.add_argument("--precision", choices=["auto", "bf16", "fp32"], default="auto", help="of both sides")
    p.add_argument("--pooling", default=None, help="domainbert's model.pooling (default auto; --quick: mean)")
    p.add_argument("--stop-at-target", action="store_true", help="stop each side once it reaches the target")
    p.add_argument("--sides", default=",".join(SIDES), help=f"comma-separated sides from {list(SIDES)}")
    args = p.parse_args(argv)
    if args.quick:
        args.epochs, args.batch, args.max_length = 1, 8, 64
    # the tiny model has no mean pooling of its own: --quick asks for it so that the probe head runs too
    args.pooling = args.pooling or ("mean" if args.quick else "auto")
    args.target = args.target if args.target is not None else (0.0 if args.quick else 0.75)
    sides = args.sides.split(",")
    if any(s not in SIDES for s in sides):
        p.error(f"unknown sides in {sides}; choose from {list(SIDES)}")
    args.sides = sides
    return args


def main(argv: list[str] | None = None) -> dict:
    """Run both sides; print the curves, the summary and the key=value line; return the figures."""
    args = parse(argv)
    threads, kind = common.start(args)
    model_path = common.resolve_model(args.model, args.quick)
    from transformers import AutoTokenizer

    with tempfile.TemporaryDirectory(prefix="domainbert-bench-tta-") as tmp:
        files = (
            quick_files(Path(tmp))
            if args.quick
            else {s: common.DATA / f"{s}.jsonl" for s in ("train", "validation", "test")}
        )
        files["cache"] = Path(tmp) / "cache"  # a fresh datasets cache: both sides tokenize from cold
        per_epoch = steps_per_epoch(files["train"], args.batch)
        steps = per_epoch * args.epochs
        args.eval_every = args.eval_every or max(1, per_epoch // 3)
        print(
            f"# model: {model_path}; {per_epoch} steps/epoch x {args.epochs} epochs, batch {args.batch}, max length "
            f"{args.max_length}, precision {kind}; test macro-F1 every {args.eval_every} steps, target {args.target}",
            flush=True,
        )
        labels = label_set(files["train"])
        test = Scorer(files["test"], AutoTokenizer.from_pretrained(model_path), args.max_length, labels)
        curves: dict[str, Clock] = {}
        for side in args.sides:
            gc.collect()
            run = run_domainbert if side == "domainbert" else run_hf
            curves[side] = run(args, model_path, files, test, kind, steps)
            gc.collect()
    results = {side: summary(side, clock, args.target) for side, clock in curves.items()}
    figures = report(results, curves, args, kind, threads)
    print(common.kv_line(figures))
    return figures


if __name__ == "__main__":
    main()
