"""Fine-tuning for extractive question answering, SQuAD style (``AutoModelForQuestionAnswering``).

A long context is split into windows by the datamodule; each window scores its best span
(start + end logit, start <= end, at most ``max_answer_length`` tokens, context tokens only); the
answer of a question is the best span over all its windows, cut from the context by character offsets
(:class:`AnswerCollector`, which QA distillation uses too).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

from domainbert.core.compat import attached_trainer
from domainbert.modules.finetune import FineTuneModule
from domainbert.modules.metrics import SquadExactMatch, SquadF1
from domainbert.modules.tasks import Task


def best_span(
    start_logits: Sequence[float],
    end_logits: Sequence[float],
    offsets: Sequence,
    max_answer_length: int = 30,
    n_best: int = 20,
) -> tuple[float, int, int] | None:
    """The best ``(score, start_char, end_char)`` of one window, or None when no context span is valid.

    Args:
        start_logits: per-token start scores of the window.
        end_logits: per-token end scores.
        offsets: per-token ``(start_char, end_char)`` in the context, None for tokens outside it.
        max_answer_length: longest answer, in tokens.
        n_best: candidates considered for each of start and end.
    """
    n = len(offsets)
    start_logits = torch.as_tensor(start_logits, dtype=torch.float32)[:n]
    end_logits = torch.as_tensor(end_logits, dtype=torch.float32)[:n]
    k = min(n_best, n)
    starts = start_logits.topk(k).indices.tolist()
    ends = end_logits.topk(k).indices.tolist()
    best = None
    for s in starts:
        if offsets[s] is None:
            continue
        for e in ends:
            if offsets[e] is None or e < s or e - s + 1 > max_answer_length:
                continue
            score = float(start_logits[s] + end_logits[e])
            if best is None or score > best[0]:
                best = (score, int(offsets[s][0]), int(offsets[e][1]))
    return best


class AnswerCollector:
    """Per question, the best span over its windows seen so far; SQuAD EM and F1 of the answers collected.

    Windows arrive in batches whose ``meta`` rows carry ``example`` (the question's number), ``offsets``,
    ``context``, ``gold``, ``id`` and ``question``, as :class:`domainbert.data.qa.QADataModule` writes them.
    """

    def __init__(self, max_answer_length: int = 30, n_best: int = 20) -> None:
        """Keep spans of at most ``max_answer_length`` tokens, from ``n_best`` start and end candidates."""
        self.max_answer_length = max_answer_length
        self.n_best = n_best
        self.answers: dict[int, dict] = {}

    def reset(self) -> None:
        """Forget every answer collected."""
        self.answers = {}

    def add(self, start_logits: torch.Tensor, end_logits: torch.Tensor, metas: Sequence[dict]) -> None:
        """Score each window's best span; keep it where it beats its question's best so far."""
        starts, ends = start_logits.float().cpu(), end_logits.float().cpu()
        for i, meta in enumerate(metas):
            span = best_span(starts[i], ends[i], meta["offsets"], self.max_answer_length, self.n_best)
            ex = int(meta["example"])
            prev = self.answers.get(ex)
            if prev is None:
                prev = self.answers[ex] = {
                    "score": float("-inf"),
                    "answer": "",
                    "gold": list(meta.get("gold") or []),
                    "id": meta.get("id"),
                    "question": meta.get("question"),
                    "context": meta.get("context"),
                }
            if span is not None and span[0] > prev["score"]:
                prev["score"], prev["answer"] = span[0], meta["context"][span[1] : span[2]]

    def pop(self, examples: Iterable[int]) -> list[dict]:
        """The answer rows of ``examples`` (id, question, ``answer``, ``score``, ``gold`` if any), forgotten here."""
        rows = []
        for ex in examples:
            a = self.answers.pop(ex)
            row = {"id": a["id"], "question": a["question"], "answer": a["answer"], "score": round(a["score"], 4)}
            if a["gold"]:
                row["gold"] = a["gold"]
            rows.append(row)
        return rows

    def compute(self) -> dict[str, torch.Tensor]:
        """``{"em": ..., "f1": ...}`` over the answers collected (SQuAD, as fractions); empty when there are none."""
        answers = list(self.answers.values())
        if not answers:
            return {}
        preds, golds = [a["answer"] for a in answers], [a["gold"] for a in answers]
        out = {}
        for name, metric in (("em", SquadExactMatch()), ("f1", SquadF1())):
            metric.update(preds, golds)
            out[name] = metric.compute()
        return out


class QuestionAnsweringModule(FineTuneModule):
    """Extractive QA: predict the answer's start and end tokens in the context.

    Logs ``train/loss``, ``val/loss``, ``val/em`` and ``val/f1`` (SQuAD exact match and token F1, as
    fractions), and the same under ``test/``. ``predict_step`` returns each question's fields plus
    ``answer`` and ``score``.
    """

    task = Task.QA

    def __init__(self, init_from: str, max_answer_length: int = 30, n_best: int = 20, **kwargs) -> None:
        """Load the checkpoint and put a span (start/end) head on it.

        Args:
            max_answer_length: longest answer considered, in tokens.
            n_best: start and end candidates considered per window.
            **kwargs: the options every fine-tuning module takes (learning rate, dropouts, LoRA...), documented
                with ``init_from`` in :class:`~domainbert.modules.finetune.FineTuneModule`.
        """
        super().__init__(init_from, **kwargs)
        self.init_model({})
        self.answers = AnswerCollector(max_answer_length, n_best)

    def forward(self, batch: dict):
        """The model output (with ``loss`` when the batch has start/end positions)."""
        kwargs = self.model_inputs(batch)
        if "start_positions" in batch:
            kwargs["start_positions"] = batch["start_positions"]
            kwargs["end_positions"] = batch["end_positions"]
        return self.model(**kwargs)

    def training_loss(self, batch: dict) -> torch.Tensor:
        """The span loss of a batch (the mean of the start and end cross-entropies)."""
        return self(batch).loss

    def collect(self, out, batch: dict) -> None:
        """Keep, per question, the best span over its windows seen so far."""
        self.answers.add(out.start_logits, out.end_logits, batch["meta"])

    def evaluate(self, batch: dict, stage: str) -> None:
        """Log the batch's loss; collect its windows' best spans."""
        out = self(batch)
        self.log(f"{stage}/loss", out.loss, batch_size=batch["input_ids"].shape[0], prog_bar=stage == "val")
        self.collect(out, batch)

    def start_evaluation(self, stage: str) -> None:
        """Start the epoch with no answers."""
        self.answers.reset()

    def end_evaluation(self, stage: str) -> None:
        """Log the epoch's exact match and F1 over its questions."""
        for name, value in self.answers.compute().items():
            self.log(f"{stage}/{name}", value, prog_bar=stage == "val")
        self.answers.reset()

    def predict_step(self, batch: dict, batch_idx: int, dataloader_idx: int = 0) -> list[dict]:
        """Answers of the questions whose last window is in this batch: id, question, ``answer``, ``score``.

        Windows of one question are consecutive, so a question is complete once a later question appears
        (or at the last batch).
        """
        self.collect(self(batch), batch)
        last = int(batch["meta"][-1]["example"])
        final = batch_idx + 1 >= self._predict_batches()
        return self.answers.pop(sorted(ex for ex in self.answers.answers if final or ex < last))

    def _predict_batches(self) -> int:
        trainer = attached_trainer(self)
        if trainer is None:
            return 1 << 62
        n = trainer.num_predict_batches
        return int(n[0] if isinstance(n, (list, tuple)) else n)
