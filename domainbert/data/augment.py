"""Text augmentation for training examples: EDA operations and masked-LM contextual replacement.

Each operation has its own per-word probability, and every draw comes from a ``random.Random`` the
caller seeds (the datamodules seed it from ``seed``, the epoch and the row, so a run is reproducible
and each epoch sees a different variant). Only training text is augmented, on the fly.

- **synonym replacement**: a word found in the user's synonym file is replaced by one of its synonyms;
- **random insertion**: a synonym of a word (or, with no synonym file, a copy of the word) is inserted
  at a random position;
- **random swap**: a word swaps places with another random word;
- **random deletion**: a word is dropped (at least one word always remains);
- **contextual replacement**: a word is masked and replaced by one of a masked LM's top proposals
  (for example the domain-adapted model's ``hf/`` export).

The synonym file has one group of interchangeable words a line, separated by commas
(``fast, quick, rapid``); blank lines and lines starting with ``#`` are skipped.
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass
from pathlib import Path

from domainbert.core import settings
from domainbert.errors import DomainBertError

_EDGE = string.punctuation + "“”‘’«»"


@dataclass
class AugmentSettings:
    """Augmentation of training text; every probability is per word and 0 switches its operation off.

    Attributes:
        synonyms: a synonym file (one comma-separated group a line) for replacement and insertion.
        synonym_prob: probability of replacing a word that has synonyms.
        insert_prob: probability, per word, of inserting a synonym (or a copy) of it at a random position.
        swap_prob: probability, per word, of swapping it with another random word.
        delete_prob: probability of deleting a word.
        mlm_model: a masked-LM folder (or installed alias) proposing contextual replacements.
        mlm_prob: probability of replacing a word with a masked-LM proposal.
        mlm_top_k: the replacement is drawn from this many of the LM's best whole-word proposals.
        seed: base seed; the draws for a row depend on it, the epoch and the row index.
    """

    synonyms: str | None = None
    synonym_prob: float = 0.0
    insert_prob: float = 0.0
    swap_prob: float = 0.0
    delete_prob: float = 0.0
    mlm_model: str | None = None
    mlm_prob: float = 0.0
    mlm_top_k: int = 10
    seed: int = 0


def as_settings(value: AugmentSettings | dict | None) -> AugmentSettings | None:
    """Accept :class:`AugmentSettings`, a dict of its fields, or None; check the probabilities."""
    value = settings.as_settings(AugmentSettings, value, "augment")
    if value is None:
        return None
    probs = {
        "synonym_prob": value.synonym_prob,
        "insert_prob": value.insert_prob,
        "swap_prob": value.swap_prob,
        "delete_prob": value.delete_prob,
        "mlm_prob": value.mlm_prob,
    }
    for name, p in probs.items():
        if not 0.0 <= p <= 1.0:
            raise DomainBertError(f"augment.{name}={p}: expected a probability in [0, 1]")
    if value.synonym_prob > 0 and not value.synonyms:
        raise DomainBertError("augment.synonym_prob is set but augment.synonyms names no synonym file")
    if value.mlm_prob > 0 and not value.mlm_model:
        raise DomainBertError("augment.mlm_prob is set but augment.mlm_model names no masked-LM model")
    return value


def load_synonyms(path: str | Path) -> dict[str, list[str]]:
    """Read a synonym file into ``{word: [its synonyms]}`` (keys lower-cased).

    Raises:
        DomainBertError: a missing file, or a line with fewer than two words (naming the line).
    """
    path = Path(path)
    if not path.is_file():
        raise DomainBertError(f"augment.synonyms: {path}: no such file")
    table: dict[str, list[str]] = {}
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        group = [w.strip() for w in line.split(",") if w.strip()]
        if len(group) < 2:
            raise DomainBertError(f"{path}: line {lineno}: expected at least two comma-separated synonyms: {line!r}")
        for word in group:
            others = [w for w in group if w.lower() != word.lower()]
            bucket = table.setdefault(word.lower(), [])
            bucket += [w for w in others if w not in bucket]
    return table


def _split_edges(word: str) -> tuple[str, str, str]:
    """``'(fast),'`` -> ``('(', 'fast', '),')``."""
    core = word.strip(_EDGE)
    if not core:
        return "", word, ""
    start = word.index(core)
    return word[:start], core, word[start + len(core) :]


def _match_case(new: str, old: str) -> str:
    if old.isupper() and len(old) > 1:
        return new.upper()
    if old[:1].isupper():
        return new[:1].upper() + new[1:]
    return new


class Augmenter:
    """Apply the configured operations to a text with a caller-seeded ``random.Random``.

    Order: synonym replacement, contextual replacement, insertion, swap, deletion.
    """

    def __init__(self, settings: AugmentSettings | dict) -> None:
        """Build from settings; the synonym file is read now, the masked LM on first use.

        Args:
            settings: the augmentation settings.
        """
        self.settings = as_settings(settings)
        s = self.settings
        self.synonyms = load_synonyms(s.synonyms) if s.synonyms else {}
        self.mlm = MLMReplacer(s.mlm_model, top_k=s.mlm_top_k) if s.mlm_model and s.mlm_prob > 0 else None

    @property
    def active(self) -> bool:
        """True when some operation can change a text."""
        s = self.settings
        return any(p > 0 for p in (s.synonym_prob, s.insert_prob, s.swap_prob, s.delete_prob, s.mlm_prob))

    def rng(self, epoch: int, index: int, field: str = "") -> random.Random:
        """The generator for one row of one epoch (and one text field of it)."""
        return random.Random(f"{self.settings.seed}:{epoch}:{index}:{field}")

    def __call__(self, text: str, rng: random.Random) -> str:
        """Return an augmented copy of ``text``."""
        s = self.settings
        words = text.split()
        if not words:
            return text
        if s.synonym_prob > 0:
            words = self.synonym_replace(words, rng, s.synonym_prob)
        if s.mlm_prob > 0 and self.mlm is not None:
            words = self.mlm(words, rng, s.mlm_prob)
        if s.insert_prob > 0:
            words = self.random_insert(words, rng, s.insert_prob)
        if s.swap_prob > 0:
            words = random_swap(words, rng, s.swap_prob)
        if s.delete_prob > 0:
            words = random_delete(words, rng, s.delete_prob)
        return " ".join(words)

    def synonym_replace(self, words: list[str], rng: random.Random, p: float) -> list[str]:
        """Replace each word that has synonyms, with probability ``p``, keeping punctuation and case."""
        out = []
        for word in words:
            pre, core, post = _split_edges(word)
            options = self.synonyms.get(core.lower())
            if options and rng.random() < p:
                core = _match_case(rng.choice(options), core)
            out.append(pre + core + post)
        return out

    def random_insert(self, words: list[str], rng: random.Random, p: float) -> list[str]:
        """For each word, with probability ``p``, insert a synonym of it (or a copy) at a random position."""
        out = list(words)
        for word in words:
            if rng.random() >= p:
                continue
            core = _split_edges(word)[1]
            options = self.synonyms.get(core.lower())
            new = rng.choice(options) if options else core
            out.insert(rng.randint(0, len(out)), new)
        return out


def random_swap(words: list[str], rng: random.Random, p: float) -> list[str]:
    """For each position, with probability ``p``, swap its word with the word at a random position."""
    out = list(words)
    if len(out) < 2:
        return out
    for i in range(len(out)):
        if rng.random() < p:
            j = rng.randrange(len(out))
            out[i], out[j] = out[j], out[i]
    return out


def random_delete(words: list[str], rng: random.Random, p: float) -> list[str]:
    """Drop each word with probability ``p``; if all would go, keep one at random."""
    kept = [w for w in words if rng.random() >= p]
    return kept or [rng.choice(words)]


class MLMReplacer:
    """Contextual replacement: mask chosen words and substitute one of the masked LM's top whole-word proposals."""

    def __init__(self, name: str, top_k: int = 10) -> None:
        """Remember the model; it is loaded on first use (so that dataloader workers each load their own).

        Args:
            name: a masked-LM folder, hub name or installed alias.
            top_k: draw from this many best proposals.
        """
        self.name = name
        self.top_k = top_k
        self._model = None
        self._tokenizer = None

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_model"] = state["_tokenizer"] = None
        return state

    def _load(self) -> None:
        from transformers import AutoModelForMaskedLM

        from domainbert.core.hf import load_model, load_tokenizer
        from domainbert.core.models_local import resolve_local_alias

        name = resolve_local_alias(self.name)
        self._tokenizer = load_tokenizer(name)
        if self._tokenizer.mask_token is None:
            raise DomainBertError(f"augment.mlm_model={self.name!r}: its tokenizer has no mask token")
        model, _ = load_model(AutoModelForMaskedLM, name)
        self._model = model.eval()

    def _is_word(self, token: str) -> bool:
        text = self._tokenizer.convert_tokens_to_string([token])
        core = text.strip()
        return bool(core) and core.isalpha() and not token.startswith("##") and text[:1] != "#"

    def __call__(self, words: list[str], rng: random.Random, p: float) -> list[str]:
        """Replace each word, with probability ``p``, by a masked-LM proposal in context."""
        import torch

        chosen = [i for i, w in enumerate(words) if w.strip(_EDGE) and rng.random() < p]
        if not chosen:
            return words
        if self._model is None:
            self._load()
        tok = self._tokenizer
        masked = list(words)
        for i in chosen:
            pre, _, post = _split_edges(words[i])
            masked[i] = f"{pre}{tok.mask_token}{post}"
        enc = tok(" ".join(masked), return_tensors="pt", truncation=True, max_length=512)
        with torch.no_grad():
            logits = self._model(**enc).logits[0]
        positions = (enc["input_ids"][0] == tok.mask_token_id).nonzero().flatten().tolist()
        out = list(words)
        for i, pos in zip(chosen, positions):
            pre, core, post = _split_edges(words[i])
            best = logits[pos].topk(min(logits.shape[-1], 5 * self.top_k)).indices.tolist()
            tokens = [t for t in tok.convert_ids_to_tokens(best) if self._is_word(t)]
            candidates = [tok.convert_tokens_to_string([t]).strip() for t in tokens]
            candidates = [c for c in candidates if c.lower() != core.lower()][: self.top_k]
            if candidates:
                out[i] = pre + _match_case(rng.choice(candidates), core) + post
        return out
