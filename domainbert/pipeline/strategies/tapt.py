"""Task-adaptive pretraining (TAPT): masked-LM continued pretraining on the task's own training text."""

from __future__ import annotations

from domainbert.pipeline.specs import PretrainSpec
from domainbert.pipeline.stage import data
from domainbert.pipeline.strategies.base import Candidate, Context, Strategy
from domainbert.pipeline.strategies.pretrain import pretrain


class Tapt(Strategy, name="tapt", kind="start", order=40, settings=PretrainSpec, builds_on=("dapt", "vocab")):
    """TAPT: masked-LM continued pretraining on the task's training text, after DAPT (or vocab) when they run.

    Task-adaptive pretraining on the task's own text (after DAPT when both run). Off by default.
    """

    def default(self) -> PretrainSpec:
        return PretrainSpec(enabled=False)

    def run(self, ctx: Context, settings: PretrainSpec) -> list[Candidate]:
        """One masked-LM fit (the DAPT stage config by default); its candidate is ``tapt`` or ``<upstream>+tapt``."""
        start = ctx.upstream(self.builds_on)
        values = data(train=ctx.task.train, text_column=ctx.task.text_column)
        return [pretrain(ctx, self, settings, start, values, "tapt")]


STRATEGY = Tapt()
