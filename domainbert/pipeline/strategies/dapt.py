"""Domain-adaptive pretraining (DAPT): masked-LM continued pretraining on the domain corpus."""

from __future__ import annotations

from domainbert.pipeline.specs import DaptSpec
from domainbert.pipeline.stage import data
from domainbert.pipeline.strategies.base import Candidate, Context, Gate, Strategy
from domainbert.pipeline.strategies.pretrain import pretrain

#: Why ``enabled: auto`` skips DAPT: the report's line and the pipeline's output.
NO_HEAD = (
    "not run: {model} ships no trained masked-LM head (a sentence embedder); its head would start untrained, and "
    "masked-LM adaptation never improved such a model measurably (docs/benchmarks/adaptation.md). "
    "dapt.enabled: true runs it anyway"
)


class Dapt(
    Strategy,
    name="dapt",
    kind="start",
    order=30,
    settings=DaptSpec,
    needs=("corpus",),
    builds_on=("select", "vocab"),
):
    """DAPT: masked-LM continued pretraining on the corpus (or select's curated corpus), from vocab's model if any.

    Domain-adaptive pretraining on the corpus (or the curated corpus). Runs by default (`enabled: auto`) when the
    base model ships a trained masked-LM head, or when select or vocab feed it: 400 masked-LM steps with the
    built-in stages/dapt.yaml, the task's probe watched. `enabled: true` runs it on any model, `false` never.
    """

    def run(self, ctx: Context, settings: DaptSpec) -> list[Candidate]:
        """One masked-LM fit; its candidate is ``dapt``, ``knn-dapt`` after select, ``vocab+...`` after vocab."""
        skipped = self.skip_reason(ctx, settings)
        if skipped:
            print(f"[dapt] {skipped}", flush=True)
            return [Candidate("dapt", self.name, offered=False, gate=Gate(open=False, skipped=skipped))]
        start, curated = ctx.upstream(("vocab",)), ctx.output("select")
        corpus, column = (curated.data["corpus"], curated.data["column"]) if curated else (ctx.corpus, None)
        values = data(train=corpus, text_column=column or ctx.corpus_text_column)
        own = (curated.data.get("prefix", "") if curated else "") + "dapt"
        made = pretrain(ctx, self, settings, start, values, own)
        made.stages = [*(curated.stages if curated else []), *made.stages]
        return [made]

    def skip_reason(self, ctx: Context, settings: DaptSpec) -> str | None:
        """Why ``enabled: auto`` does not run DAPT on this run (None: it runs)."""
        if settings.enabled != "auto" or any(ctx.enabled(name) for name in self.builds_on):
            return None
        from domainbert.core.mlm_head import trained_head

        return NO_HEAD.format(model=ctx.base_model) if trained_head(ctx.base_model) is False else None


STRATEGY = Dapt()
