"""Tiny random checkpoints (2 layers, hidden 32) for every supported family, built offline.

Each is a real ``save_pretrained`` folder: a config, random weights and a tokenizer trained on the
fixture corpus with ``tokenizers``, loaded by the code under test through ``from_pretrained`` exactly
as a downloaded checkpoint would be.
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import (
    AlbertConfig,
    AlbertTokenizer,
    AutoModelForMaskedLM,
    BertConfig,
    BertTokenizer,
    DistilBertConfig,
    DistilBertTokenizer,
    ElectraConfig,
    ElectraTokenizer,
    RobertaConfig,
    RobertaTokenizer,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CORPUS = FIXTURES / "corpus.txt"
FAMILIES = ("bert", "roberta", "albert", "distilbert", "electra")
VOCAB = 200


def _lines() -> list[str]:
    return CORPUS.read_text(encoding="utf-8").splitlines()


def wordpiece_vocab(size: int = VOCAB) -> dict[str, int]:
    """A WordPiece vocabulary trained on the fixture corpus (uncased), the same in every process.

    The trainer numbers the ``##`` continuation characters in hash-map order, which changes from process to
    process, and breaks ties between equally frequent merges by those numbers, so each pytest session used to
    get a different vocabulary (about one in sixteen left the tiny BERT unable to learn the fixture task in 80
    steps). Given up front, sorted, they fix both.
    """
    norm, pre = normalizers.BertNormalizer(lowercase=True), pre_tokenizers.BertPreTokenizer()
    lines = _lines()
    words = (word for line in lines for word, _ in pre.pre_tokenize_str(norm.normalize_str(line)))
    continuation = [f"##{c}" for c in sorted({c for word in words for c in word[1:]})]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer, tok.pre_tokenizer = norm, pre
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok.train_from_iterator(lines, trainers.WordPieceTrainer(vocab_size=size, special_tokens=special + continuation))
    return tok.get_vocab()


def bpe_vocab(size: int = 2 * VOCAB + 100) -> tuple[dict[str, int], list[str]]:
    """A byte-level BPE vocabulary and merges (RoBERTa style)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    special = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    trainer = trainers.BpeTrainer(
        vocab_size=size, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(_lines(), trainer)
    model = tok.model
    import json

    state = json.loads(tok.to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in state["merges"]]
    del model
    return tok.get_vocab(), merges


def unigram_vocab(size: int = VOCAB) -> list[tuple[str, float]]:
    """A SentencePiece-style unigram vocabulary (ALBERT style, ``▁`` word starts)."""
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    special = ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"]
    tok.train_from_iterator(
        _lines(), trainers.UnigramTrainer(vocab_size=size, special_tokens=special, unk_token="<unk>")
    )
    import json

    return [tuple(x) for x in json.loads(tok.to_str())["model"]["vocab"]]


def make_tokenizer(family: str):
    """A fast tokenizer of ``family``'s own class, trained on the fixture corpus."""
    if family in ("bert", "electra", "distilbert"):
        cls = {"bert": BertTokenizer, "electra": ElectraTokenizer, "distilbert": DistilBertTokenizer}[family]
        return cls(vocab=wordpiece_vocab())
    if family == "roberta":
        vocab, merges = bpe_vocab()
        return RobertaTokenizer(vocab=vocab, merges=merges)
    if family == "albert":
        return AlbertTokenizer(vocab=unigram_vocab())
    raise ValueError(family)


def make_config(family: str, vocab_size: int, tokenizer=None):
    """A 2-layer, hidden-32 config of ``family``."""
    common = dict(vocab_size=vocab_size, max_position_embeddings=128)
    pad = tokenizer.pad_token_id if tokenizer is not None else 0
    if family == "bert":
        return BertConfig(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, pad_token_id=pad, **common
        )
    if family == "electra":
        return ElectraConfig(
            embedding_size=32,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            pad_token_id=pad,
            **common,
        )
    if family == "roberta":
        return RobertaConfig(
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            pad_token_id=pad,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            vocab_size=vocab_size,
            max_position_embeddings=130,
        )
    if family == "albert":
        return AlbertConfig(
            embedding_size=16,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            pad_token_id=pad,
            **common,
        )
    if family == "distilbert":
        return DistilBertConfig(dim=32, n_layers=2, n_heads=2, hidden_dim=64, pad_token_id=pad, **common)
    raise ValueError(family)


def make_tiny(family: str, out: Path, seed: int = 0) -> Path:
    """Save a tiny random MLM checkpoint of ``family`` with its tokenizer into ``out``."""
    import torch

    torch.manual_seed(seed)
    tok = make_tokenizer(family)
    config = make_config(family, len(tok), tok)
    model = AutoModelForMaskedLM.from_config(config)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def tiny_classifier(tiny_model: Path, out: Path, seed: int, labels: list[str]) -> str:
    """A tiny random sequence classifier with ``labels``, its head saved, with its tokenizer; its folder."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_pretrained(
        tiny_model,
        num_labels=len(labels),
        id2label=dict(enumerate(labels)),
        label2id={n: i for i, n in enumerate(labels)},
    )
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_model).save_pretrained(out)
    return str(out)
