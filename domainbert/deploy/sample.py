"""A tiny random classifier folder, written offline in a blink: what the loading examples run on.

The docstring examples of :func:`~domainbert.deploy.load.load_variant`, :func:`~domainbert.deploy.classifier.classify`
and of export formats load it; it is also a quick way to try a format's writer and loader (a plugin's) without
downloading a model. Its weights are random, so its predictions mean nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

#: The words of the sample tokenizer's vocabulary (anything else is spelled out in letters).
WORDS = ("a", "an", "the", "for", "of", "and", "to", "that", "library", "daemon", "files", "fonts", "serves")
#: The sample classifier's labels.
LABELS = ("graphics", "network")


def sample_classifier(
    folder: str | os.PathLike, labels: tuple[str, ...] | list[str] = LABELS, seed: int = 0, layers: int = 1
) -> Path:
    """Write a tiny random BERT classifier and its tokenizer into ``folder`` (made if missing); return its path.

    The folder is what ``domainbert fit`` exports (``<run>/hf``): a Hugging Face folder (``config.json``,
    safetensors weights, a WordPiece tokenizer of :data:`WORDS` and the lowercase letters) whose config names the
    labels (``id2label``). The same ``seed`` writes the same weights; the global random state is left as it was.

    Args:
        folder: where to write it.
        labels: the label names, in id order.
        seed: the seed of the random weights.
        layers: encoder layers (hidden size 16, 2 heads).

    Returns:
        ``folder`` as a :class:`~pathlib.Path`.

    Examples:
        >>> import tempfile
        >>> from domainbert.deploy.sample import sample_classifier
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     folder = sample_classifier(tmp, labels=["bug", "feature", "question"])
        ...     sorted(p.name for p in folder.iterdir())
        ['config.json', 'model.safetensors', 'tokenizer.json', 'tokenizer_config.json']
    """
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    from domainbert.core.quiet import quiet_transformers
    from domainbert.errors import DomainBertError

    labels = list(labels)
    if len(labels) < 2 or len(set(labels)) != len(labels):
        raise DomainBertError(f"sample_classifier: labels: expected two or more distinct names, got {labels}")
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, *letters, *(f"##{c}" for c in letters)]
    vocab = {t: i for i, t in enumerate(dict.fromkeys(tokens))}
    tokenizer = BertTokenizer(vocab=vocab, model_max_length=128)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=16,
        num_hidden_layers=layers,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=128,
        pad_token_id=0,
        id2label=dict(enumerate(labels)),
        label2id={name: i for i, name in enumerate(labels)},
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = BertForSequenceClassification(config).eval()
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    with quiet_transformers():
        model.save_pretrained(path)
        tokenizer.save_pretrained(path)
    return path
