"""What a sweep leaves behind: the table of trials, ``best.yaml``, ``trials.csv`` and the PNG plots."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from domainbert.core.files import atomic_file, atomic_write_text
from domainbert.errors import DomainBertError
from domainbert.sweep.space import Param, overrides
from domainbert.sweep.trial import parse_fit

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReportContext:
    """What :func:`report` needs to know of a sweep.

    Attributes:
        study: the Optuna study.
        out: the sweep folder, where ``trials.csv``, ``best.yaml`` and the plots are written.
        name: the study name, for messages.
        metric: the metric the study optimises.
        direction: ``maximize`` or ``minimize``.
        params: the search space, with each ``target`` resolved against the fit config.
        fit_args: the fit arguments every trial shares (``--config a.yaml ... --key value``).
        config: the last fit config file; ``best.yaml``'s ``run_name`` is ``<its stem>-best`` unless the config
            names a run.
    """

    study: optuna.Study
    out: Path
    name: str
    metric: str
    direction: str
    params: tuple[Param, ...]
    fit_args: tuple[str, ...]
    config: str


def _short(path: str) -> str:
    return path.rsplit(".", 1)[-1]


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def trials_table(study: optuna.Study) -> str:
    """A plain-text table: number, state, value, duration, parameters, and the error or pruning step."""
    rows = [("#", "state", "value", "seconds", "params", "note")]
    trials = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
    retried_as = {t.system_attrs["failed_trial"]: t.number for t in trials if "failed_trial" in t.system_attrs}
    for t in trials:
        secs = f"{t.duration.total_seconds():.1f}" if t.duration else "-"
        values = t.params or t.system_attrs.get("fixed_params", {})  # a queued trial has only fixed ones
        params = " ".join(f"{_short(k)}={_fmt(v)}" for k, v in values.items())
        note = t.user_attrs.get("error", "")
        if t.state == TrialState.PRUNED and t.intermediate_values:
            note = f"pruned at step {max(t.intermediate_values)}"
        if "failed_trial" in t.system_attrs:
            note = (note + " " if note else "") + f"retry of #{t.system_attrs['failed_trial']}"
        if t.number in retried_as and t.state == TrialState.FAIL:
            note = f"worker died; retried as #{retried_as[t.number]}"
        if t.user_attrs.get("interrupted"):
            note = "interrupted (requeued)"
        value = _fmt(t.value) if t.value is not None else "-"
        rows.append((str(t.number), t.state.name.lower(), value, secs, params, note[:80]))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r[:5], widths)) + "  " + r[5] for r in rows)


def best_config(ctx: ReportContext, best: optuna.trial.FrozenTrial) -> str:
    """The complete fit config with the best trial's values merged in, as YAML for ``domainbert fit --config``."""
    parser, cfg = parse_fit([*ctx.fit_args, *overrides(best.params, ctx.params)])
    if not cfg.get("run_name"):
        cfg["run_name"] = f"{Path(ctx.config).stem}-best"
    body = parser.dump(cfg)
    lines = [f"#   {p.target}: {_fmt(best.params[p.path])}" for p in ctx.params if p.path in best.params]
    header = (
        f"# Best trial #{best.number} of sweep '{ctx.name}': {ctx.metric}={best.value:.6g} "
        f"({ctx.direction}).\n# Run it with:  domainbert fit --config {ctx.out / 'best.yaml'}\n"
        "# Swept values:\n" + "\n".join(lines) + "\n"
    )
    return header + body


def _save(fig, path: Path) -> None:
    """Save ``fig`` as PNG through a temporary file and a rename (mode by the umask)."""
    with atomic_file(path, what="the plot") as tmp:
        fig.savefig(tmp, dpi=110, bbox_inches="tight", format="png")


def write_plots(study: optuna.Study, out: Path, params: Sequence[str]) -> list[Path]:
    """Optimisation history, parameter importances and learning rate vs warm-up as PNG files in ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from optuna.visualization import matplotlib as vis

    complete = [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]
    if not complete:
        return []
    lr = next((p for p in params if p.endswith("learning_rate") or p.endswith(".lr")), None)
    warm = next((p for p in params if "warmup" in _short(p)), None)
    pair = [lr, warm] if lr and warm else list(params[:2])
    plots = {"history.png": lambda: vis.plot_optimization_history(study)}
    if len(complete) >= 2 and len(params) > 1:
        fanova = optuna.importance.FanovaImportanceEvaluator(n_trees=32, seed=0)
        plots["importances.png"] = lambda: vis.plot_param_importances(study, evaluator=fanova)
        plots["contour_" + "_".join(_short(p) for p in pair) + ".png"] = lambda: vis.plot_contour(study, params=pair)
    plots["slice.png"] = lambda: vis.plot_slice(study, params=pair if len(params) > 1 else list(params))
    written = []
    for name, draw in plots.items():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ax = draw()
            fig = np.atleast_1d(ax).flat[0].figure
            _save(fig, out / name)
            plt.close(fig)
            written.append(out / name)
        except Exception as err:  # noqa: BLE001 - a plot that cannot be drawn must not lose the results
            log.warning("could not draw %s: %s", name, err)
    return written


def report(ctx: ReportContext, plots: bool = True) -> Path:
    """Print the table, then write ``trials.csv``, ``best.yaml`` and the plots into the sweep folder.

    Args:
        ctx: the study and what the report says of it.
        plots: whether to draw the PNG plots.

    Returns:
        The path of ``best.yaml``.

    Raises:
        DomainBertError: when no trial completed.
    """
    study, out = ctx.study, ctx.out
    print("\n" + trials_table(study), flush=True)
    try:
        atomic_write_text(out / "trials.csv", study.trials_dataframe().to_csv(index=False))
    except Exception as err:  # noqa: BLE001 - a table that cannot be written must not lose best.yaml
        log.warning("could not write trials.csv: %s", err)
    try:
        best = study.best_trial
    except ValueError:
        raise DomainBertError(f"no trial of study '{ctx.name}' completed; see the errors in the table") from None
    path = out / "best.yaml"
    atomic_write_text(path, best_config(ctx, best))
    pngs = write_plots(study, out, [p.path for p in ctx.params]) if plots else []
    shown = ", ".join(f"{k}={_fmt(v)}" for k, v in best.params.items())
    print(f"\n[sweep] best trial #{best.number}: {ctx.metric}={best.value:.6g} with {shown}", flush=True)
    print(f"[sweep] wrote {path}" + (f" and {len(pngs)} plot(s) in {out}" if pngs else ""), flush=True)
    print(f"[sweep] run it with:  domainbert fit --config {path}", flush=True)
    return path
