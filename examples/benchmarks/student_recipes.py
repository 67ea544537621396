"""The student worth shipping: distillation recipes side by side, over seeds, against their teacher.

Each arm is one distillation (the pipeline's own stage, ``domainbert/pipeline/stages/distill.yaml``, run by the
pipeline's stage worker) of a fine-tuned teacher into a student, with one of these recipes:

- ``task``: the task's labelled rows only (the recipe before transfer sets), ``--task-epochs`` epochs (the stage's 4);
- ``corpus``: the task's rows plus ``--documents`` corpus documents as transfer set (``data.transfer``), ``--epochs``
  epochs (the pipeline's ``distill.transfer.epochs``, 2);
- ``ensemble``: as ``corpus``, taught by the teachers of ``--ensemble`` together (their probabilities averaged);
- ``large3`` / ``large6``: as ``corpus``, taught by the larger fine-tuned teacher of ``--large`` (its own tokenizer:
  logits only) into ``--teacher`` cut to 3 layers, or kept at its 6 (the base model's size).

Every arm runs once per seed of ``--seeds`` (the distillation's seed; the teacher stays fixed), into
``<out>/<arm>-seed<N>/``; a finished run is read back, not run again. The teacher (and the larger one) is evaluated
once as it is (``--evaluate``). The table gives validation and test macro-F1 as mean ± std over the seeds, the test
difference from the teacher and from the ``task`` arm with 95% paired bootstrap intervals over test rows and seeds
(``domainbert.core.stats.paired_bootstrap``), and the median minutes of a run.

    python examples/benchmarks/student_recipes.py --domain debian \\
        --teacher runs/pipeline/minilm_debian/finetune-baseline-seed0/run/version_0/hf --arms task,corpus
    python examples/benchmarks/student_recipes.py --quick        # the tiny model on the fixtures, in seconds

The last line holds the figures as ``key=value``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import common  # noqa: E402
import seed_rows  # noqa: E402

from domainbert.core.stats import mean_std  # noqa: E402

ROOT = HERE.parents[1]
STAGES = ROOT / "domainbert" / "pipeline" / "stages"
DOMAINS = {"debian": ROOT / "examples/data/debian-packages", "python-docs": ROOT / "examples/data/python-docs"}
ARMS = ("task", "corpus", "ensemble", "large3", "large6")
COLUMNS = ["arm", "seeds", "val f1_macro", "test f1_macro", "Δ test vs teacher [95% CI]", "Δ test vs task", "minutes"]


def quick_teacher(folder: Path) -> str:
    """A tiny random classifier with the fixture task's labels (``--quick``)."""
    sys.path.insert(0, str(ROOT))
    from tests.helpers.tiny import make_tiny, tiny_classifier  # noqa: PLC0415

    if (folder / "config.json").is_file():
        return str(folder)
    return tiny_classifier(make_tiny("bert", folder.parent / "tiny"), folder, 0, ["api", "graphics", "network"])


def data_args(folder: Path, quick: bool) -> list[str]:
    """The task's files (the fixtures under ``--quick``)."""
    if quick:
        fix = ROOT / "tests" / "fixtures"
        files = {"train": fix / "cls_train.jsonl", "val": fix / "cls_val.jsonl", "test": fix / "cls_test.jsonl"}
    else:
        files = {"train": folder / "train.jsonl", "val": folder / "validation.jsonl", "test": folder / "test.jsonl"}
    return [arg for split, path in files.items() for arg in (f"--data.{split}", str(path))]


def arm_args(arm: str, args: argparse.Namespace, corpus: Path) -> list[str]:
    """The distillation options of ``arm`` (beyond the task's files and the seed)."""
    documents = None if args.documents == 0 else args.documents
    transfer = ["--data.transfer", json.dumps({"path": str(corpus), "documents": documents})]
    if arm == "task":
        return ["--model.teacher", args.teacher]
    if arm == "corpus":
        return ["--model.teacher", args.teacher, *transfer]
    if arm == "ensemble":
        if not args.ensemble:
            raise SystemExit("arm ensemble needs --ensemble DIR,DIR,...")
        return ["--model.teacher", "[" + args.ensemble + "]", *transfer]
    if not args.large:
        raise SystemExit(f"arm {arm} needs --large DIR (a fine-tuned larger teacher)")
    layers = ["--model.student_layers", "null"] if arm == "large6" else []
    return [
        "--model.teacher",
        args.large,
        "--model.student",
        args.teacher,
        *layers,
        "--model.losses",
        "null",
        *transfer,
    ]


def run_worker(folder: Path, mode: str, config: Path, options: list[str], log: Path) -> dict:
    """One stage-worker run into ``folder`` (read back when its ``result.json`` exists); its record and minutes."""
    result = folder / "result.json"
    if not result.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "domainbert.pipeline", "--worker", str(result), mode, "--config", str(config)]
        cmd += [*options, "--trainer.default_root_dir", str(folder), "--run_name", "run"]
        start = time.perf_counter()
        with log.open("w") as out:
            done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, check=False)
        if done.returncode:
            raise SystemExit(f"{folder.name} failed (exit {done.returncode}); its log: {log}")
        (folder / "minutes.json").write_text(json.dumps((time.perf_counter() - start) / 60))
    record = json.loads(result.read_text())
    minutes = folder / "minutes.json"
    record["minutes"] = json.loads(minutes.read_text()) if minutes.is_file() else None
    return record


def evaluate(folder: Path, model: str, data: list[str]) -> dict:
    """A fine-tuned model validated and tested as it is (its predictions for the paired intervals)."""
    options = ["--model.init_from", model, *data]
    return run_worker(folder, "--evaluate", STAGES / "finetune.yaml", options, folder.with_suffix(".log"))


def row(name: str, runs: list[dict], teacher: dict, task: list[dict] | None) -> dict:
    """One table row: the arm's scores over its seeds and its paired intervals."""
    val = mean_std([r["metrics"]["val/f1_macro"] for r in runs])
    test = mean_std([r["metrics"]["test/f1_macro"] for r in runs])
    vs_teacher = seed_rows.compare([teacher], runs)
    vs_task = seed_rows.compare(task, runs) if task and name != "task" else None
    minutes = sorted(r["minutes"] for r in runs if r.get("minutes") is not None)
    return {
        "arm": name,
        "seeds": len(runs),
        "val f1_macro": f"{val[0]:.4f} ± {val[1]:.4f}",
        "test f1_macro": f"{test[0]:.4f} ± {test[1]:.4f}",
        "Δ test vs teacher [95% CI]": seed_rows.interval_cell(vs_teacher),
        "Δ test vs task": seed_rows.interval_cell(vs_task) if vs_task else "–",
        "minutes": f"{minutes[len(minutes) // 2]:.1f}" if minutes else "–",
        "_test": test[0],
        "_gap": vs_teacher.diff,
    }


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--domain", choices=sorted(DOMAINS), default="debian")
    parser.add_argument("--teacher", help="the fine-tuned teacher (the pipeline's chosen run's hf/ folder)")
    parser.add_argument("--ensemble", default="", help="comma-separated fine-tuned teachers for the ensemble arm")
    parser.add_argument("--large", default="", help="a fine-tuned larger teacher for the large3/large6 arms")
    parser.add_argument("--arms", default="task,corpus", help=f"comma-separated, of {', '.join(ARMS)}")
    parser.add_argument("--seeds", default="0,1,2", help="distillation seeds")
    parser.add_argument("--documents", type=int, default=8000, help="corpus documents in the transfer set (0: all)")
    parser.add_argument("--epochs", type=int, default=2, help="distillation epochs with a transfer set")
    parser.add_argument("--task-epochs", type=int, default=4, help="distillation epochs of the task arm")
    parser.add_argument("--out", default="runs/student_recipes", help="where the runs go (resumable)")
    parser.add_argument("--quick", action="store_true", help="the tiny model on the fixtures, 4 steps a run")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.arms.split(",")) - set(ARMS))
    if unknown:
        parser.error(f"--arms: unknown {unknown}; expected some of {', '.join(ARMS)}")
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse(argv)
    common.print_machine(common.set_threads())
    out = Path(args.out) / args.domain
    folder = DOMAINS[args.domain]
    corpus = ROOT / "tests/fixtures/corpus.txt" if args.quick else folder / "corpus.txt.gz"
    if args.quick:
        args.teacher = args.teacher or quick_teacher(out / "teacher")
        args.documents = min(args.documents, 20)
    if not args.teacher:
        raise SystemExit("--teacher is required (a fine-tuned classifier's folder)")
    data = data_args(folder, args.quick)
    quick = ["--trainer.max_steps=4", "--model.student_layers=1"]
    teacher = {**evaluate(out / "teacher-eval", args.teacher, data), "seed": 0}
    rows = [row("teacher", [teacher], teacher, None)]
    runs: dict[str, list[dict]] = {}
    for arm in args.arms.split(","):
        runs[arm] = []
        for seed in seed_rows.parse_seeds(args.seeds):
            epochs = args.task_epochs if arm == "task" else args.epochs
            stop = quick if args.quick else [f"--trainer.max_epochs={epochs}"]
            options = [*arm_args(arm, args, corpus), *data, *stop, "--seed_everything", str(seed)]
            where = out / f"{arm}-seed{seed}"
            record = run_worker(where, "--test", STAGES / "distill.yaml", options, where.with_suffix(".log"))
            runs[arm].append({**record, "seed": seed})
    rows += [row(arm, arm_runs, teacher, runs.get("task")) for arm, arm_runs in runs.items()]
    print(common.table(rows, COLUMNS))
    figures = {f"{r['arm']}_test": round(r["_test"], 4) for r in rows}
    figures.update({f"{r['arm']}_gap": round(r["_gap"], 4) for r in rows[1:]})
    print(common.kv_line(figures))
    return figures


if __name__ == "__main__":
    main()
