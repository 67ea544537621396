"""Vocabulary extension: frequent domain words added to the tokenizer before pretraining (``domainbert vocab``)."""

from __future__ import annotations

from domainbert.errors import DomainBertError
from domainbert.pipeline.specs import VocabSpec
from domainbert.pipeline.strategies.base import Candidate, Context, Strategy


class Vocab(Strategy, name="vocab", kind="start", order=20, settings=VocabSpec, needs=("corpus",)):
    """Vocabulary extension: frequent domain words join the tokenizer; DAPT or TAPT then trains their new rows.

    Vocabulary extension before DAPT/TAPT (their candidates become vocab+dapt...). Off by default.
    """

    def check(self, ctx: Context, settings: VocabSpec) -> None:
        if not ctx.built_on(self.name):
            raise DomainBertError("pipeline: new vocabulary rows need pretraining: enable dapt or tapt with vocab")

    def run(self, ctx: Context, settings: VocabSpec) -> list[Candidate]:
        """``domainbert vocab extend`` into ``<out>/vocab/hf``; an intermediate model, not fine-tuned as it is."""
        folder = str(ctx.runner.out / "vocab" / "hf")
        options = {"model": ctx.base_model, "corpus": ctx.corpus, "top_k": settings.top_k}
        options.update(min_freq=settings.min_freq, text_column=ctx.corpus_text_column, out=folder, overwrite=True)
        model = ctx.runner.tool("vocab", "vocab extend", options, result=folder).result
        return [Candidate("vocab", self.name, model=model, stages=["vocab"], offered=False)]


STRATEGY = Vocab()
