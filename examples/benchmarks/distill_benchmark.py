"""Teacher vs distilled student vs its int8 and bf16 variants, side by side, on one CPU.

    python examples/benchmarks/distill_benchmark.py \
        --teacher runs/<finetune run>/version_0/hf \
        --student runs/minilm_debian-sections_L3/version_0/hf \
        --data examples/data/debian-packages/test.jsonl [--threads 1] [--out runs/distill_benchmark]

runs ``domainbert export`` (int8 and bf16 variants, reports under ``--out``) and prints macro-F1, CPU latency
per example at batch 1 and batch 32, the MFU at batch 32 (model FLOPs/s against the matmul peak probed on this
machine, in the variant's precision; none for int8), weight size and the ratios the distillation issue targets:

- the student keeps >= 97% of the teacher's macro-F1 at >= 1.8x lower latency at batch 32;
- int8 adds >= 1.3x speed for <= 1 point of macro-F1.

The last line holds the figures as ``key=value`` pairs, for scripts. ``--quick`` builds a tiny random teacher and a
student copied from it and runs the same path in seconds (it only checks that everything works).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

TARGETS = {"student_f1_ratio": 0.97, "student_speedup_b32": 1.8, "int8_speedup_b32": 1.3, "int8_f1_drop_points": 1.0}


#: The precision each variant multiplies in, for its MFU; int8 has no probed peak, so no MFU.
VARIANT_PRECISION = {"teacher": "fp32", "student": "fp32", "bf16": "bf16", "onnx": "fp32"}


def table(rows: list[dict], teacher: dict | None) -> str:
    """The side-by-side table of the variants (ratios against ``teacher`` where there is one)."""
    head = (
        f"{'variant':<9} {'macro-F1':>9} {'F1/teacher':>10} {'ms b1':>9} {'ms b32':>9} "
        f"{'x b32 vs T':>10} {'MFU b32':>9} {'size MB':>9} {'size/T':>7}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        f1 = r.get("f1_macro")
        ratio = f"{f1 / teacher['f1_macro']:.3f}" if teacher and f1 is not None and teacher.get("f1_macro") else "-"
        speed = f"{teacher['latency_ms_b32'] / r['latency_ms_b32']:.2f}" if teacher else "-"
        size = f"{r['size_mb'] / teacher['size_mb']:.2f}" if teacher and teacher.get("size_mb") else "-"
        f1s = f"{f1:.4f}" if f1 is not None else "-"
        mfu = common.fmt(r["mfu_b32"]) if r.get("mfu_b32", float("nan")) == r.get("mfu_b32") else "-"
        lines.append(
            f"{r['variant']:<9} {f1s:>9} {ratio:>10} {r['latency_ms_b1']:>9.2f} {r['latency_ms_b32']:>9.3f} "
            f"{speed:>10} {mfu:>9} {r['size_mb']:>9.2f} {size:>7}"
        )
    return "\n".join(lines)


def figures(rows: list[dict]) -> dict:
    """The key=value figures: F1 ratios, speed-ups, MFU and whether the targets are met."""
    by = {r["variant"]: r for r in rows}
    t, s = by.get("teacher"), by["student"]
    out: dict = {}
    if t is not None:
        if t.get("f1_macro"):
            out["teacher_f1"] = t["f1_macro"]
            out["student_f1"] = s["f1_macro"]
            out["student_f1_ratio"] = round(s["f1_macro"] / t["f1_macro"], 4)
        out["student_speedup_b32"] = round(t["latency_ms_b32"] / s["latency_ms_b32"], 2)
        out["student_speedup_b1"] = round(t["latency_ms_b1"] / s["latency_ms_b1"], 2)
    for name in ("int8", "bf16"):
        if name in by:
            v = by[name]
            out[f"{name}_speedup_b32"] = round(s["latency_ms_b32"] / v["latency_ms_b32"], 2)
            if v.get("f1_macro") is not None and s.get("f1_macro") is not None:
                out[f"{name}_f1_drop_points"] = round(100 * (s["f1_macro"] - v["f1_macro"]), 2)
    for name, r in by.items():
        mfu = r.get("mfu_b32", float("nan"))
        if mfu == mfu:  # not nan: the variant has a probed peak
            out[f"{name}_mfu_b32"] = float(f"{mfu:.4g}")
    if "int8" in by and "bf16" in by:
        out["faster_b32"] = "int8" if by["int8"]["latency_ms_b32"] < by["bf16"]["latency_ms_b32"] else "bf16"
    checks = []
    for key, target in TARGETS.items():
        if key in out:
            checks.append(out[key] <= target if key.endswith("drop_points") else out[key] >= target)
    if checks:
        out["targets_met"] = f"{sum(checks)}/{len(checks)}"
    return out


def b32_flops_per_example(args) -> dict[str, float]:
    """Model FLOPs per example of the teacher and the student in export's batch-32 latency pass.

    The texts, their order and the padding are export's own (``EvalSet.build`` on ``--data``); the models are
    built on the meta device from their configs, which is enough to count their weights.
    """
    import torch
    from transformers import AutoTokenizer

    from domainbert.core.hf import load_config
    from domainbert.data.readers import read
    from domainbert.deploy.bench import EvalSet
    from domainbert.deploy.load import model_class

    tokenizer = AutoTokenizer.from_pretrained(args.student)
    texts = [str(t) for t in read(args.data, columns=["text"], split="test")["text"]][: args.limit or None]
    batches = EvalSet.build(tokenizer, texts, None, None, 32, args.max_length, args.latency_examples, 1).b32
    examples = sum(b["input_ids"].shape[0] for b in batches)
    out = {}
    for name, folder in (("teacher", args.teacher), ("student", args.student)):
        config = load_config(folder)  # a mean-pooling export as its family's config, never its remote code
        with torch.device("meta"):
            model = model_class(config)(config)
        work = sum(
            b["input_ids"].numel() * common.flops_per_token(model, b["input_ids"].shape[1], False) for b in batches
        )
        out[name] = work / examples
    return out


def add_mfu(rows: list[dict], args, peaks: dict[str, dict]) -> None:
    """Set each row's ``mfu_b32``: its model FLOPs/s at batch 32 over the probed peak of its precision."""
    per_example = b32_flops_per_example(args)
    for r in rows:
        work = per_example["teacher" if r["variant"] == "teacher" else "student"]
        peak = peaks.get(VARIANT_PRECISION.get(r["variant"], ""))
        r["mfu_b32"] = common.mfu(work / (r["latency_ms_b32"] / 1000), peak)


def probe(args) -> dict[str, dict]:
    """The matmul peak of this machine for every precision a variant runs at, at the student's shapes."""
    from domainbert.core.hf import load_config

    kinds = ["fp32"] + ([] if args.no_bf16 else ["bf16"])
    return common.probe_peaks(kinds, load_config(args.student), 32 * args.max_length, args.quick)


def run(args, peaks: dict[str, dict]) -> dict:
    """Export the variants, print the table; return the key=value figures."""
    from domainbert.deploy.command import export

    result = export(
        model=args.student,
        out=args.out,
        teacher=args.teacher,
        data=args.data,
        int8=True,
        format_options={"int8_backend": args.int8_backend},
        bf16=not args.no_bf16,
        onnx=args.onnx,
        max_length=args.max_length,
        limit=args.limit,
        latency_examples=args.latency_examples,
        repeats=args.repeats,
        threads=args.threads,
    )
    rows = [r for r in result["variants"] if r["variant"] in ("teacher", "student", "int8", "bf16", "onnx")]
    add_mfu(rows, args, peaks)
    teacher = next((r for r in rows if r["variant"] == "teacher"), None)
    print()
    print(table(rows, teacher))
    if "verdict" in result:
        print(f"\nbf16 or int8: {result['verdict']}")
    return {**figures(rows), **common.peak_figures(peaks), "isa": common.isa_summary()}


QUICK_LABELS = ["database", "network", "video"]
QUICK_WORDS = {"database": "sql tables records", "network": "packets sockets web", "video": "frames codecs streams"}


def quick_data(root: Path) -> Path:
    """24 labelled lines, 8 per label, for ``--quick``."""
    rows = [
        {"text": f"the tool handles {QUICK_WORDS[lab].split()[i % 3]} on unix systems", "label": lab}
        for i in range(8)
        for lab in QUICK_LABELS
    ]
    data = root / "test.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return data


def quick_tokenizer(data: Path):
    """A WordPiece tokenizer trained on the quick data."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
    from tokenizers.processors import TemplateProcessing
    from transformers import PreTrainedTokenizerFast

    texts = [json.loads(line)["text"] for line in data.read_text(encoding="utf-8").splitlines()]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok.train_from_iterator(texts, trainers.WordPieceTrainer(vocab_size=120, special_tokens=special))
    cls_sep = [("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))]
    tok.post_processor = TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=cls_sep)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_input_names=["input_ids", "attention_mask"],
    )


def quick_setup(root: Path, model: str | None = None) -> tuple[str, str, str]:
    """A tiny teacher classifier, a student with half its layers copied from it, and 24 labelled lines.

    The teacher is a random 4-layer BERT, or, with ``model``, that (tiny) checkpoint with a random 3-label head.
    """
    import torch
    from transformers import (
        AutoModelForSequenceClassification,
        AutoTokenizer,
        BertConfig,
        BertForSequenceClassification,
    )

    from domainbert.distill.student import num_layers, student_from_teacher

    data = quick_data(root)
    labels = {"num_labels": 3, "id2label": dict(enumerate(QUICK_LABELS))}
    labels["label2id"] = {n: i for i, n in enumerate(QUICK_LABELS)}
    torch.manual_seed(0)
    if model is not None:
        tokenizer = AutoTokenizer.from_pretrained(model)
        teacher = AutoModelForSequenceClassification.from_pretrained(model, **labels).eval()
    else:
        tokenizer = quick_tokenizer(data)
        config = BertConfig(
            vocab_size=len(tokenizer),
            hidden_size=32,
            num_hidden_layers=4,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=64,
            initializer_range=0.2,
            **labels,
        )
        teacher = BertForSequenceClassification(config).eval()
    student, _ = student_from_teacher(teacher, max(1, num_layers(teacher.config) // 2))
    for name, m in (("teacher", teacher), ("student", student)):
        m.save_pretrained(root / name)
        tokenizer.save_pretrained(root / name)
    return str(root / "teacher"), str(root / "student"), str(data)


def main(argv: list[str] | None = None) -> dict:
    """Run the benchmark; print the table and the key=value line; return the figures."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--teacher", help="the fine-tuned teacher's HF folder")
    p.add_argument("--student", help="the distilled student's HF folder")
    p.add_argument("--data", default="examples/data/debian-packages/test.jsonl", help="labelled test file")
    p.add_argument("--out", default="runs/distill_benchmark", help="where export writes the variants and reports")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: PyTorch's)")
    p.add_argument("--max_length", type=int, default=128)
    p.add_argument("--limit", type=int, default=None, help="at most this many test examples")
    p.add_argument("--latency_examples", type=int, default=32, help="examples timed one by one (batch 1)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--int8_backend", default="auto", choices=["auto", "torchao", "torch"])
    p.add_argument("--no_bf16", action="store_true", help="skip the bf16 variant")
    p.add_argument("--onnx", action="store_true", help="also export and time ONNX")
    p.add_argument("--quick", action="store_true", help="tiny random models: a seconds-long check that it all runs")
    p.add_argument("--model", default=None, help="--quick: a tiny checkpoint to build the teacher from")
    args = p.parse_args(argv)
    import torch

    if args.quick:
        args.threads = args.threads or 1
    if args.threads:
        torch.set_num_threads(args.threads)
    common.print_machine(torch.get_num_threads())
    if args.quick:
        tmp = tempfile.TemporaryDirectory(prefix="distill_benchmark_")
        root = Path(tmp.name)
        args.teacher, args.student, args.data = quick_setup(root, args.model)
        args.out = str(root / "out")
        args.latency_examples, args.repeats, args.int8_backend = 8, 1, "torch"
    elif not (args.teacher and args.student):
        p.error("give --teacher and --student (or --quick)")
    fig = run(args, probe(args))
    if args.quick:
        assert {"student_speedup_b32", "int8_speedup_b32", "bf16_speedup_b32"} <= set(fig), fig
        assert (Path(args.out) / "report.json").exists()
    print(" ".join(f"{k}={v}" for k, v in fig.items()))
    return fig


if __name__ == "__main__":
    main()
