"""Contrastive pretraining: unsupervised SimCSE on the domain corpus, a starting model for sentence embedders."""

from __future__ import annotations

from dataclasses import dataclass

from domainbert.pipeline.specs import PretrainSpec
from domainbert.pipeline.stage import data, merge, model
from domainbert.pipeline.strategies.base import Candidate, Context, Strategy
from domainbert.pipeline.strategies.pretrain import pretrain


@dataclass
class ContrastiveSpec(PretrainSpec):
    """Contrastive pretraining (``ContrastiveModule``): a fit config, overrides, the task watched. Off by default."""

    enabled: bool = False
    """Run this stage."""


class Contrastive(Strategy, name="contrastive", kind="start", order=50, settings=ContrastiveSpec, needs=("corpus",)):
    """Contrastive: unsupervised SimCSE on the corpus from the base model; it trains the pooled embedding itself.

    Unsupervised SimCSE continued pretraining on the corpus (built-in stages/contrastive.yaml, 400 steps), with
    the pooling fine-tuning uses; it keeps a sentence embedder's geometry. Off by default.
    """

    def run(self, ctx: Context, settings: ContrastiveSpec) -> list[Candidate]:
        """One ``ContrastiveModule`` fit from the base model; its export is candidate ``contrastive``."""
        from domainbert.pipeline.recipe import pooling

        values = merge(data(train=ctx.corpus, text_column=ctx.corpus_text_column), model(pooling=pooling(ctx)))
        return [pretrain(ctx, self, settings, ctx.baseline, values, "contrastive", default="contrastive")]


STRATEGY = Contrastive()
