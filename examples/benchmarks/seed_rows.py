"""Strategy rows from ``domainbert pipeline`` folders: fine-tuned macro-F1 over seeds, and a paired test interval.

Each folder is one pipeline's ``--out`` whose fine-tuning stages ``finetune-baseline-seed<N>`` are done: their records
in the folder's ``state.json`` hold the validation and test metrics, and ``<stage>/test_predictions.json`` the gold and
predicted label ids of the test rows. For every model the row gives the validation and test macro-F1 as mean ± std
over the seeds; for every model but the base one, the difference of each mean from the base model's, the test one
with its 95% interval from ``domainbert.core.stats.paired_bootstrap``: the test rows and the seeds of both sides
resampled, the two sides compared on the same rows (which needs the same gold labels in the same order).

    python examples/benchmarks/seed_rows.py --base runs/probe_vs_finetune/pipeline/base \\
        mlm150=runs/probe_vs_finetune/pipeline/mlm-step150 lora250=runs/probe_vs_finetune/pipeline/lora-step250
    python examples/benchmarks/seed_rows.py --base BASE NAME=FOLDER --seeds 0,1,2   # those seeds only

The seeds default to every fine-tuning stage done in the base folder; a model folder without one of them is an error.
The last line holds the figures as ``key=value``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import common  # noqa: E402

from domainbert.core.stats import Interval, mean_std, paired_bootstrap  # noqa: E402
from domainbert.errors import DomainBertError  # noqa: E402
from domainbert.pipeline.report import read_predictions  # noqa: E402
from domainbert.pipeline.runner import read_state  # noqa: E402

STAGE = "finetune-baseline-seed"
METRIC = "f1_macro"
PREDICTIONS = "test_predictions.json"
RESAMPLES = 1000
COLUMNS = ["model", "seeds", f"val {METRIC}", f"test {METRIC}", "Δ val", "Δ test [95% CI]"]


def parse_seeds(text: str) -> list[int]:
    """``0,1,2`` -> ``[0, 1, 2]``: distinct non-negative integers, in the order given.

    Raises:
        ValueError: naming what is wrong with ``text``.
    """
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    if not parts or not all(p.isdigit() for p in parts):
        raise ValueError(f"seeds {text!r}: expected comma-separated non-negative integers, like 0,1,2")
    seeds = [int(p) for p in parts]
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds {text!r}: a seed is given twice")
    return seeds


def state_of(folder: Path) -> dict[str, dict]:
    """The stage records of the pipeline folder ``folder`` (its ``state.json``).

    Raises:
        DomainBertError: the folder has no ``state.json`` (not a pipeline's), or one the pipeline did not write.
    """
    path = Path(folder) / "state.json"
    if not path.is_file():
        raise DomainBertError(f"{path}: no such file; expected the folder of a domainbert pipeline (its --out)")
    return read_state(path)


def done_seeds(folder: Path) -> list[int]:
    """The seeds of the fine-tuning stages (``finetune-baseline-seed<N>``) done in ``folder``, in increasing order."""
    seeds = []
    for stage, record in state_of(folder).items():
        suffix = stage.removeprefix(STAGE)
        if suffix != stage and suffix.isdigit() and record.get("status") == "done":
            seeds.append(int(suffix))
    return sorted(seeds)


def read_runs(folder: Path, seeds: list[int]) -> list[dict]:
    """Each seed's fine-tuning run of ``folder``: ``{"seed", "metrics", "predictions"}`` (as the report reads runs).

    ``predictions`` is the stage folder's ``test_predictions.json`` under ``folder`` (so a moved folder still reads).

    Raises:
        DomainBertError: a seed whose stage is missing or not done, or whose record lacks a validation or test
            macro-F1, naming the folder and the seed.
    """
    folder = Path(folder)
    state = state_of(folder)
    runs = []
    for seed in seeds:
        record = state.get(f"{STAGE}{seed}") or {}
        if record.get("status") != "done":
            why = f"its status is {record['status']!r}" if record.get("status") else "no such stage"
            raise DomainBertError(
                f"{folder}: seed {seed} is not fine-tuned ({STAGE}{seed} in {folder / 'state.json'}: {why}); "
                f"expected a finished stage for every seed of {seeds} (run the pipeline with those --seeds, "
                "or give --seeds that every folder has)"
            )
        metrics = record.get("metrics") or {}
        for key in (f"val/{METRIC}", f"test/{METRIC}"):
            if not isinstance(metrics.get(key), (int, float)):
                raise DomainBertError(
                    f"{folder / 'state.json'}: {STAGE}{seed} records no {key}; expected its validation and test "
                    "metrics (a task with a test split)"
                )
        runs.append({"seed": seed, "metrics": metrics, "predictions": str(folder / f"{STAGE}{seed}" / PREDICTIONS)})
    return runs


def seed_scores(runs: list[dict]) -> dict[str, tuple[float, float]]:
    """``{"val", "test"}``: the macro-F1's mean and sample std over ``runs`` (``core.stats.mean_std``)."""
    return {split: mean_std([r["metrics"][f"{split}/{METRIC}"] for r in runs]) for split in ("val", "test")}


def _differs(gold: list[int], other: list[int]) -> str:
    """Where two gold label lists part: their lengths, or the first row that differs."""
    if len(gold) != len(other):
        return f"{len(other)} rows against {len(gold)}"
    row = next(i for i, (a, b) in enumerate(zip(gold, other)) if a != b)
    return f"row {row}: label id {other[row]} against {gold[row]}"


def check_gold(gold: list[int], where: str, other: list[int], other_where: str) -> None:
    """Raise unless ``other`` (read from ``other_where``) is ``gold`` (read from ``where``), row for row.

    Raises:
        DomainBertError: naming both files and the first difference.
    """
    if list(other) != list(gold):
        raise DomainBertError(
            f"{other_where}: its gold labels differ from those of {where} ({_differs(gold, other)}); a paired "
            "comparison needs the same test rows, in the same order, under the same labels"
        )


def predictions(runs: list[dict]) -> tuple[list[int], list[list[int]], int]:
    """``(gold, predictions per seed, number of labels)`` of ``runs``, read by the pipeline report's reader.

    Raises:
        DomainBertError: a missing or unreadable predictions file, one whose predictions do not cover its gold rows,
            or seeds whose gold labels differ, naming the file(s).
    """
    gold, preds, labels = None, [], 0
    for run in runs:
        path = run["predictions"]
        try:
            read = read_predictions([path])
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as err:
            raise DomainBertError(
                f"{path}: not test predictions ({err!r}); expected JSON with gold, pred, labels"
            ) from None
        if read is None:
            raise DomainBertError(
                f"{path}: no such file or no gold labels; expected the test predictions of seed {run['seed']}"
            )
        if len(read[1][0]) != len(read[0]):
            raise DomainBertError(f"{path}: {len(read[1][0])} predictions for {len(read[0])} gold labels")
        if gold is None:
            gold, first = read[0], path
        check_gold(gold, first, read[0], path)
        preds.append(read[1][0])
        labels = max(labels, read[2], 1 + max([*read[0], *read[1][0]], default=0))
    return gold, preds, labels


def compare(base_runs: list[dict], runs: list[dict], resamples: int = RESAMPLES) -> Interval:
    """The paired bootstrap of the test macro-F1 of ``runs`` minus that of ``base_runs``, over rows and seeds.

    Raises:
        DomainBertError: the two sides' gold labels differ (naming both files), or as :func:`predictions` does.
    """
    gold, base_preds, base_labels = predictions(base_runs)
    other, preds, labels = predictions(runs)
    check_gold(gold, base_runs[0]["predictions"], other, runs[0]["predictions"])
    return paired_bootstrap(gold, base_preds, preds, max(base_labels, labels), metric=METRIC, resamples=resamples)


def strategy_rows(base: Path, models: list[tuple[str, Path]], seeds: list[int] | None = None) -> list[dict]:
    """The base row, then one row per ``(name, folder)`` with its differences from the base and its test interval.

    Each row: ``model``, ``seeds``, ``val`` and ``test`` (mean, std); the adapted rows also ``val_delta`` and
    ``ci`` (an ``Interval``: the test difference and its bounds).

    Args:
        base: the base model's pipeline folder.
        models: the adapted models' names and pipeline folders.
        seeds: the seeds to read; None: every fine-tuning stage done in ``base``.

    Raises:
        DomainBertError: no seed done in ``base``, or as :func:`read_runs` and :func:`compare` do.
    """
    seeds = done_seeds(base) if seeds is None else seeds
    if not seeds:
        raise DomainBertError(f"{Path(base) / 'state.json'}: no {STAGE}<N> stage is done; nothing to compare")
    base_runs = read_runs(base, seeds)
    base_scores = seed_scores(base_runs)
    rows = [{"model": "base", "seeds": seeds, **base_scores}]
    for name, folder in models:
        runs = read_runs(folder, seeds)
        scores = seed_scores(runs)
        delta = scores["val"][0] - base_scores["val"][0]
        rows.append({"model": name, "seeds": seeds, **scores, "val_delta": delta, "ci": compare(base_runs, runs)})
    return rows


def interval_cell(ci: Interval) -> str:
    """``+0.0123 [-0.0040, +0.0290]``: the difference and its interval, as the pipeline report writes them."""
    return f"{ci.diff:+.4f} [{ci.low:+.4f}, {ci.high:+.4f}]"


def markdown(rows: list[dict]) -> str:
    """The rows as a Markdown table: mean ± std to 4 decimals, the differences signed; the base row has none."""

    def spread(value: tuple[float, float]) -> str:
        return f"{value[0]:.4f} ± {value[1]:.4f}"

    lines = [
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "|".join("---" if c == "model" else "---:" for c in COLUMNS) + "|",
    ]
    for r in rows:
        deltas = [f"{r['val_delta']:+.4f}", interval_cell(r["ci"])] if "ci" in r else ["–", "–"]
        cells = [r["model"], ",".join(map(str, r["seeds"])), spread(r["val"]), spread(r["test"]), *deltas]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def figures(rows: list[dict]) -> dict:
    """The key=value figures: the seeds, each row's means and stds, each adapted row's differences and bounds."""
    out: dict = {"seeds": ",".join(map(str, rows[0]["seeds"]))}
    for r in rows:
        name = r["model"]
        out |= {f"{name}_val": r["val"][0], f"{name}_val_std": r["val"][1]}
        out |= {f"{name}_test": r["test"][0], f"{name}_test_std": r["test"][1]}
        if "ci" in r:
            out |= {f"{name}_val_delta": r["val_delta"], f"{name}_test_delta": r["ci"].diff}
            out |= {f"{name}_test_low": r["ci"].low, f"{name}_test_high": r["ci"].high}
    return out


def named_folder(text: str) -> tuple[str, Path]:
    """``NAME=FOLDER`` -> ``(NAME, Path(FOLDER))``; NAME one word without spaces (it keys the figures)."""
    name, sep, folder = text.partition("=")
    if not sep or not name or not folder or any(c.isspace() for c in name):
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=FOLDER, NAME without spaces")
    return name, Path(folder)


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The options."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", required=True, type=Path, help="the base model's pipeline folder")
    p.add_argument("models", nargs="+", type=named_folder, metavar="NAME=FOLDER", help="an adapted model's folder")
    p.add_argument("--seeds", default=None, help="comma-separated seeds (default: those done in --base)")
    args = p.parse_args(argv)
    names = [name for name, _ in args.models]
    if "base" in names or len(set(names)) != len(names):
        p.error(f"model names {names}: each once, and none called base (the --base row)")
    if args.seeds is not None:
        try:
            args.seeds = parse_seeds(args.seeds)
        except ValueError as err:
            p.error(f"--seeds: {err}")
    return args


def main(argv: list[str] | None = None) -> dict:
    """Print the table, a line on the interval and the key=value line; the figures."""
    args = parse(argv)
    try:
        rows = strategy_rows(args.base, args.models, args.seeds)
    except DomainBertError as err:
        raise SystemExit(f"seed_rows: {err}") from None
    print(markdown(rows))
    seeds = rows[0]["seeds"]
    noise = "seeds resampled too" if len(seeds) > 1 else "one seed: run-to-run noise is not in the interval"
    print(f"# Δ test [95% CI]: paired bootstrap of test {METRIC} over the test rows ({RESAMPLES} resamples; {noise})")
    result = figures(rows)
    print(common.kv_line(result))
    return result


if __name__ == "__main__":
    main()
