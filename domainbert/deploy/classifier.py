"""Labels and probabilities of texts from a classifier that :func:`~domainbert.deploy.load.load_variant` loaded."""

from __future__ import annotations

import torch
from torch import nn

from domainbert.deploy.bench import encode, model_inputs


def classify(
    model: nn.Module,
    tokenizer,
    texts: list[str],
    batch_size: int = 32,
    max_length: int | None = None,
    threshold: float = 0.5,
) -> list[dict]:
    """The predicted label and every label's probability, per text, as ``domainbert predict`` writes them.

    Works on any variant :func:`~domainbert.deploy.load.load_variant` returns (``fp32``, ``bf16``, ``int8``,
    ``onnx``, ``onnx_int8``) and on a fine-tuning run's ``<run>/hf``. Texts longer than ``max_length`` tokens are
    truncated (a model fine-tuned with ``data.long_text: windows`` reads them in windows only through
    ``domainbert predict``).

    Args:
        model: the classifier (its ``config.id2label`` names the labels).
        tokenizer: its tokenizer.
        texts: the texts to classify.
        batch_size: texts per forward pass.
        max_length: longest input in tokens; None: the model's position limit (the tokenizer's, if lower).
        threshold: a multi-label model's probability from which a label is predicted.

    Returns:
        One dict per text, in order: ``{"label": name, "probabilities": {name: p}}`` (a multi-label model:
        ``"labels": [names]``), probabilities rounded to 6 digits.

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

        A multi-label model (``problem_type`` ``multi_label_classification``) gets every label whose probability
        reaches ``threshold``, as ``labels``:

        >>> model.config.problem_type = "multi_label_classification"
        >>> row = classify(model, tokenizer, ["a library for fonts"], threshold=0.0)[0]
        >>> row["labels"], sorted(row)
        (['graphics', 'network'], ['labels', 'probabilities'])
        >>> tmp.cleanup()
    """
    from domainbert.core.families import max_positions

    config = model.config
    names = [config.id2label[i] for i in sorted(config.id2label)]
    limit = max_positions(config) or tokenizer.model_max_length
    length = min(max_length or limit, limit, tokenizer.model_max_length)
    multi = getattr(config, "problem_type", None) == "multi_label_classification"
    rows = []
    with torch.inference_mode():
        for batch in encode(tokenizer, list(texts), batch_size, length):
            logits = model(**model_inputs(model, batch)).logits.float()
            probs = (torch.sigmoid(logits) if multi else torch.softmax(logits, -1)).tolist()
            for p in probs:
                row: dict = (
                    {"labels": [n for n, v in zip(names, p, strict=True) if v >= threshold]}
                    if multi
                    else {"label": names[max(range(len(p)), key=p.__getitem__)]}
                )
                row["probabilities"] = {n: round(v, 6) for n, v in zip(names, p, strict=True)}
                rows.append(row)
    return rows
