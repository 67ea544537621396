"""Time to the shipped model: ``domainbert pipeline`` on the bundled data, in minutes per stage and part.

Two configs, each run by ``domainbert pipeline`` in a process of its own, into a new folder of ``--out``, with a
fresh ``datasets`` cache and domainbert cache (as on a fresh clone):

- ``demo``: ``configs/pipeline/minilm_debian.yaml`` (``make demo``: probe, one fine-tuning epoch, one distillation
  epoch, int8 export, on the Debian data);
- ``paths-only``: ``examples/benchmarks/pipeline_paths_only.yaml``, the README's new-domain config (only the paths,
  with three seeds) on the second bundled domain, ``examples/data/python-docs``: every stage from its built-in
  config, DAPT on.

For each: the wall-clock minutes of the pipeline's process, then a table of its stages (``state.json``), each
split into start-up, data preparation, training, evaluation, export and the rest (the parts the stage's run
recorded: ``domainbert.pipeline.timing``; a domainbert that records none shows the stage's minutes alone). The last
line is ``key=value``: ``<config>_minutes`` (wall clock), ``<config>_stage_minutes`` (the stages' sum) and
``<config>_<part>_minutes`` per part.

    python examples/benchmarks/pipeline_time.py                     # both (minutes: docs/benchmarks/time-to-model.md)
    python examples/benchmarks/pipeline_time.py --only demo -- --seeds '[0, 1]'  # after --: pipeline options
    python examples/benchmarks/pipeline_time.py --repo ../reference  # another checkout's domainbert and configs
    python examples/benchmarks/pipeline_time.py --quick             # tiny model, fixture data (the tests' run)
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import common  # noqa: E402

from domainbert.pipeline.runner import read_state  # noqa: E402
from domainbert.pipeline.timing import HEADINGS, PARTS, stage_order  # noqa: E402

#: The configs, by name: (key prefix, config path relative to the repository, or absolute).
CONFIGS = {
    "demo": ("demo", "configs/pipeline/minilm_debian.yaml"),
    "paths-only": ("paths_only", str(HERE / "pipeline_paths_only.yaml")),
}

FIXTURES = common.ROOT / "tests" / "fixtures"


def quick_args(model: str) -> list[str]:
    """What ``--quick`` adds to every run: the tiny model, the fixture task, one seed, short stages, one process, and
    PyTorch's int8 as the only quantized export (no ONNX)."""
    return [
        *("--base_model", model, "--corpus", str(FIXTURES / "corpus.txt")),
        *("--task_train", str(FIXTURES / "cls_train.jsonl"), "--task_val", str(FIXTURES / "cls_val.jsonl")),
        *("--task_test", str(FIXTURES / "cls_test.jsonl"), "--seeds", "[0]", "--isolate", "none"),
        *("--finetune.config", str(common.ROOT / "configs/finetune/tiny_classification.yaml")),
        *("--finetune.args", '["--trainer.max_epochs=1"]'),
        *("--dapt.args", '["--trainer.max_steps=2", "--trainer.val_check_interval=2"]'),
        *("--distill.config", str(common.ROOT / "configs/distill/tiny_debug.yaml")),
        "--distill.args",
        '["--trainer.max_steps=2", "--model.init_args.teacher_cache=null", "--model.init_args.student_layers=1"]',
        "--export.args",  # int8 alone: the ONNX exports take longer than the rest of a tiny pipeline
        '["--formats", "[int8]", "--bf16", "false", "--latency_examples", "4", "--repeats", "1"]',
    ]


def run_config(args, name: str, out: Path) -> dict:
    """Run config ``name`` into ``out/<name>``; ``{"minutes": wall clock, "state": state.json, "folder": ...}``."""
    folder = out / name
    if folder.exists() and any(folder.iterdir()):
        raise SystemExit(f"pipeline_time: {folder} is not empty; give a new --out (a rerun would skip done stages)")
    config = CONFIGS[name][1]
    cmd = [sys.executable, "-m", "domainbert", "pipeline", "--config", config, "--out", str(folder), *args.extra]
    print(f"# {name}: {shlex.join(['python', *cmd[1:]])} (in {args.repo})", flush=True)
    env = common.child_env(args, out / "caches" / name)
    minutes = common.run_logged(cmd, out / f"{name}.log", env, cwd=args.repo, what=f"pipeline_time: {name}")
    state = read_state(folder / "state.json")
    return {"minutes": minutes, "state": state, "folder": folder}


def stage_rows(state: dict) -> list[dict]:
    """One row per stage (by when it finished), in minutes, then the totals; parts as ``""`` where not recorded."""
    rows, totals = [], dict.fromkeys(["minutes", *PARTS], 0.0)
    for stage in stage_order(state):
        entry, row = state[stage], {"stage": stage}
        parts = entry.get("parts") or {}
        row["minutes"] = float(entry.get("seconds") or 0.0) / 60
        for part in PARTS:
            row[HEADINGS[part]] = float(parts.get(part) or 0.0) / 60 if parts else ""
        for key in totals:
            totals[key] += row["minutes"] if key == "minutes" else float(parts.get(key) or 0.0) / 60
        rows.append(row)
    rows.append({"stage": "total", "minutes": totals["minutes"], **{HEADINGS[p]: totals[p] for p in PARTS}})
    return rows


def report(name: str, run: dict) -> dict:
    """Print the run's minutes and its table of stages and parts; its figures for the key=value line."""
    rows = stage_rows(run["state"])
    total = rows[-1]
    print(
        f"# {name}: {run['minutes']:.2f} min wall clock, {total['minutes']:.2f} min in {len(rows) - 1} stages; "
        f"report {run['folder'] / 'report.md'}"
    )
    shown = [{k: round(v, 2) if isinstance(v, float) else v for k, v in row.items()} for row in rows]
    print(common.table(shown, ["stage", "minutes", *(HEADINGS[p] for p in PARTS)]))
    prefix = CONFIGS[name][0]
    figures = {f"{prefix}_minutes": run["minutes"], f"{prefix}_stage_minutes": total["minutes"]}
    figures |= {f"{prefix}_{part}_minutes": total[HEADINGS[part]] for part in PARTS}
    return figures


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The options; what follows ``--`` goes to every ``domainbert pipeline`` run."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", choices=sorted(CONFIGS), default=None, help="run this config alone (default: both)")
    p.add_argument("--out", default=None, help="a new folder (default runs/pipeline_time/<time>; --quick: temporary)")
    p.add_argument("--repo", default=str(common.ROOT), help="the checkout whose domainbert and configs run")
    p.add_argument("--model", default=None, help="--base_model of every run (default: the config's; --quick: tiny)")
    p.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS of the pipeline (default: unset)")
    p.add_argument("--quick", action="store_true", help="tiny model, fixture data, short stages (what the tests run)")
    p.add_argument("extra", nargs="*", default=[], help="options for every pipeline run, after --")
    args = p.parse_args(argv)
    args.repo = Path(args.repo).resolve()
    return args


def out_folder(args, tmp: str) -> Path:
    """The runs' folder, made: ``--out``, else ``tmp`` (``--quick``) or ``runs/pipeline_time/<date-time>``."""
    default = tmp if args.quick else common.ROOT / "runs" / "pipeline_time" / time.strftime("%Y%m%d-%H%M%S")
    out = Path(args.out or default).resolve()
    out.mkdir(parents=True, exist_ok=True)
    return out


def main(argv: list[str] | None = None) -> dict:
    """Run the configs; print their tables and the key=value line; return the figures."""
    args = parse(argv)
    common.start_driver(args)
    if args.quick:
        args.extra = [*quick_args(args.model), *args.extra]
    elif args.model:
        args.extra = ["--base_model", args.model, *args.extra]
    names = [args.only] if args.only else list(CONFIGS)
    with tempfile.TemporaryDirectory(prefix="domainbert-bench-pipeline-") as tmp:
        out = out_folder(args, tmp)
        figures: dict = {}
        for name in names:
            figures |= report(name, run_config(args, name, out))
    figures["isa"] = common.isa_summary()
    print(common.kv_line(figures))
    return figures


if __name__ == "__main__":
    main()
