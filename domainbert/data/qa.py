"""Extractive question answering data in SQuAD format: question, context and answers per row.

``answers`` holds ``{"text": [...], "answer_start": [...]}`` (character offsets into the context);
the first answer is the training target and all of them count as gold for evaluation. Contexts
longer than ``max_length`` are split into overlapping windows (``stride`` tokens of overlap); a
window without the answer points at the first (CLS) token. Evaluation windows keep the character
offsets of their context tokens, so a predicted span maps back to answer text.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import datasets

from domainbert.data import token_cache
from domainbert.data.base import TaskDataModule
from domainbert.errors import DomainBertError


@dataclass
class QAEncoder:
    """Split (question, context) pairs into windows and find the answer's token span in each.

    Attributes:
        tokenizer: the connected fast tokenizer.
        question_column: the column with the question.
        context_column: the column with the context passage.
        answers_column: the column with ``{"text": [...], "answer_start": [...]}``.
        id_column: a column identifying each question, or None.
        max_length: tokens per window.
        stride: tokens of overlap between consecutive windows.
        keep_meta: keep per-window offsets, context, gold answers and ids (evaluation and predict).
    """

    tokenizer: Any
    question_column: str
    context_column: str
    answers_column: str
    id_column: str | None
    max_length: int
    stride: int
    keep_meta: bool

    def __call__(self, batch: dict[str, list], indices: list[int] | None = None) -> dict[str, list]:
        tok = self.tokenizer
        questions = [q.strip() for q in batch[self.question_column]]
        contexts = batch[self.context_column]
        enc = tok(
            questions,
            contexts,
            truncation="only_second",
            max_length=self.max_length,
            stride=self.stride,
            return_overflowing_tokens=True,
            return_offsets_mapping=True,
        )
        answers = batch.get(self.answers_column)
        out: dict[str, list] = {k: [] for k in ("start_positions", "end_positions")}
        meta: dict[str, list] = {k: [] for k in ("example", "offsets", "context", "gold", "id")}
        for i, offsets in enumerate(enc["offset_mapping"]):
            sample = enc["overflow_to_sample_mapping"][i]
            seq = enc.sequence_ids(i)
            ids = enc["input_ids"][i]
            cls = ids.index(tok.cls_token_id) if tok.cls_token_id in ids else 0
            start = end = cls
            ans = answers[sample] if answers is not None else None
            if ans and ans.get("text"):
                a_start = int(ans["answer_start"][0])
                a_end = a_start + len(ans["text"][0])
                ctx = [j for j, s in enumerate(seq) if s == 1]
                if ctx and offsets[ctx[0]][0] <= a_start and offsets[ctx[-1]][1] >= a_end:
                    start = next(j for j in ctx if offsets[j][1] > a_start)
                    end = next(j for j in reversed(ctx) if offsets[j][0] < a_end)
            out["start_positions"].append(start)
            out["end_positions"].append(end)
            if self.keep_meta:
                meta["example"].append(indices[sample] if indices is not None else sample)
                meta["offsets"].append([list(o) if seq[j] == 1 else None for j, o in enumerate(offsets)])
                meta["context"].append(contexts[sample])
                meta["gold"].append(list(ans["text"]) if ans else [])
                ident = batch[self.id_column][sample] if self.id_column and self.id_column in batch else None
                meta["id"].append(str(ident) if ident is not None else str(meta["example"][-1]))
        for key in tok.model_input_names:
            if key in enc:
                out[key] = enc[key]
        if self.keep_meta:
            out.update(meta)
            out["question"] = [questions[s] for s in enc["overflow_to_sample_mapping"]]
        return out


class QADataModule(TaskDataModule):
    """SQuAD-style extractive QA from JSONL, Parquet or ``datasets`` folders, in overlapping windows.

    A long context is cut into windows of ``max_length`` tokens (the question included) that overlap by ``stride``
    tokens; ``batch_size`` counts windows. QA names ``batch_size`` and ``max_length`` in its signature only for its
    own defaults; they are documented with the other shared options in :class:`~domainbert.data.base.TaskDataModule`.
    """

    tensor_keys = ("start_positions", "end_positions")

    def __init__(
        self,
        question_column: str = "question",
        context_column: str = "context",
        answers_column: str = "answers",
        id_column: str | None = "id",
        batch_size: int = 16,
        max_length: int = 384,
        stride: int = 128,
        **kwargs,
    ) -> None:
        """Configure the columns and windows.

        Args:
            question_column: the column with the question.
            context_column: the column with the context passage.
            answers_column: the column with ``{"text": [...], "answer_start": [...]}``.
            id_column: a column identifying each question (optional; the row number otherwise).
            stride: tokens of overlap between consecutive windows of a long context.
            **kwargs: the options every task takes (split files, batching...), documented in
                :class:`~domainbert.data.base.TaskDataModule`.
        """
        if not 0 <= stride < max_length:
            raise DomainBertError(f"data.stride={stride}: expected 0 <= stride < max_length ({max_length})")
        super().__init__(batch_size=batch_size, max_length=max_length, **kwargs)
        self.question_column = question_column
        self.context_column = context_column
        self.answers_column = answers_column
        self.id_column = id_column
        self.stride = stride
        self.label_column = answers_column

    def columns(self, split: str) -> list[str]:
        cols = [self.question_column, self.context_column]
        return cols if split == "predict" else cols + [self.answers_column]

    def check_labels(self, split: str) -> None:
        """Check every answer: the text must appear in the context at ``answer_start`` (naming the row)."""
        ds = self.raw(split)
        path = self.path(split)
        for row, (context, ans) in enumerate(zip(ds[self.context_column], ds[self.answers_column]), 1):
            if not isinstance(ans, dict) or "text" not in ans or "answer_start" not in ans:
                raise DomainBertError(
                    f"{path}: row {row}: column {self.answers_column!r} should be "
                    f'{{"text": [...], "answer_start": [...]}}, found {ans!r}'
                )
            if len(ans["text"]) != len(ans["answer_start"]):
                raise DomainBertError(
                    f"{path}: row {row}: answers have {len(ans['text'])} texts but "
                    f"{len(ans['answer_start'])} answer_start values"
                )
            for text, start in zip(ans["text"], ans["answer_start"]):
                start = int(start)
                if context[start : start + len(text)] != text:
                    raise DomainBertError(
                        f"{path}: row {row}: answer {text!r} is not at character {start} of the context "
                        f"(found {context[start : start + len(text)]!r})"
                    )

    def check_rows(self, split: str, ds: datasets.Dataset) -> None:
        self.check_text(split, ds, (self.question_column, self.context_column), blank=False)

    def encoder(self, split: str) -> Callable[[dict], dict]:
        return QAEncoder(
            self.tokenizer,
            self.question_column,
            self.context_column,
            self.answers_column,
            self.id_column,
            self.max_length,
            self.stride,
            keep_meta=split != "train",
        )

    def encode(self, split: str, ds: datasets.Dataset):
        return token_cache.tokenize(
            ds,
            self.encoder(split),
            self.path(split),
            batched=True,
            with_indices=True,
            num_proc=self.num_proc,
            remove_columns=ds.column_names,
            desc=f"Tokenizing {split}",
        )
