"""Labels and probabilities of texts from a classifier that :func:`~domainbert.deploy.load.load_variant` loaded."""

from __future__ import annotations

import torch
from torch import nn

from domainbert.core.prediction import in_file_order
from domainbert.deploy.bench import TorchRunner, length_sorted_batches, served_runner
from domainbert.errors import DomainBertError


def classify(
    model: nn.Module,
    tokenizer,
    texts: str | list[str],
    batch_size: int = 32,
    max_length: int | None = None,
    threshold: float = 0.5,
    bf16: bool | None = None,
) -> list[dict]:
    """The predicted label and every label's probability, per text, as ``domainbert predict`` writes them.

    Works on any variant :func:`~domainbert.deploy.load.load_variant` returns (``fp32``, ``bf16``, ``int8``,
    ``onnx``, ``onnx_int8``) and on a fine-tuning run's ``<run>/hf``. By default a model answers as its training
    stage's test pass scored it (the scores the pipeline's report gives): texts cut at the training length, in the
    precision it was scored in, in batches of rows of similar length (:func:`~domainbert.deploy.bench
    .length_sorted_batches`, the order of the test pass; the rows come back in the order of ``texts``). Texts longer
    than the length are truncated (a model fine-tuned with ``data.long_text: windows`` reads them in windows only
    through ``domainbert predict``).

    Args:
        model: the classifier (its ``config.id2label`` names the labels).
        tokenizer: its tokenizer.
        texts: the texts to classify; a single string is one text (as ``pipeline()`` takes it), which gets a list
            of one row.
        batch_size: texts per forward pass.
        max_length: longest input in tokens; None: the training length the export records (:mod:`domainbert.core
            .scoring`; an export without a record: the tokenizer's ``model_max_length``), within the model's
            position embeddings.
        threshold: a multi-label model's probability from which a label is predicted.
        bf16: run in bf16 (float32 weights under bf16 autocast, bf16 weights as they are); None: where the
            weights are bf16 (the ``bf16`` variant), or where the export records a bf16 scoring and this machine runs
            bf16 natively (else float32).

    Returns:
        One dict per text, in order: ``{"label": name, "probabilities": {name: p}}`` (a multi-label model:
        ``"labels": [names]``), probabilities rounded to 6 digits.

    Raises:
        DomainBertError: ``texts`` holds something other than strings, or ``batch_size`` is below 1.

    Examples:
        A model exported by ``domainbert fit`` (``<run>/hf``) or one of ``domainbert export``'s variants
        (``<out>/int8``, ``<out>/onnx``...); here a tiny random classifier
        (:func:`~domainbert.deploy.sample.sample_classifier`), so its labels are a coin toss:

        >>> import tempfile
        >>> from domainbert.deploy import classify, load_variant
        >>> from domainbert.deploy.sample import sample_classifier
        >>> tmp = tempfile.TemporaryDirectory()
        >>> model, tokenizer, info = load_variant(sample_classifier(tmp.name, labels=["graphics", "network"]))
        >>> rows = classify(model, tokenizer, ["a library for fonts", "a daemon that serves files"])
        >>> len(rows), sorted(rows[0])
        (2, ['label', 'probabilities'])
        >>> rows[0]["label"] in model.config.id2label.values()
        True
        >>> round(sum(rows[0]["probabilities"].values()), 3)
        1.0

        One string is one text, and gets a list of one row (as ``pipeline()`` gives for one string):

        >>> one = classify(model, tokenizer, "a library for fonts")
        >>> len(one), one[0] == rows[0]
        (1, True)

        A multi-label model (``problem_type`` ``multi_label_classification``) gets every label whose probability
        reaches ``threshold``, as ``labels``:

        >>> model.config.problem_type = "multi_label_classification"
        >>> row = classify(model, tokenizer, ["a library for fonts"], threshold=0.0)[0]
        >>> row["labels"], sorted(row)
        (['graphics', 'network'], ['labels', 'probabilities'])
        >>> tmp.cleanup()
    """
    from domainbert.core.scoring import scored_length

    texts = _texts(texts)
    if batch_size < 1:
        raise DomainBertError(f"batch_size={batch_size}: expected at least 1")
    if not texts:
        return []
    config = model.config
    names = [config.id2label[i] for i in sorted(config.id2label)]
    runner = served_runner(model) if bf16 is None else TorchRunner(model, bf16=bf16)
    multi = getattr(config, "problem_type", None) == "multi_label_classification"
    order, rows = [], []
    for ids, batch in length_sorted_batches(tokenizer, texts, batch_size, scored_length(config, tokenizer, max_length)):
        logits = runner(batch)
        probs = (torch.sigmoid(logits) if multi else torch.softmax(logits, -1)).tolist()
        order += ids
        rows += [_row(p, names, multi, threshold) for p in probs]
    return in_file_order(rows, order)


def _texts(texts) -> list[str]:
    """``texts`` as a list of strings (a single string: a list of one); anything else is refused, naming it."""
    if isinstance(texts, str):
        return [texts]
    if isinstance(texts, (bytes, dict)) or not hasattr(texts, "__iter__"):
        raise DomainBertError(f"classify: texts: expected a string or a list of strings, got {type(texts).__name__}")
    texts = list(texts)
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise DomainBertError(f"classify: texts[{i}]: expected a string, got {type(text).__name__}")
    return texts


def _row(p: list[float], names: list[str], multi: bool, threshold: float) -> dict:
    """One text's row: its label (or labels over ``threshold``) and every label's probability."""
    row: dict = (
        {"labels": [n for n, v in zip(names, p, strict=True) if v >= threshold]}
        if multi
        else {"label": names[max(range(len(p)), key=p.__getitem__)]}
    )
    row["probabilities"] = {n: round(v, 6) for n, v in zip(names, p, strict=True)}
    return row
