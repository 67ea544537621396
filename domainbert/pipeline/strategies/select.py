"""Corpus curation: the corpus documents nearest the task's texts become DAPT's data (``domainbert select``)."""

from __future__ import annotations

from domainbert.errors import DomainBertError
from domainbert.pipeline.specs import SelectSpec
from domainbert.pipeline.strategies.base import Candidate, Context, Strategy


class Select(Strategy, name="select", kind="start", order=10, settings=SelectSpec, needs=("corpus",)):
    """Curated DAPT data (kNN): the corpus documents nearest the task's texts; DAPT reads them instead (knn-dapt).

    Curated DAPT data, the corpus documents nearest the task's texts (knn-dapt). Off by default.
    """

    def check(self, ctx: Context, settings: SelectSpec) -> None:
        if not ctx.built_on(self.name):
            raise DomainBertError("pipeline: select curates the DAPT data: enable dapt too (or disable select)")

    def run(self, ctx: Context, settings: SelectSpec) -> list[Candidate]:
        """``domainbert select`` into ``<out>/select``; an intermediate output: the curated corpus, no model."""
        task, folder = ctx.task, ctx.runner.out / "select"
        options = {"model": ctx.base_model, "corpus": ctx.corpus, "task": task.train, "k": settings.k}
        options.update(text_column=task.text_column, corpus_text_column=ctx.corpus_text_column, out=str(folder))
        if settings.max_documents:
            options["max_documents"] = settings.max_documents
        corpus = ctx.runner.tool("select", "select", options, result=str(folder)).value("corpus")
        data = {"corpus": corpus, "column": "text", "prefix": "knn-"}  # select writes {"text": ...}
        return [Candidate("select", self.name, stages=["select"], offered=False, data=data)]


STRATEGY = Select()
