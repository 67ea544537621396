"""A pretraining stage of the pipeline (DAPT, TAPT, contrastive), the task watched, and the gate on fine-tuning.

One fit from a starting model, the task watched while it trains (``ProbeWatch``), and the gate that decides
whether its model is worth fine-tuning.

**The gate** compares like with like: the stage's best probe (``probe_watch.json``'s ``best_score``, the step it
exported) against the base model's probe on the same protocol (the task's train and validation texts, mean pooling,
the probe's L2 strength chosen on validation at the watch's first check):

- a stage that starts from the base model: its own watch's step-0 score, which *is* the base model's;
- a stage that starts from another model (TAPT after DAPT, DAPT after vocab): the step-0 score of a stage of this
  run that started from the base model (kept in ``ctx.base_probe``), else the probe stage's validation
  score (``domainbert probe``: the same embedding, the same probe and choice of L2 strength), else none: the gate
  stays open and says why.

The gate opens when the best probe beats that base score by more than ``watch.margin`` (default 0); a closed gate
keeps the candidate from fine-tuning, and the report says so with both scores.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from domainbert.pipeline.specs import PretrainSpec, WatchSpec
from domainbert.pipeline.stage import StageConfig, callback, merge, model
from domainbert.pipeline.strategies.base import BASELINE, Candidate, Context, Gate, Run, chained, stage_config

if TYPE_CHECKING:
    from domainbert.cli.lightning_cli import ResolvedConfig

#: Checks per step budget when ``every_n_steps`` is not set: with a patience of 3, a stage that does not help the
#: task's probe stops within 3/16 of its steps.
CHECKS_PER_BUDGET = 16
#: Steps between checks for a fit without ``max_steps`` (an epoch budget) and no ``every_n_steps``.
FALLBACK_EVERY = 100


def pretrain(
    ctx: Context,
    strategy,
    settings: PretrainSpec,
    start: Candidate,
    values: dict[str, Any],
    name: str,
    default: str = "dapt",
) -> Candidate:
    """Fit stage ``strategy.name`` from ``start``'s model on ``values``, the task watched; the candidate its export is.

    Args:
        ctx: the run.
        strategy: the strategy (its ``name`` is the stage's, its ``builds_on`` the stages it reruns after).
        settings: its settings: ``config`` (None: ``stages/<default>.yaml``), ``args`` (overrides, last) and
            ``watch`` (a :class:`~domainbert.pipeline.specs.WatchSpec`; absent: the defaults).
        start: the output it starts from (the baseline's candidate: the base model).
        values: the config values that name its training text (``data(train=..., text_column=...)``, and any
            ``model`` arguments), merged over the stage config's.
        name: its own part of the candidate's name, chained after ``start``'s (``dapt``, ``vocab+dapt``).
        default: the built-in stage config's name.
    """
    watch = settings.watch
    config = StageConfig(stage_config(settings, default), merge(model(init_from=start.model), values))
    resolved = ctx.runner.resolve(strategy.name, config.then(settings.args))  # once: the watch reads its max_steps
    if watch.enabled:
        resolved = resolved.but(watch_callback(ctx, watch, max_steps(resolved)))
    record = ctx.runner.fit(strategy.name, resolved, after=strategy.builds_on)
    made = Candidate(chained(start, name), strategy.name, model=record.hf, stages=[*start.stages, strategy.name])
    if watch.enabled:
        made.gate = gate(ctx, strategy.name, read_watch(record), start, watch)
    return made


def watch_callback(ctx: Context, watch: WatchSpec, budget: int | None) -> dict[str, Any]:
    """The ``ProbeWatch`` callback entry (appended to the stage's ``trainer.callbacks``): the task, the schedule.

    Without ``watch.every_n_steps``, the checks' schedule comes from ``budget``, the stage's resolved
    ``trainer.max_steps`` (:func:`max_steps`).
    """
    task = ctx.task
    every = every_n_steps(budget) if watch.every_n_steps is None else watch.every_n_steps
    init = {"train": task.train, "val": task.val, "every_n_steps": every, "patience": watch.patience}
    init.update(metric=ctx.metric, text_column=task.text_column, text_pair_column=task.text_pair_column)
    return callback("domainbert.adapt.watch.ProbeWatch", **init, label_column=task.label_column)


def every_n_steps(budget: int | None) -> int:
    """Steps between checks for a stage of ``budget`` steps: ``budget // 16``, at least 1 (None: 100)."""
    return FALLBACK_EVERY if not budget or budget < 1 else max(1, budget // CHECKS_PER_BUDGET)


def max_steps(resolved: ResolvedConfig) -> int | None:
    """A resolved stage config's ``trainer.max_steps`` (None when it has none: -1, an epoch budget)."""
    found = resolved.values.get("trainer.max_steps")
    return found if isinstance(found, int) and not isinstance(found, bool) and found >= 0 else None


def read_watch(record: Run) -> dict | None:
    """The stage run's ``probe_watch.json`` (None when the watch wrote none: a fit that never trained)."""
    path = Path(record.run) / "probe_watch.json" if record.run else None
    if path is None or not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def gate(ctx: Context, stage: str, watched: dict | None, start: Candidate, watch: WatchSpec) -> Gate:
    """The gate's decision on stage ``stage``'s model (see the module's docstring), for the report.

    It holds ``open``, ``best`` and ``base`` (the two scores, or None), ``base_from`` (where the base's came from),
    ``margin``, ``summary`` (the watch's verdict), ``steps`` and ``why`` (when the gate could not compare).
    """
    if not watched or watched.get("best_score") is None:
        return Gate(open=True, why="the watch recorded no probe score", stage=stage)
    history = watched.get("history") or [{}]
    if start.name == BASELINE:
        base, base_from = history[0].get("score"), f"step 0 of {stage}"
        ctx.base_probe = ctx.base_probe or (base, base_from)
    else:
        base, base_from = base_probe(ctx)
    decision = Gate(stage=stage, best=watched["best_score"], base=base, base_from=base_from, margin=watch.margin)
    decision.summary, decision.steps = watched.get("summary"), [h.get("step") for h in history]
    if base is None:
        decision.why = "no score of the base model on the same protocol (enable probe)"
    elif not watch.gate:
        decision.why = "the gate is off (watch.gate: false)"
    else:
        decision.open = gate_open(watched["best_score"], base, watch.margin)
    return decision


def base_probe(ctx: Context) -> tuple[float | None, str | None]:
    """The base model's probe score for a stage that did not start from it: a base-started stage's, else the probe's."""
    if ctx.base_probe is not None:
        return ctx.base_probe
    entry = ctx.runner.state.get("probe") if "probe" in ctx.runner.called else None
    score = ((entry or {}).get("val") or {}).get(ctx.metric)
    return (score, "the probe stage") if score is not None else (None, None)


def gate_open(best: float, base: float, margin: float) -> bool:
    """Whether an adapted model's best probe ``best`` beats the base model's ``base`` by more than ``margin``."""
    return best - base > margin
