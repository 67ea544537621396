"""Domain vocabulary: add frequent corpus words as whole tokens, or train a fresh WordPiece tokenizer.

``domainbert vocab extend`` counts the words of a corpus exactly as the model's tokenizer sees them (its own
normalizer and pre-tokenizer, so casing, accents and punctuation match), keeps the frequent ones the tokenizer
splits into several pieces, and adds the top K as new tokens. Each new embedding row, and each new entry of the
MLM output bias (and of an untied output embedding), starts as the mean of the word's old pieces. The model and
tokenizer are saved in Hugging Face format, ready for ``domainbert fit``.

How a word is added depends on the tokenizer family, so that the word in running text becomes one token:

- WordPiece (BERT, DistilBERT, ELECTRA): the word joins the WordPiece vocabulary. Greedy longest-match then
  picks it whole; decoding and ``##`` continuation marks are unchanged.
- SentencePiece unigram (ALBERT, ``▁`` word starts): ``▁word`` joins the unigram vocabulary, scored as the mean
  of its old pieces' scores, which always beats the old segmentation of ``▁word``.
- Byte-level BPE (RoBERTa, ``Ġ`` word starts): BPE cannot take a new whole word without new merges, so the word
  is an added token that matches whole words only and takes in the space before it: `` word`` in running text
  becomes one token. Known limit: ``decode`` drops the space before such a token ("the word" decodes to
  "theword"); encoding, offsets and ``word_ids`` are right.

``domainbert vocab train`` trains a BERT-style WordPiece tokenizer for a model trained from scratch. The two
commands' options and output: :mod:`domainbert.adapt.vocab_cli`.
"""

from __future__ import annotations

import copy
import itertools
import json
import logging
import re
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import AddedToken, Tokenizer
from transformers import AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from domainbert.core.compat import set_backend_tokenizer
from domainbert.errors import DomainBertError

log = logging.getLogger(__name__)

#: A word: letters and digits only (no underscore, no punctuation).
WORD = re.compile(r"[^\W_]+")
#: Longer "words" are hashes, URLs or junk, not vocabulary.
MAX_WORD_CHARS = 40
#: Texts per call into the Rust tokenizer.
BATCH = 1000


@dataclass
class Candidate:
    """A corpus word the base tokenizer splits into several pieces.

    Attributes:
        word: the word as the tokenizer sees it (normalized, without a word-start marker).
        token: the vocabulary entry that will stand for it (``word``, or ``▁word`` for SentencePiece).
        count: how often it occurs in the corpus.
        pieces: its old pieces, in running text.
        piece_ids: their ids.
        new_id: its id once added.
    """

    word: str
    token: str
    count: int
    pieces: list[str]
    piece_ids: list[int]
    new_id: int | None = None


@dataclass
class _Scheme:
    """How a tokenizer marks word starts, and how a new word is added to it."""

    model: str  # WordPiece, BPE, Unigram, WordLevel
    marker: str = ""  # "Ġ" (byte level), "▁" (metaspace) or ""
    byte_level: bool = False
    route: str = "vocab"  # "vocab": into the model's own vocabulary; "added": an added token


# -- tokenizer anatomy ---------------------------------------------------------------------------------------------


def _components(node) -> Iterator[dict]:
    """Every component of a serialized normalizer/pre-tokenizer/decoder, sequences flattened."""
    if isinstance(node, dict):
        yield node
        for key in ("pretokenizers", "normalizers", "decoders"):
            for child in node.get(key) or []:
                yield from _components(child)


def scheme(tokenizer: PreTrainedTokenizerBase) -> _Scheme:
    """Find the tokenizer's model type and word-start marker, and how new words must be added.

    Raises:
        DomainBertError: for a slow tokenizer or a word-level model (which never splits words).
    """
    if not getattr(tokenizer, "is_fast", False):
        raise DomainBertError(f"{type(tokenizer).__name__}: a fast (Rust) tokenizer is required")
    state = json.loads(tokenizer.backend_tokenizer.to_str())
    model = state["model"].get("type") or type(tokenizer.backend_tokenizer.model).__name__
    if model == "WordLevel":
        raise DomainBertError("the tokenizer is word-level: it never splits words, so there is nothing to extend")
    pre = list(_components(state.get("pre_tokenizer")))
    types = {c.get("type") for c in pre}
    s = _Scheme(model=model)
    if "ByteLevel" in types:
        s.marker, s.byte_level = "Ġ", True
    elif "Metaspace" in types:
        s.marker = next(c.get("replacement", "▁") for c in pre if c.get("type") == "Metaspace")
    # New entries of the model's own vocabulary need the next free ids, above every added token.
    model_size = tokenizer.backend_tokenizer.get_vocab_size(with_added_tokens=False)
    if model in ("WordPiece", "Unigram") and len(tokenizer) == model_size:
        s.route = "vocab"
    else:
        s.route = "added"
    return s


# -- counting ------------------------------------------------------------------------------------------------------


def count_forms(tokenizer: PreTrainedTokenizerBase, texts: Iterable[str], batch_size: int = BATCH) -> Counter:
    """Count the pre-tokens of ``texts`` as the tokenizer's own normalizer and pre-tokenizer produce them.

    Texts are joined in batches of ``batch_size`` (by newlines, which every pre-tokenizer treats as a word
    break) so that the corpus streams through in few calls.
    """
    backend = tokenizer.backend_tokenizer
    norm, pre = backend.normalizer, backend.pre_tokenizer
    counts: Counter = Counter()
    batch: list[str] = []

    def flush() -> None:
        text = "\n".join(batch)
        if norm is not None:
            text = norm.normalize_str(text)
        pieces = pre.pre_tokenize_str(text) if pre is not None else [(w, None) for w in text.split()]
        counts.update(p for p, _ in pieces)
        batch.clear()

    for text in texts:
        if text:
            batch.append(text)
            if len(batch) >= batch_size:
                flush()
    if batch:
        flush()
    return counts


def _byte_decoder(tokenizer: PreTrainedTokenizerBase):
    dec = tokenizer.backend_tokenizer.decoder
    return (lambda form: dec.decode([form])) if dec is not None else (lambda form: form)


def _word_of(form: str, s: _Scheme, decode) -> tuple[str, bool] | None:
    """``(word, starts_a_word)`` for a pre-token that is (or, for SentencePiece, opens with) a word; else None."""
    if s.byte_level:
        text = decode(form)
        marked = text.startswith(" ")
        word = text[1:] if marked else text
        return (word, marked) if WORD.fullmatch(word) else None
    if s.marker:
        if not form.startswith(s.marker):
            return None
        m = WORD.match(form, len(s.marker))
        return (m.group(0), True) if m else None
    return (form, True) if WORD.fullmatch(form) else None


def find_candidates(
    tokenizer: PreTrainedTokenizerBase,
    counts: Counter,
    min_freq: int = 20,
    skip_numbers: bool = True,
) -> list[Candidate]:
    """Words seen at least ``min_freq`` times that the tokenizer splits, most frequent first.

    Args:
        tokenizer: the base tokenizer.
        counts: pre-token counts from :func:`count_forms`.
        min_freq: the fewest occurrences a word needs.
        skip_numbers: leave out words made of digits only (years, versions, sizes).
    """
    s = scheme(tokenizer)
    decode = _byte_decoder(tokenizer)
    model = tokenizer.backend_tokenizer.model
    vocab = tokenizer.get_vocab()
    words: Counter = Counter()
    primary: dict[str, str] = {}  # word -> the pre-token form whose pieces stand for it in running text
    for form, n in counts.items():
        hit = _word_of(form, s, decode)
        if hit is None:
            continue
        word, marked = hit
        if len(word) > MAX_WORD_CHARS or (skip_numbers and word.isdigit()):
            continue
        words[word] += n
        if s.byte_level:
            if marked or word not in primary:
                primary[word] = form  # the running-text (Ġ) form wins over a bare one
        elif s.marker:
            primary[word] = s.marker + word  # "▁word;" and "▁word" both need "▁word"
        else:
            primary[word] = form
    out = []
    for word, n in words.items():
        if n < min_freq or word not in primary:
            continue
        token = s.marker + word if (s.model == "Unigram" and s.route == "vocab") else word
        if token in vocab:
            continue  # already a token (in some form the pre-tokenizer does not produce here)
        pieces = model.tokenize(primary[word])
        if len(pieces) < 2:
            continue
        out.append(Candidate(word, token, n, [p.value for p in pieces], [p.id for p in pieces]))
    out.sort(key=lambda c: (-c.count, -len(c.pieces), c.word))
    return out


# -- adding words to the tokenizer ---------------------------------------------------------------------------------


def _unigram_score(scores: list[float]) -> float:
    """The mean of the old pieces' scores: always above their sum (the old segmentation's score)."""
    mean, total = sum(scores) / len(scores), sum(scores)
    return mean if mean > total + 1e-6 else total + 1.0


def _with_words(tokenizer: PreTrainedTokenizerBase, cands: list[Candidate], s: _Scheme) -> PreTrainedTokenizerBase:
    """A new tokenizer: ``tokenizer`` with ``cands`` added, saved and reloaded as a user will load it."""
    if s.route == "added":
        new = copy.deepcopy(tokenizer)
        normalized = new.backend_tokenizer.normalizer is not None
        new.add_tokens(
            [AddedToken(c.token, single_word=True, lstrip=bool(s.marker), normalized=normalized) for c in cands]
        )
        return new
    with tempfile.TemporaryDirectory(prefix="domainbert-vocab-") as tmp:
        tokenizer.save_pretrained(tmp)
        path = Path(tmp) / "tokenizer.json"
        state = json.loads(path.read_text(encoding="utf-8"))
        vocab = state["model"]["vocab"]
        next_id = len(tokenizer)
        if s.model == "WordPiece":
            for i, c in enumerate(cands):
                vocab[c.token] = next_id + i
        else:  # Unigram: ids are positions; scores are log-probabilities
            scores = {p[0]: p[1] for p in vocab}
            for c in cands:
                vocab.append([c.token, _unigram_score([scores[p] for p in c.pieces])])
        path.write_text(json.dumps(state, ensure_ascii=False), encoding="utf-8")
        return AutoTokenizer.from_pretrained(tmp, use_fast=True)


def _one_token(tokenizer: PreTrainedTokenizerBase, c: Candidate) -> bool:
    """Whether ``c.word`` in running text is exactly its one new token."""
    text = f"x {c.word} x"
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    start, end = 2, 2 + len(c.word)
    covering = [
        i
        for i, (a, b) in zip(enc["input_ids"], enc["offset_mapping"], strict=True)
        if (a < end and b > start) or a == b == start
    ]
    return covering == [c.new_id]


def add_words(
    tokenizer: PreTrainedTokenizerBase, cands: list[Candidate]
) -> tuple[PreTrainedTokenizerBase, list[Candidate]]:
    """Add ``cands`` to a copy of ``tokenizer``; return it and the candidates kept, each with its ``new_id``.

    Each word is checked to become one token in running text; one that does not is dropped (logged).
    """
    s = scheme(tokenizer)
    if not cands:
        return copy.deepcopy(tokenizer), []
    for _ in range(3):
        new = _with_words(tokenizer, cands, s)
        vocab = new.get_vocab()
        for c in cands:
            c.new_id = vocab.get(c.token)
        bad = [c for c in cands if c.new_id is None or c.new_id < len(tokenizer) or not _one_token(new, c)]
        if not bad:
            return new, cands
        log.warning("%d words do not become one token and are left out: %s", len(bad), [c.word for c in bad][:20])
        cands = [c for c in cands if c not in bad]
    raise DomainBertError(f"could not add words to the {type(tokenizer).__name__} as single tokens")


# -- the model -----------------------------------------------------------------------------------------------------


def _per_token_params(model: PreTrainedModel) -> list[str]:
    """Names of the parameters with one row per token: input and output embeddings, and the MLM output bias."""
    rows = model.get_input_embeddings().weight.shape[0]
    emb = {id(model.get_input_embeddings().weight)}
    out = model.get_output_embeddings()
    if out is not None and getattr(out, "weight", None) is not None:
        emb.add(id(out.weight))
    names = []
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) in emb or (p.dim() == 1 and p.shape[0] == rows and name.endswith("bias")):
            names.append(name)
    return names


def resize_and_init(model: PreTrainedModel, cands: list[Candidate], vocab_size: int) -> None:
    """Give ``model`` rows for ``vocab_size`` tokens; each new row is the mean of its word's old pieces' rows.

    This covers the input embedding, an untied output embedding and every per-token output bias.
    """
    names = _per_token_params(model)
    rows = max(model.get_input_embeddings().weight.shape[0], vocab_size)
    model.resize_token_embeddings(rows, mean_resizing=False)
    with torch.no_grad():
        for name in names:
            p = model.get_parameter(name)
            if p.shape[0] != rows:
                raise DomainBertError(
                    f"{name} has {p.shape[0]} rows after resizing to {rows}; cannot extend this model"
                )
            for c in cands:
                p[c.new_id] = p[c.piece_ids].float().mean(0).to(p.dtype)
    log.info("initialised new rows of %s as the mean of each word's old pieces", ", ".join(names))


def extend(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    corpus_iter: Iterable[str],
    top_k: int = 500,
    min_freq: int = 20,
) -> list[Candidate]:
    """Add the ``top_k`` most frequent multi-piece words of ``corpus_iter`` to ``tokenizer`` and ``model``.

    Both change in place: the tokenizer gains the words (each one token in running text), the model's embeddings
    grow and each new row, like the MLM output bias, starts as the mean of the word's old pieces.

    Args:
        model: a model with input embeddings (and usually an MLM head).
        tokenizer: its fast tokenizer.
        corpus_iter: the corpus texts, streamed.
        top_k: how many words to add at most.
        min_freq: the fewest occurrences a word needs.

    Returns:
        The added words as :class:`Candidate` records (token, count, old pieces, new id), most frequent first.

    Raises:
        DomainBertError: for bad ``top_k``/``min_freq``, a tokenizer larger than the model's embedding, or a corpus
            without words.
    """
    if top_k < 0 or min_freq < 1:
        raise DomainBertError(f"top_k={top_k}, min_freq={min_freq}: expected top_k >= 0 and min_freq >= 1")
    if len(tokenizer) > model.get_input_embeddings().weight.shape[0]:
        raise DomainBertError(
            f"the tokenizer has {len(tokenizer)} tokens but the model only "
            f"{model.get_input_embeddings().weight.shape[0]} embedding rows; they do not belong together"
        )
    counts = count_forms(tokenizer, corpus_iter)
    if not counts:
        raise DomainBertError("the corpus holds no words")
    cands = find_candidates(tokenizer, counts, min_freq)[:top_k]
    new, cands = add_words(tokenizer, cands)
    resize_and_init(model, cands, len(new))
    adopt_backend(tokenizer, new)
    return cands


def extend_vocabulary(*args, **kwargs) -> list[str]:
    """:func:`extend` (same arguments), returning only the added tokens (their vocabulary entries)."""
    return [c.token for c in extend(*args, **kwargs)]


def adopt_backend(tokenizer: PreTrainedTokenizerBase, new: PreTrainedTokenizerBase) -> None:
    """Make ``tokenizer`` (in place) tokenize exactly as ``new``: it takes over ``new``'s Rust backend.

    A transformers 5 fast tokenizer keeps all its vocabulary state in its Rust backend, which has no public setter
    (:func:`domainbert.core.compat.set_backend_tokenizer`). ``tests/unit/test_vocab_extend.py`` pins the behaviour
    (the ``backend_tokenizer``, length, vocabulary and encodings all follow), so a transformers release that moves
    the state fails there first.
    """
    set_backend_tokenizer(tokenizer, new.backend_tokenizer)


def tokens_per_word(tokenizer: PreTrainedTokenizerBase, texts: Iterable[str], batch_size: int = BATCH) -> float:
    """Average number of tokens per whitespace-separated word (special tokens not counted)."""
    backend = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
    backend.no_padding()  # a tokenizer.json may carry fixed padding or truncation, which would skew the count
    backend.no_truncation()
    encode = getattr(backend, "encode_batch_fast", backend.encode_batch)
    tokens = words = 0
    batch: list[str] = []
    for text in itertools.chain(texts, [None]):
        if text:
            batch.append(text)
        if batch and (text is None or len(batch) >= batch_size):
            tokens += sum(len(e.ids) for e in encode(batch, add_special_tokens=False))
            words += sum(len(t.split()) for t in batch)
            batch = []
    return tokens / words if words else float("nan")


# -- the commands --------------------------------------------------------------------------------------------------


def corpus_texts(spec: str | list[str], text_column: str, text_mode: str, limit: int | None = None) -> Iterator[str]:
    """Stream the text column of a corpus in batches (arrow files are memory-mapped, so size is no limit)."""
    from domainbert.data.readers import read

    ds = read(spec, columns=[text_column], text_mode=text_mode)
    if limit is not None:
        ds = ds.select(range(min(limit, len(ds))))
    for batch in ds.iter(batch_size=BATCH):
        for text in batch[text_column]:
            if text:
                yield text


def train_wordpiece(
    texts: Iterable[str],
    vocab_size: int = 30522,
    lowercase: bool = True,
    min_frequency: int = 2,
    max_length: int = 512,
):
    """Train a BERT-style WordPiece tokenizer on ``texts``; return it as a ``BertTokenizer``.

    Args:
        texts: the corpus texts, streamed.
        vocab_size: the vocabulary size to reach (a small corpus may yield fewer).
        lowercase: lowercase and strip accents (uncased), as bert-base-uncased.
        min_frequency: the fewest occurrences a merge needs.
        max_length: the tokenizer's ``model_max_length``.
    """
    from tokenizers import models, normalizers, pre_tokenizers, trainers
    from transformers import BertTokenizer

    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    if vocab_size <= len(special):
        raise DomainBertError(f"vocab_size={vocab_size}: expected more than the {len(special)} special tokens")
    backend = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=special, show_progress=False
    )
    backend.train_from_iterator(texts, trainer)
    vocab = backend.get_vocab()
    if len(vocab) <= len(special):
        raise DomainBertError("the corpus holds no words to train a tokenizer on")
    return BertTokenizer(vocab=vocab, do_lower_case=lowercase, model_max_length=max_length)
