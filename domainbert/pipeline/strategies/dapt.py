"""Domain-adaptive pretraining (DAPT): masked-LM continued pretraining on the domain corpus."""

from __future__ import annotations

from domainbert.pipeline.specs import PretrainSpec
from domainbert.pipeline.strategies.base import Candidate, Context, Strategy
from domainbert.pipeline.strategies.pretrain import pretrain


class Dapt(
    Strategy,
    name="dapt",
    kind="start",
    order=30,
    settings=PretrainSpec,
    needs=("corpus",),
    builds_on=("select", "vocab"),
):
    """DAPT: masked-LM continued pretraining on the corpus (or select's curated corpus), from vocab's model if any.

    Domain-adaptive pretraining on the corpus (or the curated corpus). Runs by default: 400 masked-LM steps with
    the built-in stages/dapt.yaml; `enabled: false` to skip it.
    """

    def run(self, ctx: Context, settings: PretrainSpec) -> list[Candidate]:
        """One masked-LM fit; its candidate is ``dapt``, ``knn-dapt`` after select, ``vocab+...`` after vocab."""
        start, curated = ctx.upstream(("vocab",)), ctx.output("select")
        corpus, column = (curated.data["corpus"], curated.data["column"]) if curated else (ctx.corpus, None)
        data = ["--data.train", corpus, "--data.text_column", column or ctx.corpus_text_column]
        own = (curated.data.get("prefix", "") if curated else "") + "dapt"
        made = pretrain(ctx, self, settings, start, data, own)
        made.stages = [*(curated.stages if curated else []), *made.stages]
        return [made]


STRATEGY = Dapt()
