"""The pipeline's ``report.md`` and ``report.json``: what to ship, what each strategy bought, how sure we are.

And what it cost.
"""

from __future__ import annotations

import json
from pathlib import Path

from domainbert.core.files import atomic_write_text
from domainbert.core.stats import mean_std, paired_bootstrap
from domainbert.pipeline.deployment import report_lines as deployment_lines
from domainbert.pipeline.recipe import Choice, Distilled, Probed, below_probe, stopped_line
from domainbert.pipeline.records import Ship
from domainbert.pipeline.strategies.base import BASELINE, PROBE, Candidate, Gate, Run
from domainbert.pipeline.timing import part_lines, stage_order


def candidate_minutes(runner, candidate: Candidate) -> float:
    """The minutes ``candidate`` cost beyond the baseline: the stages that made it and its own runs.

    Its ``stages`` (curation, vocabulary, DAPT, TAPT; for self-training, the labelling, its teachers' fine-tuning and
    the runs on task + pseudo-labelled rows; for a seed soup, its starting model's stages plus the averaging and the
    evaluation), then the stages of its own runs (its fine-tuning over the seeds; a plugin's runs), each once. The
    baseline costs nothing extra: every candidate is compared with it. Only stages of this invocation count.
    """
    if candidate.name == BASELINE:
        return 0.0
    stages = [*candidate.stages, *(r.stage for r in candidate.runs if r.stage)]
    return sum(runner.seconds(s) for s in dict.fromkeys(stages) if s in runner.called) / 60


def _plot_setup():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def curve_panels(columns: list[str], most: int = 4) -> list[list[str]]:
    """The panels of a stage's curves, each a list of ``metrics.csv`` columns drawn together (at most ``most``).

    First the training loss with the validation loss on the same axes, then every other validation metric, the
    probe watch's metrics, and the other training losses (distillation's parts) last, so that a stage that logs many
    losses still shows its validation.
    """
    cols = [c for c in columns if c.startswith(("train/loss", "val/", "probe/"))]
    loss = "train/loss" if "train/loss" in cols else next((c for c in cols if c.startswith("train/loss")), None)
    panels = [[c for c in (loss, "val/loss") if c in cols]]
    panels += [[c] for c in cols if c.startswith("val/") and c != "val/loss"]
    panels += [[c] for c in cols if c.startswith("probe/")]
    panels += [[c] for c in cols if c.startswith("train/loss") and c != loss]
    return [p for p in panels if p][:most]


def checked_once(df, panels: list[list[str]]) -> dict[str, tuple[int, float]]:
    """``{column: (step, value)}`` of the panels that are one check alone (a one-epoch run's validation metric).

    A panel of one validation or probe column with a single value would be a lone dot: the report gives its value
    as a line instead of a plot.
    """
    once = {}
    for cols in panels:
        col = cols[0]
        if len(cols) == 1 and not col.startswith("train/") and df[col].notna().sum() == 1:
            row = df[["step", col]].dropna().iloc[0]
            once[col] = (int(row["step"]), float(row[col]))
    return once


def _curves(run_dir: str, png: Path, title: str) -> tuple[bool, dict[str, tuple[int, float]]]:
    """Plot a run's curves to ``png``: ``(whether a plot was made, the metrics checked once, not plotted)``."""
    import pandas as pd

    csv = Path(run_dir) / "metrics.csv"
    if not csv.exists():
        return False, {}
    df = pd.read_csv(csv)
    panels = curve_panels([c for c in df.columns if df[c].notna().any()])
    once = checked_once(df, panels)
    panels = [p for p in panels if not (len(p) == 1 and p[0] in once)]
    if not panels:
        return False, once
    plt = _plot_setup()
    fig, axes = plt.subplots(1, len(panels), figsize=(3.4 * len(panels), 2.9), squeeze=False)
    for ax, cols in zip(axes[0], panels):
        for col in cols:
            d = df[["step", col]].dropna()
            checks = not col.startswith("train/")  # validation and probe checks: a point each
            ax.plot(d["step"], d[col], marker="o" if checks or len(d) < 30 else None, label=col.split("/", 1)[0])
            if checks and len(d):
                last = d.iloc[-1]
                ax.annotate(
                    f"{last[col]:.3f}",
                    (last["step"], last[col]),
                    textcoords="offset points",
                    xytext=(-4, 5),
                    ha="right",
                    fontsize=7,
                )
        ax.set_title(" & ".join(cols), fontsize=8)
        ax.set_xlabel("step")
        if len(cols) > 1:
            ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(png, dpi=90)
    plt.close(fig)
    return True, once


def curve_lines(runner) -> list[str]:
    """The report's training curves: a plot per trained stage, and a line for what was checked only once."""
    lines = ["## Training curves", ""]
    for stage in dict.fromkeys(runner.called):
        entry = runner.state.get(stage, {})
        if "--evaluate" in entry.get("inputs", []) or not entry.get("run"):
            continue  # evaluated, not trained: no curve
        plotted, once = _curves(entry["run"], runner.out / "plots" / f"{stage}.png", stage)
        if not plotted and not once:
            continue
        lines += [f"### {stage}", ""]
        if plotted:
            lines += [f"![{stage}](plots/{stage}.png)", ""]
        if once:
            checks = ", ".join(f"{col} {value:.4f} (step {step})" for col, (step, value) in once.items())
            lines += [f"Checked once, so not plotted: {checks}.", ""]
    return lines


#: One candidate of the comparison chart: ``(name, val mean, val std, test mean, test std)``.
ChartRow = tuple[str, float, float, float, float]


def comparison_chart(
    rows: list[ChartRow], metric: str, png: Path, spread: bool = True, chosen: str | None = None
) -> None:
    """Save :func:`chart_figure` to ``png``, every label inside the image."""
    plt = _plot_setup()
    fig = chart_figure(rows, metric, spread, chosen)
    fig.savefig(png, dpi=90, bbox_inches="tight")
    plt.close(fig)


def chart_limits(values: list[float]) -> tuple[float, float]:
    """The score axis: from just below the lowest value to just above the highest (within 0..1 for scores ≤ 1)."""
    lo, hi = min(values), max(values)
    margin = max(0.01, (hi - lo) * 0.15)
    low, high = lo - margin, hi + margin * 1.6  # room above for the values' labels
    return (max(0.0, low), min(1.0, high) if hi <= 1.0 else high)


def chart_figure(rows: list[ChartRow], metric: str, spread: bool = True, chosen: str | None = None):
    """Validation and test side by side for each starting model; the chosen one marked.

    Points, not bars: the axis starts near the scores, so that differences of a point show (a bar would claim a
    length from 0). Validation (hollow) chooses, test (filled) is reported; with ``spread``, error bars of the std
    over seeds. ``chosen`` (the chosen candidate) gets a shaded band and a ``chosen`` label.
    """
    plt = _plot_setup()
    fig, ax = plt.subplots(figsize=(1.7 * len(rows) + 2.4, 3.8))
    names = [r[0] for r in rows]
    colors = ["#888" if n == PROBE else "#37a" if n == BASELINE else "#3a7" for n in names]
    values = []
    for i, (name, vm, vs, tm, ts) in enumerate(rows):
        for x, mean, std, filled, split in ((i - 0.15, vm, vs, False, "val"), (i + 0.15, tm, ts, True, "test")):
            if mean != mean:  # NaN: not measured
                continue
            ax.errorbar(
                [x],
                [mean],
                yerr=[std] if spread else None,
                fmt="o",
                capsize=4 if spread else 0,
                color=colors[i],
                markerfacecolor=colors[i] if filled else "white",
                markersize=8,
                label=split if i == 0 else None,
            )
            ax.annotate(
                f"{mean:.3f}",
                (x, mean + (std if spread else 0.0)),
                textcoords="offset points",
                xytext=(0, 4),
                ha="center",
                fontsize=8,
            )
            values += [mean - (std if spread else 0.0), mean + (std if spread else 0.0)]
        if name == chosen:
            ax.axvspan(i - 0.45, i + 0.45, color="#fd6", alpha=0.35, zorder=0)
    if values:
        ax.set_ylim(*chart_limits(values))
    if chosen in names:
        i = names.index(chosen)
        ax.annotate(
            "chosen",
            (i, 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(0, -12),
            textcoords="offset points",
            ha="center",
            fontsize=8,
            fontweight="bold",
        )
    ax.set_xticks(range(len(names)), names)
    ax.set_xlim(-0.6, len(names) - 0.4)
    ax.set_ylabel(metric)
    what = "mean ± std over seeds" if spread else "one seed"
    ax.set_title(f"{metric}: validation (hollow, chooses) and test (filled), {what}", fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    if max(len(n) for n in names) > 10:
        plt.setp(ax.get_xticklabels(), rotation=20, ha="right")
    fig.tight_layout()
    return fig


def _predictions(runs: list[Run]) -> tuple[list[int], list[list[int]], int] | None:
    """``(gold, predictions per run, number of labels)`` from the runs' test predictions (None: a run has none)."""
    return read_predictions([r.predictions for r in runs])


def read_predictions(paths: list[str | None]) -> tuple[list[int], list[list[int]], int] | None:
    """``(gold, predictions per file, number of labels)`` from test predictions files (None: a file is missing).

    Each file is a stage's ``test_predictions.json`` (``gold``, ``pred``, ``labels``);
    ``examples/benchmarks/seed_rows.py`` reads a pipeline folder's with it.
    """
    preds, gold, k = [], None, 0
    for path in paths:
        if not path or not Path(path).is_file():
            return None
        data = json.loads(Path(path).read_text())
        gold, k = data["gold"], max(k, len(data.get("labels") or []))
        preds.append(data["pred"])
    return (gold, preds, k) if gold is not None else None


def _verdict(candidate: Candidate, ci, delta: str, metric: str, per_min: str) -> str:
    """The plain sentence of one row's paired comparison (``ci``, an ``Interval``) with the baseline.

    What the candidate is comes from its ``description`` when its strategy gave one, else from its kind.
    """
    if candidate.description:
        what = candidate.description
    elif candidate.one_model and not candidate.adapted:
        source = _soup_of(candidate)
        source = f"the {source}" if source == BASELINE else source
        what = f"the weight average of {source}'s seeds (a model soup; no adaptation)"
    elif candidate.one_model:
        what = "adaptation with the weight average of its seeds (a model soup)"
    elif not candidate.adapted:
        what = f"{candidate.source}'s model (no domain adaptation)"
    else:
        what = "adaptation"
    single = "one model: its seeds' run-to-run noise" if candidate.one_model else "one seed: run-to-run noise"
    return f"- **{candidate.name}**: {what} {ci.verdict(single)} ({delta} test {metric} points{per_min})."


def _soup_of(candidate: Candidate) -> str:
    """The starting model a soup averages (``baseline`` for ``baseline soup``)."""
    return candidate.name.removesuffix(" soup") or BASELINE


def _cell(value: tuple[float, float], single: bool) -> str:
    """``mean ± std``, or the value alone for a row of one run (one seed, or a soup); ``–`` when not measured."""
    if value[0] != value[0]:  # NaN: no run recorded it (no test split)
        return "–"
    return f"{value[0]:.4f}" if single else f"{value[0]:.4f} ± {value[1]:.4f}"


def probe_minutes(runner) -> float:
    """The frozen-embedding probe stage's minutes (0 when it did not run)."""
    return runner.seconds("probe") / 60


def _probe_row(runner, probed: Probed, metric: str) -> str:
    """The table row of the frozen-embedding probe."""
    val, test = probed.val, probed.test
    cells = [_cell((split.get(key, float("nan")), 0.0), True) for split, key in ((val, metric), (test, metric))]
    cells.append(_cell((test.get("acc", float("nan")), 0.0), True))
    return (
        f"| frozen embeddings + logistic regression | {' | '.join(cells)} | (no fine-tuning) | "
        f"{probe_minutes(runner):.1f} in all |"
    )


def _intro(candidates: list[Candidate], seeds: list[int]) -> str:
    """The sentence above the table: what a cell is (no spread with one seed)."""
    soup = (
        " A `<name> soup` row is one model, the uniform weight average of that starting model's seed runs (Wortsman"
        " et al. 2022), evaluated as it is."
        if any(c.one_model and c.runs for c in candidates)
        else ""
    )
    if len(seeds) == 1:
        return (
            f"One seed ({seeds[0]}) per starting model, so each cell is one run's score with no spread (give two or "
            f"more seeds for mean ± std) of the best checkpoint (chosen on validation).{soup}"
        )
    return f"Mean ± std over seeds {seeds} of the best checkpoint (chosen on validation) of each run.{soup}"


def _probe_verdict(chart: list, probed: Probed, metric: str) -> str:
    """What fine-tuning bought over the probe, on test; plainly a failure when it lost."""
    base, frozen = next(c for c in chart if c[0] == BASELINE)[3], probed.test[metric]
    if base < frozen:
        return (
            f"- **Fine-tuning lost to the frozen-embedding probe**: the baseline scored {base:.4f} test {metric} "
            f"against the probe's {frozen:.4f} ({(base - frozen) * 100:+.2f} points). Fine-tuning did not learn what a "
            "linear probe on the frozen embeddings finds; see the chosen model below."
        )
    return (
        "- What fine-tuning itself buys (baseline against the frozen-embedding probe):"
        f" {(base - frozen) * 100:+.2f} test {metric} points ({base:.4f} against {frozen:.4f})."
    )


def adaptation_section(
    runner, candidates: list[Candidate], probed: Probed | None, metric: str, seeds: list[int], chosen: str | None = None
):
    """The table of candidates, the paired intervals, the verdicts and the gain per minute (a list of lines).

    ``chosen``: the chosen candidate, marked on the comparison chart.
    """
    base_pred = _predictions(next(c for c in candidates if c.name == BASELINE).runs)
    lines = [
        _intro(candidates, seeds),
        "",
        f"| starting model | val {metric} | test {metric} | test acc | Δ test vs baseline, points [95% CI] "
        "| extra minutes |",
        "|---|---|---|---|---|---|",
    ]
    if probed is not None:
        lines.append(_probe_row(runner, probed, metric))
    verdicts, chart, adapted = [], [], False
    baseline = next(c for c in candidates if c.name == BASELINE)
    saved = sum(runner.seconds(r.stage) for r in baseline.runs if r.stage) / 60
    for candidate in candidates:
        verdicts += [_gate_line(candidate, saved)] if candidate.gate else []
        if candidate.gated:
            lines.append(_gated_row(runner, candidate))
        if candidate.name == PROBE or not candidate.runs:
            continue  # the probe has its own row above; an intermediate output is no row
        row, verdict = _row(runner, candidate, base_pred, metric)
        lines.append(row)
        verdicts += [verdict] if verdict else []
        if candidate.stopped:
            verdicts.append(f"- **{candidate.name}**: {stopped_line(candidate.name, candidate.stopped, metric)}.")
        adapted = adapted or bool(verdict and candidate.adapted)
        chart.append(
            (candidate.name, *_mean(candidate.runs, f"val/{metric}"), *_mean(candidate.runs, f"test/{metric}"))
        )
    if not adapted and not any(c.gated for c in candidates):
        verdicts += [
            "- This run trained no adapted model (DAPT, TAPT and curation were off), or recorded no test predictions:"
            " it cannot show an adaptation gain. The full recipe (more stages and seeds) is the one to judge by."
        ]
    if probed is not None and probed.test.get(metric) is not None and chart:
        verdicts.append(_probe_verdict(chart, probed, metric))
    lines += ["", *verdicts, ""]
    if any(c[1] == c[1] or c[3] == c[3] for c in chart):  # not all NaN
        if probed is not None and (probed.test.get(metric) is not None or probed.val):
            nan = float("nan")
            val, test = probed.val.get(metric, nan), probed.test.get(metric, nan)
            chart.insert(0, (PROBE, val, 0.0, test, 0.0))
        spread = any(len(c.runs) > 1 for c in candidates)
        png = runner.out / "plots" / "comparison.png"
        comparison_chart(chart, metric, png, spread=spread, chosen=chosen)
        lines += ["![comparison](plots/comparison.png)", ""]
        lines += [
            "The chart: validation (hollow), which chooses, beside test (filled), which is only reported; the "
            "chosen model (which teaches the student) is shaded.",
            "",
        ]
    return lines


def _row(runner, candidate: Candidate, base_pred, metric: str) -> tuple[str, str | None]:
    """A fine-tuned candidate's table row, and its verdict against the baseline (None when not comparable)."""
    runs = candidate.runs
    val, test, acc = (_mean(runs, key) for key in (f"val/{metric}", f"test/{metric}", "test/acc"))
    delta, verdict, minutes, pred = "", None, candidate_minutes(runner, candidate), _predictions(runs)
    if candidate.name != BASELINE and base_pred and pred and pred[0] == base_pred[0]:
        ci = paired_bootstrap(base_pred[0], base_pred[1], pred[1], max(base_pred[2], pred[2]), metric=metric)
        delta = f"{ci.diff * 100:+.2f} [{ci.low * 100:+.2f}, {ci.high * 100:+.2f}]"
        per_min = f"; {ci.diff * 100 / minutes:+.2f} points per minute" if minutes > 0 else ""
        verdict = _verdict(candidate, ci, delta, metric, per_min)
    one = len(runs) == 1
    if candidate.stopped:
        delta = f"{delta} (stopped after seed {candidate.stopped.seed})".strip()
    cells = [candidate.name, _cell(val, one), _cell(test, one), _cell(acc, True), delta]
    return "| " + " | ".join([*cells, f"{minutes:.1f}"]) + " |", verdict


def not_fine_tuned(gate: Gate) -> str:
    """``not fine-tuned: probe X against the base's Y``: a closed gate's cell and sentence."""
    return f"not fine-tuned: probe {gate.best:.4f} against the base's {gate.base:.4f}"


def _gated_row(runner, candidate: Candidate) -> str:
    """The table row of a candidate the probe gate kept from fine-tuning: no scores, its stages' minutes."""
    if candidate.gate.skipped:
        return f"| {candidate.name} | – | – | – | not run (dapt.enabled: auto) | 0.0 |"
    minutes = candidate_minutes(runner, candidate)
    return f"| {candidate.name} | – | – | – | {not_fine_tuned(candidate.gate)} | {minutes:.1f} |"


def _gate_line(candidate: Candidate, saved: float) -> str:
    """What the probe watch saw of ``candidate``'s pretraining and what the gate decided (``saved``: minutes)."""
    gate = candidate.gate
    if gate.skipped:
        return f"- **{candidate.name}**: {gate.skipped}."
    watched = f" The watch: {gate.summary} (checked at steps {gate.steps})." if gate.summary else ""
    if candidate.gated:
        return (
            f"- **{candidate.name}**: {not_fine_tuned(gate)} ({gate.base_from}; margin {gate.margin}), which "
            f"saved about {saved:.1f} minutes (the baseline's fine-tuning, summed over its seeds).{watched}"
        )
    if gate.best is None or gate.base is None:
        return f"- **{candidate.name}**: fine-tuned without the probe gate: {gate.why}.{watched}"
    why = f"): {gate.why}" if gate.why else f"; margin {gate.margin})"
    return (
        f"- **{candidate.name}**: fine-tuned: probe {gate.best:.4f} against the base's {gate.base:.4f} "
        f"({gate.base_from}{why}.{watched}"
    )


def _mean(runs: list[Run], key: str) -> tuple[float, float]:
    """Mean and std over ``runs`` of metric ``key`` (the runs that recorded it)."""
    return mean_std([score for r in runs if (score := r.metric(key)) is not None])


def choice_why(choice: Choice) -> str:
    """Why ``choice``, in words: its validation score against the baseline's and the probe's, and any warning."""
    best, top, probe = choice.best, choice.scores[choice.best], choice.probe
    if choice.name == PROBE:
        return (
            f"fine-tuning failed to beat the frozen-embedding probe: the probe scored {probe:.4f} validation "
            f"{choice.metric}, every fine-tuned model less (best: {best} {top:.4f}), so the probe ships as a "
            "classifier (the base encoder, frozen, with the probe as its mean-pooling head); check the fine-tuning "
            "settings (learning rate, epochs, data)"
        )
    why = _fine_tuned_why(choice)
    if choice.probe_error is not None:
        return (
            f"{why}. WARNING: it validates BELOW the frozen-embedding probe ({top:.4f} against {probe:.4f}), "
            f"which could not be exported as a classifier ({choice.probe_error})"
        )
    return why + (f"; the frozen probe scored {probe:.4f}" if probe is not None else "")


def _fine_tuned_why(choice: Choice) -> str:
    """Why the best fine-tuned candidate of ``choice`` is best: against the baseline, or alone."""
    key, scores, base = choice.key, choice.scores, choice.scores[BASELINE]
    if len(scores) == 1 and choice.gated:
        kept = ", ".join(choice.gated)
        return f"the only fine-tuned model (the probe gate kept {kept} from fine-tuning); validation {key} {base:.4f}"
    if len(scores) == 1:
        return f"the only starting model (no adaptation stage ran); validation {key} {base:.4f}"
    if choice.best == BASELINE:
        others = ", ".join(f"{n} {s:.4f}" for n, s in scores.items() if n != BASELINE and s is not None)
        return f"no adapted model beat it on validation {key} (baseline {base:.4f}{'; ' if others else ''}{others})"
    return f"best validation {key}: {scores[choice.best]:.4f} against the baseline's {base:.4f}"


def chosen_lines(choice: Choice, one_model: bool = False) -> list[str]:
    """The section on the chosen fine-tuned model: which, and why (:func:`choice_why`).

    ``one_model``: a soup. It teaches the student and is the variants table's ``teacher``; what ships is the
    report's first section.
    """
    if choice.name == PROBE:
        which = "the base encoder, frozen, with the probe's logistic regression as its mean-pooling head"
    else:
        which = "the weight average" if one_model else "its best seed on validation"
    head = f"**{choice.name}**, {which}, `{choice.run.hf}`: {choice_why(choice)}."
    lines = ["## The chosen fine-tuned model", "", head, ""]
    lines += [
        "The choice reads validation metrics only; the test split is reported, never used to choose. The chosen model "
        "teaches the distilled student and is the `teacher` row of the deployment variants; which folder ships is "
        "the deployment choice's answer (**What to ship**, above).",
        "",
    ]
    return lines


def ship_lines(ship: Ship, left: list[str]) -> list[str]:
    """The report's first section: the one folder to ship, then what the run left on the table (``left``).

    The answer is :func:`~domainbert.pipeline.deployment.answer`'s, as the pipeline's last line and ``report.json``
    give it.
    """
    from domainbert.pipeline.deployment import ship_line

    lines = ["## What to ship", "", f"**{ship_line(ship)}**", ""]
    if ship.warning:
        lines += [f"> **{ship.warning}**.", ""]
    return [*lines, *(f"- {line}" for line in left), *([""] if left else [])]


def left_on_table(candidates: list[Candidate], probed: Probed | None, metric: str) -> list[str]:
    """One line per installed strategy that did not run and has something to say for a task like this one.

    A strategy ran when a candidate came from it; the probe's validation score says how hard the task is
    (:meth:`~domainbert.pipeline.strategies.base.Strategy.untried`).
    """
    from domainbert.pipeline.strategies import load

    ran = {c.source for c in candidates}
    probe = probed.val.get(metric) if probed is not None else None
    found = (s.untried(probe, metric) for name, s in load().items() if name not in ran)
    return [line for line in found if line]


def warning_lines(results: dict, chosen: str, metric: str) -> list[str]:
    """A warning at the top of the report when every fine-tuned model validated below the frozen probe."""
    below = below_probe(results, metric)
    if below is None:
        return []
    best, score, probe = below
    if chosen == PROBE:
        outcome = "The pipeline ships the probe as a classifier instead of a fine-tuned model."
    else:
        outcome = f"The probe could not be shipped, so **{chosen}**, below the probe, ships."
    return [
        f"> **Warning: fine-tuning failed.** Every fine-tuned model validated below the frozen-embedding probe "
        f"(best: {best} {score:.4f} against the probe's {probe:.4f} validation {metric}). {outcome} Check the "
        "fine-tuning settings (learning rate, epochs, data size).",
        "",
    ]


def minutes_per_point(total: float, probe: float, score: float, frozen: float) -> tuple[float, float, float | None]:
    """``(extra minutes, test points gained, minutes per point)`` of a recipe over the frozen-embedding probe.

    ``total`` and ``probe`` are minutes (every stage; the probe's), ``score`` and ``frozen`` the model's and the probe's
    test metric. Points are the difference ×100; minutes per point is None when nothing was gained (points <= 0).
    """
    extra, gain = total - probe, (score - frozen) * 100
    return extra, gain, (extra / gain if gain > 0 else None)


#: The stages that make the student from the chosen model (and measure the variants): not the chosen model's cost.
STUDENT_STAGES = ("select-transfer", "distill", "export")


def recipe_minutes(runner, without: tuple[str, ...] = ()) -> float:
    """The minutes of every stage this invocation called (the stage table's total), less the stages ``without``.

    Leaving out ``export`` leaves out the exports of the models strategies offer too (``export-<role>``).
    """
    stages = stage_order(runner.state, runner.called)
    kept = [s for s in stages if s not in without and not ("export" in without and s.startswith("export-"))]
    return sum(runner.seconds(s) for s in kept) / 60


def recipe_line(total: float, probe: float, score: float, frozen: float, who: str) -> str:
    """``- Full recipe: ...``: the minutes beyond the probe's per test point ``who`` gained over the probe."""
    extra, gain, per = minutes_per_point(total, probe, score, frozen)
    head = (
        f"- Full recipe: {total:.1f} minutes of stages; {extra:.1f} minutes beyond the frozen probe's for "
        f"{gain:+.2f} test points of the {who} over the probe"
    )
    return (
        f"{head}: {per:.2f} minutes per point."
        if per is not None
        else f"{head}: the recipe gained nothing over the probe."
    )


def _recipe_lines(runner, score: float | None, teacher: float, frozen: float | None) -> list[str]:
    """The full recipe's lines for the student and the chosen model (none without a probe or a test metric).

    The teacher's minutes leave out the stages that make the student from it (:data:`STUDENT_STAGES`).
    """
    if runner is None or frozen is None:
        return []
    probe = probe_minutes(runner)
    made = (
        ("student", score, recipe_minutes(runner)),
        ("chosen model", teacher, recipe_minutes(runner, STUDENT_STAGES)),
    )
    return [recipe_line(total, probe, s, frozen, who) for who, s, total in made if s is not None and s == s]


def _shipped_test(teacher: Candidate | None, metric: str) -> tuple[str, float, int]:
    """The chosen model's name, test ``metric`` (the mean over its runs that recorded it) and how many did."""
    scores = [s for r in (teacher.runs if teacher else []) if (s := r.metric(f"test/{metric}")) is not None]
    return (teacher.name if teacher else "", mean_std(scores)[0], len(scores))


def _versus_line(score: float | None, shipped: tuple[str, float, int], frozen: float | None) -> list[str]:
    """The student's test points against the chosen model (``(name, mean, runs)``) and the frozen probe."""
    (name, mean, runs), parts = shipped, []
    if score is not None and mean == mean:
        over = f"mean of its {runs} runs" if runs > 1 else "its one run"
        parts.append(f"against the chosen model ({name}: {mean:.4f}, {over}): {(score - mean) * 100:+.2f}")
    if score is not None and frozen is not None:
        parts.append(f"against the frozen-embedding probe ({frozen:.4f}): {(score - frozen) * 100:+.2f}")
    return [f"- test points {'; '.join(parts)}"] if parts else []


def _distill_line(student: Run) -> list[str]:
    """The distillation stage's minutes, and how many corpus documents its transfer set (``data.transfer``) added."""
    if student.seconds is None:
        return []
    transfer = _transfer(student.config)
    added = ""
    if isinstance(transfer, dict):
        documents = transfer.get("documents")
        count = "all the" if documents is None else f"{documents}"
        added = f", with a transfer set of {count} corpus documents (`data.transfer`)"
    return [f"- distillation: {float(student.seconds) / 60:.1f} minutes{added}"]


def _transfer(config: str | None) -> dict | None:
    """The ``data.transfer`` of a stage's resolved config (None: none, or no readable config)."""
    import yaml

    try:
        loaded = yaml.safe_load(Path(config).read_text(encoding="utf-8")) if config else None
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    data = (loaded or {}).get("data") if isinstance(loaded, dict) else None
    return ((data or {}).get("init_args") or {}).get("transfer") if isinstance(data, dict) else None


def student_lines(
    distilled: Distilled, metric: str, runner=None, teacher: Candidate | None = None, probed: Probed | None = None
) -> list[str]:
    """The distilled student's section: its test metric, in points against the chosen model and the probe, and more.

    Also its distillation's minutes, its export, why deployment variants are missing, and the full recipe's minutes
    per point over the probe. ``distilled``: the student and its export; ``teacher``: the chosen candidate (its runs'
    mean test metric); ``probed``: the probe's outcome; ``runner``: the stages' minutes. Without them those lines
    are left out.
    """
    lines, student = ["## Distilled student", ""], distilled.student
    score = student.metric(f"test/{metric}")
    lines.append(f"- test {metric}: {score:.4f}" if score is not None else f"- test {metric}: – (no test split)")
    shipped, frozen = _shipped_test(teacher, metric), probed.test.get(metric) if probed is not None else None
    lines += [*_versus_line(score, shipped, frozen), *_distill_line(student)]
    lines.append(f"- export: `{student.hf}`")
    if distilled.skipped:
        lines.append(f"- deployment variants (int8, ONNX...): **not exported**: {distilled.skipped}")
    return [*lines, *_recipe_lines(runner, score, shipped[1], frozen), ""]


def write_report(
    runner, candidates, probed: Probed | None, choice: Choice, distilled: Distilled | None, metric: str, seeds
) -> Path:
    """Write ``<out>/report.md`` and ``<out>/report.json``: what to ship, the comparison, the choice, and more.

    The Markdown then has deployment, the curves and the stages' costs.
    ``report.json`` holds ``ship`` (the one folder to ship and why: :func:`~domainbert.pipeline.deployment.answer`),
    ``chosen`` (the fine-tuned model the choice made), ``student``, ``export`` (its folder) and ``left_on_table``;
    the pipeline's last lines are read from it (:func:`~domainbert.pipeline.deployment.final_lines`).

    Args:
        runner: the run's runner (its stages' minutes and records).
        candidates: every candidate, in order (the baseline first; see :class:`~domainbert.pipeline.strategies.base.
            Candidate`).
        probed: the probe stage's outcome, or None.
        choice: the choice of the fine-tuned model (its best run teaches the student).
        distilled: the distilled student and its export, or None (distillation off).
        metric: the metric compared.
        seeds: the fine-tuning seeds.
    """
    out = runner.out
    (out / "plots").mkdir(exist_ok=True)
    results = {c.name: c.runs for c in candidates if c.runs}
    why, deployed = choice_why(choice), distilled.export if distilled else None
    ship = _ship(choice, why, distilled)
    left = left_on_table(candidates, probed, metric)
    lines = ["# domainbert pipeline report", "", f"Folder: `{out}`", "", *ship_lines(ship, left)]
    lines += warning_lines(results, choice.name, metric)
    lines += ["## Does domain adaptation help?", ""]
    lines += adaptation_section(runner, candidates, probed, metric, seeds, chosen=choice.name)
    chosen = next((c for c in candidates if c.name == choice.name), None)
    lines += chosen_lines(choice, one_model=bool(chosen and chosen.one_model))
    if distilled is not None:
        lines += student_lines(distilled, metric, runner, chosen, probed)
    lines += variants_lines(deployed, out)
    lines += part_lines(runner.state, runner.called)  # each stage's minutes, split into its parts
    lines += curve_lines(runner)
    path = out / "report.md"
    atomic_write_text(path, "\n".join(lines) + "\n")
    record = {
        "ship": ship.to_json(),
        "chosen": {"name": choice.name, "why": why, "folder": choice.run.hf},
        "export": deployed,
    }
    student = distilled.student if distilled else None
    record["student"] = {"hf": student.hf, "metrics": dict(student.metrics)} if student else None
    record.update(left_on_table=left, report=path.name)
    atomic_write_text(out / "report.json", json.dumps(record, indent=2) + "\n")
    return path


def _ship(choice: Choice, why: str, distilled: Distilled | None) -> Ship:
    """The one answer (:func:`~domainbert.pipeline.deployment.answer`) of this run."""
    from domainbert.pipeline.deployment import answer

    if distilled is None:
        return answer(None, choice, why, "distillation is off, so no student and no export")
    return answer(distilled.export, choice, why, distilled.skipped)


#: What the variants table's scores are, against the candidates' table's.
MEASURED_NOTE = (
    "Every row here is measured by the export, over the same rows, as the variant serves; the candidates' table above "
    "reads each training stage's own passes, in its training precision (`trainer.precision`; unset: bf16-mixed where "
    "the CPU runs bf16 natively), so one model's two validation scores agree to that precision."
)


def variants_lines(deployed: str | None, out: Path) -> list[str]:
    """The deployment variants: what was measured, the table, its notes, the rule and the plot; blank lines between."""
    from domainbert.deploy.report import variants_markdown
    from domainbert.pipeline.deployment import export_summary

    summary = export_summary(deployed)
    if summary is None or not summary.get("variants"):
        return []
    lines = ["## Deployment variants", "", *variants_markdown(summary), MEASURED_NOTE, ""]
    return [*lines, *deployment_lines(deployed, out)]
