"""TSDAE pretraining: the base model rebuilds each corpus text from the pooled embedding of what deletion left of it."""

from __future__ import annotations

from dataclasses import dataclass

from domainbert.pipeline.specs import PretrainSpec
from domainbert.pipeline.stage import data, merge, model
from domainbert.pipeline.strategies.base import Candidate, Context, Strategy
from domainbert.pipeline.strategies.pretrain import pretrain


@dataclass
class TsdaeSpec(PretrainSpec):
    """TSDAE pretraining (``TsdaeModule``): a fit config, overrides, the task watched. Off by default."""

    enabled: bool = False
    """Run this stage."""


class Tsdae(Strategy, name="tsdae", kind="start", order=55, settings=TsdaeSpec, needs=("corpus",)):
    """TSDAE: denoising auto-encoder pretraining on the corpus from the base model; it trains the pooled embedding.

    TSDAE continued pretraining on the corpus (built-in stages/tsdae.yaml): 60% of each text's tokens deleted,
    the text rebuilt by a decoder tied to the encoder from the pooled embedding alone, with the pooling
    fine-tuning uses. The task's probe is watched and gates fine-tuning. Off by default.
    """

    def run(self, ctx: Context, settings: TsdaeSpec) -> list[Candidate]:
        """One ``TsdaeModule`` fit from the base model; its export is candidate ``tsdae``."""
        from domainbert.pipeline.recipe import pooling

        values = merge(data(train=ctx.corpus, text_column=ctx.corpus_text_column), model(pooling=pooling(ctx)))
        return [pretrain(ctx, self, settings, ctx.baseline, values, "tsdae", default="tsdae")]


STRATEGY = Tsdae()
