"""``domainbert soup``: the uniform weight average of several fine-tuned classifiers, saved as one model.

    domainbert soup --models '[runs/a/hf, runs/b/hf, runs/c/hf]' --out runs/soup

A model soup (Wortsman et al. 2022, *Model soups: averaging weights of multiple fine-tuned models improves
accuracy without increasing inference time*): runs fine-tuned from the same pretrained model, with the same
recipe and different seeds, land in one basin of the loss, and the average of their weights is usually at least
as good as the best of them, at the inference cost of one model and no training at all.

Every model must have the same weights (names and shapes), class and labels in the same order. Floating-point
tensors are averaged; any other tensor (position ids) must be equal in all of them and is copied. The first
model, with the averaged weights, is saved with its tokenizer to ``--out`` (atomically: the folder appears
complete or not at all), beside ``soup.json`` (the models averaged, the seconds taken). A mean-pooling
classifier stays one: it loads back with the same pooling.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

import torch

from domainbert.errors import DomainBertError


def _labels(model) -> list[str]:
    """A classifier's label names in id order."""
    from domainbert.distill.teacher import teacher_labels

    return teacher_labels(model.config)


def _check_same(first, model, path: str, reference: str) -> None:
    """Raise unless ``model`` has ``first``'s class, labels, weight names and shapes (naming the first difference)."""
    if type(model) is not type(first):
        raise DomainBertError(
            f"soup: {path} is a {type(model).__name__}; {reference} is a {type(first).__name__} (another pooling?)"
        )
    if _labels(model) != _labels(first):
        raise DomainBertError(f"soup: {path} has labels {_labels(model)}; {reference} has {_labels(first)}")
    mine, theirs = model.state_dict(), first.state_dict()
    for key in sorted(set(mine) ^ set(theirs)):
        where, other = (path, reference) if key in mine else (reference, path)
        raise DomainBertError(f"soup: {where} has the weight {key!r}, which {other} lacks; models must match exactly")
    for key, tensor in theirs.items():
        if tuple(mine[key].shape) != tuple(tensor.shape):
            raise DomainBertError(
                f"soup: {path} has {key!r} of shape {tuple(mine[key].shape)}; {reference} has {tuple(tensor.shape)}"
            )


def average_state(models: Sequence[str]) -> tuple[torch.nn.Module, object]:
    """The first model with every floating-point weight replaced by the mean over ``models``, and its tokenizer.

    Models are loaded one at a time (the first, the running sums and one more in memory); sums are kept in
    float32 or wider.

    Raises:
        DomainBertError: a model whose class, labels, weight names or shapes differ from the first's, or a
            non-floating-point tensor that differs.
    """
    from transformers import AutoModelForSequenceClassification

    from domainbert.core.hf import load_model, load_tokenizer

    first, _ = load_model(AutoModelForSequenceClassification, models[0])
    state = first.state_dict()
    sums = {k: v.detach().to(torch.promote_types(v.dtype, torch.float32)).clone() for k, v in state.items()}
    for path in models[1:]:
        model, _ = load_model(AutoModelForSequenceClassification, path)
        _check_same(first, model, path, models[0])
        for key, tensor in model.state_dict().items():
            if tensor.is_floating_point():
                sums[key] += tensor.detach().to(sums[key].dtype)
            elif not torch.equal(tensor, state[key]):
                raise DomainBertError(f"soup: {path} has another {key!r} than {models[0]} (a tensor not averaged)")
        del model
    averaged = {k: (sums[k] / len(models)).to(v.dtype) if v.is_floating_point() else v for k, v in state.items()}
    first.load_state_dict(averaged)
    return first, load_tokenizer(models[0])


def soup(models: list[str], out: str) -> dict:
    """Average the weights of fine-tuned classifiers uniformly and save the result to ``out``.

    Args:
        models: two or more fine-tuned sequence classifiers (``hf/`` exports) of the same pretrained model, with
            the same labels (e.g. one recipe's runs with different seeds).
        out: the output folder: new, empty, or an earlier soup (replaced once the new one is complete); never
            one of ``models`` nor a folder holding one.

    Returns:
        ``soup.json``'s contents (``models``, ``seconds``) plus ``hf``: the output folder.

    Raises:
        DomainBertError: ``out`` is one of ``models``, holds one, is a folder of the user's or cannot be written
            (checked before any model is loaded); the models do not match.
    """
    from domainbert.adapt.outputs import check_output_dir, input_paths
    from domainbert.core.hf import export_hf

    models = [str(m) for m in models]
    if len(models) < 2:
        raise DomainBertError(f"soup: --models names {len(models)} model(s); a weight average needs two or more")
    check_output_dir("soup", out, input_paths(models))  # before any model is loaded
    t0 = time.time()
    model, tokenizer = average_state(models)
    record = {"models": models, "seconds": round(time.time() - t0, 1)}
    names = "\n".join(f"- `{m}`" for m in models)
    card = f"# Model soup\n\nThe uniform weight average (Wortsman et al. 2022) of {len(models)} models:\n\n{names}\n"
    extras = {"soup.json": json.dumps(record, indent=2) + "\n"}
    export_hf(model, tokenizer, out, source=models[0], card=card, extra_files=extras)
    print(f"soup: the weights of {len(models)} models averaged -> {out}")
    return {**record, "hf": str(out)}


def main(argv: list[str] | None = None) -> None:
    """``domainbert soup``; ``--help`` lists every option."""
    from domainbert.cli.tool_cli import run_function

    run_function(soup, argv, prog="domainbert soup", description=__doc__.split("\n\n")[0])
