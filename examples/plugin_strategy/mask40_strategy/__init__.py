"""An example pipeline strategy from another package: TAPT with 40% of the tokens masked instead of 15%.

Wettig et al. (2023, "Should You Mask 15% in Masked Language Modeling?") found higher masking rates train as well or
better. Installed, it is one more candidate of ``domainbert pipeline``, enabled in a config with::

    mask40:
      enabled: true
"""

from __future__ import annotations

from dataclasses import dataclass

from domainbert.pipeline.specs import PretrainSpec
from domainbert.pipeline.stage import data, merge, model
from domainbert.pipeline.strategies.base import Candidate, Context, Strategy
from domainbert.pipeline.strategies.pretrain import pretrain


@dataclass
class Mask40Spec(PretrainSpec):
    """TAPT at a higher masking rate: the DAPT stage config (or ``config``), ``args`` last, the task watched."""

    enabled: bool = False
    """Run this strategy."""
    mlm_probability: float = 0.4
    """The share of tokens masked."""


class Mask40(Strategy):
    """Mask40: masked-LM pretraining on the task's training text with 40% of the tokens masked (Wettig et al. 2023)."""

    name = "mask40"
    kind = "start"
    settings = Mask40Spec
    help = "mask40: TAPT with 40% of the tokens masked, from the base model (an example plugin). Off by default."

    def run(self, ctx: Context, settings: Mask40Spec) -> list[Candidate]:
        values = merge(
            data(train=ctx.task.train, text_column=ctx.task.text_column),
            model(mlm_probability=settings.mlm_probability),
        )
        return [pretrain(ctx, self, settings, ctx.baseline, values, self.name)]
