"""Start-up time of the command line, side by side: import torch, the help texts, and ``fit`` to its first step.

Each measurement is a fresh subprocess, timed from just before it starts:

- ``python -c pass`` and ``python -c "import torch"``: the interpreter, then the floor every command pays;
- ``import lightning + transformers``: torch, ``lightning.pytorch`` and transformers' model and tokenizer classes
  (ended by ``os._exit``, as ``fit`` is at its mark): the libraries every training command imports, which
  domainbert does not control;
- ``domainbert --help``, ``domainbert fit --help``, ``domainbert pipeline --help``: until the process exits;
- ``domainbert fit`` to its first training step: ``--config`` (all-MiniLM-L6-v2 on the Debian corpus; ``--quick``: a
  tiny model on the test corpus) with ``--trainer.max_steps 1`` and the callback ``startup_mark.FirstStepMark``
  (this folder, on ``PYTHONPATH``), which prints ``time.time()`` when the first training batch starts and ends the
  process. Everything before it counts: imports, the config, the model, the data set-up on a warm ``datasets``
  cache, the sanity validation. "beyond import torch" subtracts the median ``import torch`` time;
  ``first_step_beyond_libraries_s`` subtracts the libraries' import instead: what domainbert itself spends (its own
  imports, the config, the model, the data, the sanity validation).

One untimed ``fit`` runs first (it fills a fresh ``datasets`` cache shared by the runs; not under ``--quick``), with
``--warmup`` untimed rounds of every command; then ``--repeats`` timed rounds, interleaved, and the medians.

    python examples/benchmarks/startup.py              # all-MiniLM-L6-v2, 3 repeats
    python examples/benchmarks/startup.py --quick      # tiny model, 1 repeat, no warm-up fit (what the tests run)
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import common  # noqa: E402
from startup_mark import MARK  # noqa: E402

#: The config ``fit`` starts from, by default and under ``--quick`` (relative to the repository root).
FIT_CONFIG = {False: "configs/pretrain/minilm_debian.yaml", True: "configs/pretrain/tiny_debug.yaml"}

#: The name of the ``fit`` measurement (to its first training step).
FIT = "domainbert fit (first step)"

#: The import of the libraries every training command needs (ended at once, as ``fit`` is at its mark).
LIBRARIES = "import lightning + transformers"

#: What ``LIBRARIES`` runs: transformers imports lazily, so its model and tokenizer base classes are named (as
#: ``domainbert.core.hf`` names them); ``os._exit`` skips the interpreter's teardown, which ``fit`` skips too.
LIBRARY_IMPORTS = (
    "import os, torch, lightning.pytorch; "
    "from transformers import AutoConfig, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase; os._exit(0)"
)

#: The measurements that import torch, shown also less the ``import torch`` time.
BEYOND_TORCH = (LIBRARIES, "domainbert fit --help", FIT)


def domainbert_command() -> list[str]:
    """The ``domainbert`` console script of this interpreter's environment, else ``python -m domainbert``."""
    script = shutil.which("domainbert", path=str(Path(sys.executable).parent))
    return [script] if script else [sys.executable, "-m", "domainbert"]


def commands(args, runs: Path) -> dict[str, list[str]]:
    """Name -> argv of every measurement; ``fit`` (to the first step) last."""
    db = domainbert_command()
    fit = [*db, "fit", "--config", args.config, "--trainer.max_steps", "1", "--trainer.default_root_dir", str(runs)]
    if args.model:
        fit += ["--model.init_from", args.model]
    fit += ["--trainer.callbacks+=startup_mark.FirstStepMark"]
    return {
        "python -c pass": [sys.executable, "-c", "pass"],
        "import torch": [sys.executable, "-c", "import torch"],
        LIBRARIES: [sys.executable, "-c", LIBRARY_IMPORTS],
        "domainbert --help": [*db, "--help"],
        "domainbert fit --help": [*db, "fit", "--help"],
        "domainbert pipeline --help": [*db, "pipeline", "--help"],
        FIT: fit,
    }


def run_once(cmd: list[str], env: dict, first_step: bool) -> float:
    """Seconds from just before ``cmd`` starts to its exit, or (``first_step``) to the mark it prints."""
    start = time.time()
    proc = subprocess.run(cmd, cwd=common.ROOT, env=env, capture_output=True, text=True)
    end = time.time()
    marks = [line for line in proc.stdout.splitlines() if line.startswith(MARK)]
    if proc.returncode != 0 or (first_step and not marks):
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-6000:])
        raise SystemExit(f"startup: {' '.join(cmd)} failed (exit {proc.returncode}, first-step mark: {bool(marks)})")
    return float(marks[-1][len(MARK) :]) - start if first_step else end - start


def child_env(args, tmp: str) -> dict:
    """The environment of every subprocess: this folder on ``PYTHONPATH``, one fresh ``datasets`` cache."""
    env = {**os.environ, "HF_DATASETS_CACHE": str(Path(tmp) / "datasets")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH")) if p)
    if args.threads:
        env["OMP_NUM_THREADS"] = str(args.threads)
    return env


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The options; ``--quick`` means a tiny model, one repeat, no warm-up round and no untimed first fit."""
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--model", default=None, help="fit's --model.init_from (default: the config's; --quick: tiny)")
    p.add_argument("--config", default=None, help=f"fit's config (default {FIT_CONFIG[False]}; --quick: tiny_debug)")
    p.add_argument("--quick", action="store_true", help="tiny model, one repeat, no warm-up (what the tests run)")
    p.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS of the subprocesses (default: unset)")
    p.add_argument("--repeats", type=int, default=3, help="timed rounds of every command; the medians are reported")
    p.add_argument("--warmup", type=int, default=1, help="untimed rounds of every command first (+1 fit; --quick: 0)")
    args = p.parse_args(argv)
    if args.quick:
        args.repeats, args.warmup = 1, 0
    # the subprocesses run in the repository root (the shipped configs name their data from there)
    args.config = str(Path(args.config).resolve()) if args.config else FIT_CONFIG[args.quick]
    return args


def main(argv: list[str] | None = None) -> dict:
    """Time every command; print the table and the key=value line; return the figures."""
    args = parse(argv)
    common.start_driver(args)
    with tempfile.TemporaryDirectory(prefix="domainbert-bench-startup-") as tmp:
        env = child_env(args, tmp)
        cmds = commands(args, Path(tmp) / "runs")
        print(f"# fit: {' '.join(cmds[FIT])}")
        warm_fit = "" if args.quick else " + 1 untimed fit (warms the datasets cache)"
        print(f"# {args.warmup} untimed round(s){warm_fit}, {args.repeats} timed")
        if not args.quick:  # --quick checks that every command runs: its one fit may find a cold cache
            run_once(cmds[FIT], env, first_step=True)
        times: dict[str, list[float]] = {name: [] for name in cmds}
        for round_ in range(args.warmup + args.repeats):
            seconds = {name: run_once(cmd, env, first_step=name == FIT) for name, cmd in cmds.items()}
            timed = round_ >= args.warmup
            for name, value in seconds.items():
                times[name] += [value] if timed else []
            what = "timed" if timed else "untimed"
            print(f"# round {round_ + 1} ({what}): " + ", ".join(f"{n} {v:.2f} s" for n, v in seconds.items()))
    med = {name: common.median(t) for name, t in times.items()}
    torch_s = med["import torch"]
    rows = [
        {
            "command": name,
            "median s": med[name],
            "min s": min(times[name]),
            "max s": max(times[name]),
            "beyond import torch s": med[name] - torch_s if name in BEYOND_TORCH else "",
        }
        for name in cmds
    ]
    print(common.table(rows, list(rows[0])))
    figures = {
        "python_s": med["python -c pass"],
        "import_torch_s": torch_s,
        "help_s": med["domainbert --help"],
        "fit_help_s": med["domainbert fit --help"],
        "pipeline_help_s": med["domainbert pipeline --help"],
        "first_step_s": med[FIT],
        "first_step_beyond_torch_s": med[FIT] - torch_s,
        "libraries_beyond_torch_s": med[LIBRARIES] - torch_s,
        "first_step_beyond_libraries_s": med[FIT] - med[LIBRARIES],
        "repeats": args.repeats,
        "isa": common.isa_summary(),
    }
    print(common.kv_line(figures))
    return figures


if __name__ == "__main__":
    main()
