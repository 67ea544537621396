"""A pretraining stage of the pipeline (DAPT, TAPT, contrastive): one fit from a starting model, its export."""

from __future__ import annotations

from domainbert.pipeline.strategies.base import Candidate, Context, chained, stage_config


def pretrain(
    ctx: Context, strategy, settings, start: Candidate, data: list[str], name: str, default: str = "dapt"
) -> Candidate:
    """Fit stage ``strategy.name`` from ``start``'s model on ``data``; the candidate its export is.

    Args:
        ctx: the run.
        strategy: the strategy (its ``name`` is the stage's, its ``builds_on`` the stages it reruns after).
        settings: its settings: ``config`` (None: ``stages/<default>.yaml``) and ``args`` (overrides, last).
        start: the output it starts from (the baseline's candidate: the base model).
        data: the ``--data.*`` overrides that name its training text.
        name: its own part of the candidate's name, chained after ``start``'s (``dapt``, ``vocab+dapt``).
        default: the built-in stage config's name.
    """
    args = ["--model.init_from", start.model, *data, *settings.args]
    config = stage_config(settings, default)
    record = ctx.runner.fit(strategy.name, config, args, after=strategy.builds_on)
    stages = [*start.stages, strategy.name]
    return Candidate(chained(start, name), strategy.name, model=record["hf"], stages=stages)
