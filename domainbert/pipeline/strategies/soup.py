"""Seed soups: each candidate's fine-tuned seed runs averaged into one model, evaluated as it is."""

from __future__ import annotations

import dataclasses

from domainbert.pipeline.specs import SoupSpec
from domainbert.pipeline.stage import model
from domainbert.pipeline.strategies.base import (
    BASELINE,
    Candidate,
    Context,
    Run,
    Strategy,
    finetune_stage,
)

SUFFIX = " soup"
"""A soup's name is its candidate's plus this: ``baseline soup`` is the weight average of the baseline's seeds."""


def soup_stage(name: str) -> str:
    """The stage name of ``domainbert soup`` over candidate ``name``'s seed runs."""
    return f"soup-{name.replace('+', '-')}"


class Soup(Strategy, name="soup", kind="after", order=90, settings=SoupSpec):
    """Seed soups: the weight average of each candidate's seed runs (two or more seeds), validated as it is.

    Seed soups: each starting model's seed runs averaged into one model (no training), evaluated and compared
    like the others. On by default, but made only with two or more seeds.
    """

    def run(self, ctx: Context, settings: SoupSpec) -> list[Candidate]:
        """For every candidate with two or more exported runs (and not stopped early), ``<name> soup``.

        Stage ``soup-<name>`` runs ``domainbert soup`` on the seeds' exports; stage ``finetune-<name>-soup``
        validates and tests the soup as it is, with the fine-tuning stage's config and options (its pooling, its
        data) and no head refit (``--model.head_init null``: the soup's head is the average of the seeds' heads).
        """
        made = []
        for candidate in list(ctx.candidates):
            exported = [r for r in candidate.runs if r.hf]
            if len(exported) >= 2 and not candidate.one_model and candidate.stopped is None:
                made.append(_soup(ctx, candidate, exported))
        return made


def _soup(ctx: Context, candidate: Candidate, exported: list[Run]) -> Candidate:
    """Average ``exported`` (``candidate``'s seed runs) and evaluate the average: candidate ``<name> soup``."""
    from domainbert.pipeline.recipe import finetune_config

    runner, name = ctx.runner, candidate.name
    stage, folder = soup_stage(name), ctx.runner.out / soup_stage(name) / "hf"  # beside the stage's log.txt
    options = {"models": [r.hf for r in exported], "out": str(folder)}
    made = runner.tool(stage, "soup", options, result=str(folder), after=tuple(r.stage for r in exported)).result
    config = finetune_config(ctx, made, None).then(model(head_init=None))  # the seeds' heads, averaged: no refit
    evaluated = finetune_stage(name, None, kind="soup")
    run = runner.evaluate(evaluated, config, after=(stage,))
    return Candidate(
        name + SUFFIX,
        "soup",
        runs=[dataclasses.replace(run, kind="soup")],
        stages=[*candidate.stages, stage, evaluated],
        adapted=candidate.name != BASELINE,
        one_model=True,
    )


STRATEGY = Soup()
