"""``domainbert pseudolabel``: label domain-corpus documents with a fine-tuned classifier, for self-training.

    domainbert pseudolabel --model runs/.../hf --corpus corpus.txt.gz --task train.jsonl --out runs/pseudo

Self-training (Du et al. 2021, *Self-training Improves Pre-training for Natural Language Understanding*; Xie et
al. 2020, *Noisy Student*): a classifier fine-tuned on the task (the teacher) labels unlabelled in-domain text,
and a fresh model is fine-tuned on the task's rows plus the most confidently labelled documents. It turns the
domain corpus into more task data without moving the encoder away from the geometry it was pretrained with.

Several teachers (``--model '[a/hf, b/hf, c/hf]'``, e.g. the baselines of several seeds) label as an ensemble: their
class probabilities are averaged, which makes fewer confident mistakes than any one of them (Hinton et al. 2015;
the ensemble's gain is then distilled into a single model).

Per class, the ``ratio`` × (that class's training rows) documents the teacher labels most confidently are kept,
so the added rows follow the task's class balance and no class is flooded by the corpus's most common kind of
document. ``<out>/train.jsonl`` holds the task's training rows, then the pseudo-labelled ones (with the task's
text and label columns); ``<out>/result.json`` holds the counts.

With ``--soft true`` the teachers' whole distribution is kept instead (knowledge distillation with the corpus as
the transfer set; Hinton et al. 2015, Stanton et al. 2021): ``ratio`` × (the task's rows) documents of the seeded
sample are labelled, none is filtered by confidence, and each carries its class ``probabilities`` (label name ->
probability) beside its most probable label; the task's own rows carry their label as one-hot probabilities.
Train on them with ``--data.soft_label_column probabilities``.
"""

from __future__ import annotations

import collections
import json
import random
import time
from collections.abc import Sequence

import torch

from domainbert.errors import DomainBertError


@torch.no_grad()
def class_probabilities(model, tokenizer, texts: Sequence[str], batch_size: int = 64, max_length: int = 128):
    """Softmax outputs ``[len(texts), num_labels]`` of a sequence classifier, batched in order of length."""
    from domainbert.core.embed import sorted_batches
    from domainbert.core.hardware import auto_precision

    device = next(model.parameters()).device
    bf16 = auto_precision(device.type) == "bf16-mixed"
    model.eval()
    probs = torch.empty(len(texts), model.config.num_labels)
    for ids, inputs in sorted_batches(tokenizer, texts, batch_size, max_length, device):
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            probs[ids] = model(**inputs).logits.float().softmax(-1).cpu()
    return probs


def most_confident(probs: torch.Tensor, quota: Sequence[int]) -> list[tuple[int, int]]:
    """``(row, class)`` pairs: for each class ``c``, the ``quota[c]`` rows predicted ``c`` with the highest probability.

    Rows come out class by class, most confident first; a class predicted fewer times than its quota keeps all
    of its rows.
    """
    confidence, predicted = probs.max(-1)
    picked = []
    for c, k in enumerate(quota):
        rows = torch.nonzero(predicted == c).flatten()
        rows = rows[torch.argsort(-confidence[rows], stable=True)][: max(0, int(k))]
        picked += [(int(r), c) for r in rows]
    return picked


def _unlabelled(corpus: str, column: str, exclude: set[str], max_documents: int | None, seed: int) -> list[str]:
    """The corpus's unique documents that are not task texts; a seeded sample of ``max_documents`` of them."""
    from domainbert.data.corpus import documents

    docs = [d for d in dict.fromkeys(documents(corpus, column)) if d not in exclude]
    if max_documents and len(docs) > max_documents:
        docs = random.Random(seed).sample(docs, max_documents)
    return docs


def load_classifier(path: str):
    """The teacher at ``path``: a sequence classifier whose head's weights are in its checkpoint.

    ``transformers`` fills the weights a checkpoint lacks with random numbers; a pretrained encoder (a base model,
    a DAPT export) loaded as a classifier would label the corpus with a random head. Such a teacher is refused.

    Raises:
        DomainBertError: the checkpoint lacks the classification head's weights (naming them).
    """
    from transformers import AutoModelForSequenceClassification

    from domainbert.core.hf import head_missing, load_model

    model, missing = load_model(AutoModelForSequenceClassification, path)
    if head := head_missing(model, missing):
        raise DomainBertError(
            f"pseudolabel: the teacher {path} has no trained classification head (its checkpoint lacks "
            f"{', '.join(head[:4])}, which would be random): give the hf/ export of a fine-tuning run on the task"
        )
    return model


def check_teachers(models: Sequence[str]) -> None:
    """Raise before any document is read unless every teacher has a trained head (see :func:`load_classifier`)."""
    for path in models:
        load_classifier(path)  # one teacher in memory at a time: the model is dropped at once


def ensemble_probabilities(models: Sequence[str], texts: Sequence[str], max_length: int = 128) -> torch.Tensor:
    """The teachers' class probabilities on ``texts``, averaged; every teacher must have the same label names.

    Raises:
        DomainBertError: a teacher without a trained head, or with other labels than the first.
    """
    from domainbert.core.hf import load_tokenizer
    from domainbert.distill.teacher import teacher_labels

    total, names = None, None
    for path in models:
        teacher = load_classifier(path)
        labels = teacher_labels(teacher.config)
        if names is not None and labels != names:
            raise DomainBertError(f"pseudolabel: teacher {path} has labels {labels}; {models[0]} has {names}")
        probs = class_probabilities(teacher, load_tokenizer(path), texts, max_length=max_length)
        total, names = (probs if total is None else total + probs), labels
        del teacher
    return total / len(models)


def label_names(model: str) -> list[str]:
    """A sequence classifier's label names, in id order, read from its config alone."""
    from domainbert.core.hf import load_config
    from domainbert.core.models_local import resolve_local_alias
    from domainbert.distill.teacher import teacher_labels

    config = load_config(resolve_local_alias(model))  # a mean-pooling export too, without its own code
    return teacher_labels(config)


def pseudolabel(
    model: str | list[str],
    corpus: str,
    task: str,
    out: str,
    ratio: float = 2.0,
    max_documents: int | None = 20000,
    text_column: str = "text",
    label_column: str = "label",
    corpus_text_column: str = "text",
    max_length: int = 128,
    seed: int = 0,
    soft: bool = False,
) -> dict:
    """Write the task's rows plus confidently pseudo-labelled corpus documents to ``<out>/train.jsonl``.

    Args:
        model: the teacher: a fine-tuned single-label sequence classifier (an ``hf/`` export), or a list of
            them with the same labels, whose averaged probabilities label the documents.
        corpus: the unlabelled domain corpus (files, globs or folders; ``.txt`` one document a line).
        task: the task's training rows; documents equal to one of its texts are never added.
        out: the output folder: new, empty or domainbert's; never the task's or the corpus's folder.
        ratio: pseudo-labelled rows per class, as a multiple of that class's training rows (``soft``: in all, as a
            multiple of the task's rows).
        max_documents: label a seeded random sample of at most this many corpus documents (None: all).
        text_column: the task file's text column (the output uses it too).
        label_column: the task file's label column (the output uses it too).
        corpus_text_column: the corpus's text column (plain text files have ``text``).
        max_length: truncation length in tokens.
        seed: seed of the corpus sample.
        soft: keep every labelled document with the teachers' averaged class probabilities in a ``probabilities``
            column (soft targets for ``data.soft_label_column``), instead of the most confident ones per class.

    Raises:
        DomainBertError: ``out`` is a file, a folder of the user's, holds an input or cannot be written (checked
            first); a teacher without a trained classification head; task labels the teacher does not predict.
    """
    from domainbert.adapt.outputs import claim_output_folder, input_paths
    from domainbert.adapt.probe_cmd import read_split
    from domainbert.core.files import atomic_write_text

    teachers = [model] if isinstance(model, str) else list(model)
    if not teachers:
        raise DomainBertError("pseudolabel: --model names no teacher; expected one or more hf/ exports")
    if ratio <= 0:
        raise DomainBertError(f"pseudolabel: ratio={ratio}; expected a positive multiple of each class's rows")
    folder = claim_output_folder("pseudolabel", out, input_paths(teachers, corpus, task))  # before any work
    t0 = time.time()
    texts, labels = read_split(task, text_column, None, label_column, None)
    names = _teacher_labels(teachers, task, labels)
    docs = _unlabelled(corpus, corpus_text_column, set(texts), _sample_size(max_documents, ratio, texts, soft), seed)
    if not docs:
        raise DomainBertError(f"pseudolabel: no corpus document in {corpus} besides the task's own texts")
    probs = ensemble_probabilities(teachers, docs, max_length=max_length)
    own = [{text_column: t, label_column: y} for t, y in zip(texts, labels)]
    if soft:  # every row has the column (gold rows one-hot), so any chunk of the file has the same columns
        picked = [(r, int(c)) for r, c in enumerate(probs.argmax(-1).tolist())]
        added = [soft_row(docs[r], names, probs[r], text_column, label_column) for r in range(len(docs))]
        own = [{**row, "probabilities": {n: float(n == row[label_column]) for n in names}} for row in own]
    else:
        counts = collections.Counter(labels)
        picked = most_confident(probs, [round(ratio * counts[n]) for n in names])
        added = [{text_column: docs[r], label_column: names[c]} for r, c in picked]
    train = folder / "train.jsonl"
    atomic_write_text(train, "".join(json.dumps(row) + "\n" for row in [*own, *added]))
    per_class = collections.Counter(names[c] for _, c in picked)
    result = {
        "train": str(train),
        "task_rows": len(texts),
        "pseudo_rows": len(added),
        "labelled_documents": len(docs),
        "teachers": teachers,
        "soft": soft,
        "per_class": {n: per_class.get(n, 0) for n in names},
        "seconds": round(time.time() - t0, 1),
    }
    atomic_write_text(folder / "result.json", json.dumps(result, indent=2) + "\n")
    print(
        f"pseudolabel: {len(added)} of {len(docs)} corpus documents labelled by {len(teachers)} teacher(s) -> {train}"
    )
    return result


def _teacher_labels(teachers: list[str], task: str, labels: list[str]) -> list[str]:
    """The teachers' label names, after checking the teachers and that they predict every label of ``task``."""
    check_teachers(teachers)
    names = label_names(teachers[0])
    unknown = sorted(set(labels) - set(names))
    if unknown:
        raise DomainBertError(
            f"pseudolabel: {task} has labels {unknown} that the teacher {teachers[0]} does not predict"
        )
    return names


def _sample_size(max_documents: int | None, ratio: float, texts: list[str], soft: bool) -> int | None:
    """How many corpus documents to label: ``max_documents``; with ``soft``, at most ratio x the task's rows."""
    if not soft:
        return max_documents
    wanted = round(ratio * len(texts))  # every labelled document is kept
    if wanted == 0:
        raise DomainBertError(f"pseudolabel: ratio={ratio} of {len(texts)} task rows asks for no corpus document")
    return min(max_documents, wanted) if max_documents else wanted


def soft_row(text: str, names: Sequence[str], probs: torch.Tensor, text_column: str, label_column: str) -> dict:
    """One soft-labelled row: the text, its most probable label, and every label's probability (6 decimals)."""
    values = [round(float(v), 6) for v in probs]
    best = max(range(len(values)), key=values.__getitem__)
    return {text_column: text, label_column: names[best], "probabilities": dict(zip(names, values))}


def main(argv: list[str] | None = None) -> None:
    """``domainbert pseudolabel``; ``--help`` lists every option."""
    from domainbert.cli.tool_cli import run_function

    run_function(pseudolabel, argv, prog="domainbert pseudolabel", description=__doc__.split("\n\n")[0])
