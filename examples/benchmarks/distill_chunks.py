"""Distillation steps on random batches, whole or in length-sorted chunks (``chunk_rows``), side by side.

Each side is a ``DistillationModule`` (3-layer student copied from the teacher, the Debian demo's loss: KL,
cross-entropy and hidden states) taking the same random batches of the training file, one training step each
(teacher forward, student forward and backward, fused AdamW), at the precision a CPU fit would use. The sides
take turns, round after round; each side's figure is its median seconds per step. After each side's steps in a round,
the teacher's forward pass alone is timed on the same batches and chunks (``teacher s/step``): what is left of a step
is the student's forward and backward passes, the losses and the optimizer.

    python examples/benchmarks/distill_chunks.py --teacher runs/<finetune run>/version_0/hf
    python examples/benchmarks/distill_chunks.py --teacher <hf> --sides whole,16,8,4 --steps 12 --rounds 3
    python examples/benchmarks/distill_chunks.py --quick            # tiny teacher, fixture rows (the tests' run)

The last line is ``key=value``: ``s_per_step_<side>``, ``teacher_s_per_step_<side>``, ``speedup_<side>`` (the
whole batch's seconds over the side's; against the first side when ``whole`` is not among them), ``real_share``
(real tokens over padded ones in the whole batches), ``tokens_per_step`` (real tokens in a timed batch, on average),
``precision`` and ``isa``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

#: the Debian demo's loss terms: KL and cross-entropy (0.5 each, T = 2) and hidden states (0.1)
TERMS = [
    {"class_path": "domainbert.distill.losses.KLDivergenceLoss", "init_args": {"weight": 0.5, "temperature": 2.0}},
    {"class_path": "domainbert.distill.losses.HardLabelLoss", "init_args": {"weight": 0.5}},
    {"class_path": "domainbert.distill.losses.HiddenStateLoss", "init_args": {"weight": 0.1}},
]
DEBIAN_TRAIN = common.ROOT / "examples" / "data" / "debian-packages" / "train.jsonl"


def quick_teacher(model: str | None) -> tuple[str, Path]:
    """A tiny classifier teacher (from ``model`` if given) and a file of labelled fixture rows, for ``--quick``."""
    sys.path.insert(0, str(common.ROOT))
    from tests.helpers.distill_tiny import LABELS, make_teacher, write_jsonl  # noqa: PLC0415
    from tests.helpers.tiny import tiny_classifier  # noqa: PLC0415

    folder = Path(tempfile.mkdtemp(prefix="domainbert-bench-chunks-"))
    if model is None:
        teacher = make_teacher("bert", folder / "teacher", layers=2)
    else:
        teacher = tiny_classifier(Path(model), folder / "teacher", 0, LABELS)
    return str(teacher), write_jsonl(folder / "train.jsonl", "train")


def random_batches(module, path: Path, batch: int, count: int, max_length: int, seed: int) -> list[dict]:
    """``count`` batches of ``batch`` rows drawn at random from ``path`` (labels by the teacher's names)."""
    import torch  # noqa: PLC0415

    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    random.Random(seed).shuffle(rows)
    ids = {name: i for i, name in enumerate(module.label_names)}
    out = []
    for start in range(0, batch * count, batch):
        part = [rows[i % len(rows)] for i in range(start, start + batch)]
        enc = module.tokenizer(
            [r["text"] for r in part], padding=True, truncation=True, max_length=max_length, return_tensors="pt"
        )
        out.append({**enc, "labels": torch.tensor([ids[r["label"]] for r in part])})
    return out


def build_side(teacher: str, rows: int | None, students: int):
    """A module that distils ``teacher`` into ``students`` copied layers with ``chunk_rows=rows``, and its optimizer."""
    import torch  # noqa: PLC0415

    from domainbert.core.cpu_dropout import use_cpu_dropout  # noqa: PLC0415
    from domainbert.distill.module import DistillationModule  # noqa: PLC0415

    torch.manual_seed(0)
    module = DistillationModule(teacher=teacher, student_layers=students, losses=TERMS, chunk_rows=rows)
    use_cpu_dropout(module)
    module.train()
    opt = torch.optim.AdamW(module.model.parameters(), lr=1e-5, fused=True)
    return module, opt


def step(module, opt, batch: dict, bf16: bool) -> None:
    """One training step of ``module`` on ``batch``."""
    import torch  # noqa: PLC0415

    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    with autocast:
        loss = module.training_step(batch, 0)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def teacher_pass(module, batch: dict, bf16: bool) -> None:
    """The teacher's forward pass alone on ``batch``, in the chunks a step of ``module`` runs it in."""
    import torch  # noqa: PLC0415

    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    with autocast:
        input_ids, selected, view = module.prepare(batch, 0)
        module.teacher_outputs(batch, input_ids, selected, module.chunks(view["attention_mask"]))


def parse_side(name: str) -> int | None:
    """``whole`` -> None (the whole batch), else a number of rows per chunk."""
    return None if name == "whole" else int(name)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--teacher", help="a fine-tuned classifier's HF folder (the demo's fine-tuning hf/ export)")
    p.add_argument("--data", default=str(DEBIAN_TRAIN), help="labelled JSON-lines training file (text, label)")
    p.add_argument("--sides", default="whole,16,8,4", help="comma-separated: whole, or rows per chunk")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--student-layers", type=int, default=3)
    p.add_argument("--steps", type=int, default=10, help="timed steps per side and round (one more to warm up)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--precision", choices=["auto", "bf16", "fp32"], default="auto")
    p.add_argument("--quick", action="store_true", help="tiny teacher and fixture rows: checks that it runs")
    p.add_argument("--model", default=None, help="--quick: a tiny checkpoint to build the teacher from")
    args = p.parse_args(argv)
    _, kind = common.start(args)
    teacher, data = (args.teacher, Path(args.data))
    if args.quick:
        teacher, data = quick_teacher(args.model)
        args.steps, args.rounds, args.student_layers, args.batch = 2, 1, 1, 12
    elif not teacher:
        p.error("--teacher is required (or --quick)")
    names = args.sides.split(",")
    sides = {name: build_side(teacher, parse_side(name), args.student_layers) for name in names}
    batches = random_batches(next(iter(sides.values()))[0], data, args.batch, args.steps + 1, args.max_length, 0)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    teacher: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(args.rounds):
        for name, (module, opt) in sides.items():
            step(module, opt, batches[0], kind == "bf16")
            start = time.perf_counter()
            for batch in batches[1:]:
                step(module, opt, batch, kind == "bf16")
            seconds[name].append((time.perf_counter() - start) / args.steps)
            start = time.perf_counter()
            for batch in batches[1:]:
                teacher_pass(module, batch, kind == "bf16")
            teacher[name].append((time.perf_counter() - start) / args.steps)
    real = sum(int(b["attention_mask"].sum()) for b in batches) / sum(b["attention_mask"].numel() for b in batches)
    tokens = sum(int(b["attention_mask"].sum()) for b in batches[1:]) / args.steps
    base = common.median(seconds["whole" if "whole" in seconds else names[0]])
    rows = [
        {"side": n, "s/step": round(common.median(s), 4), "teacher s/step": round(common.median(teacher[n]), 4)}
        | {"speedup": round(base / common.median(s), 3), "rounds": " ".join(f"{x:.3f}" for x in s)}
        for n, s in seconds.items()
    ]
    print(common.table(rows, ["side", "s/step", "teacher s/step", "speedup", "rounds"]))
    figures = {f"s_per_step_{r['side']}": r["s/step"] for r in rows}
    figures |= {f"teacher_s_per_step_{r['side']}": r["teacher s/step"] for r in rows}
    figures |= {f"speedup_{r['side']}": r["speedup"] for r in rows}
    figures |= {"real_share": round(real, 3), "tokens_per_step": round(tokens, 1), "precision": kind}
    figures |= {"isa": common.isa_summary()}
    print(common.kv_line(figures))
    return figures


if __name__ == "__main__":
    main()
