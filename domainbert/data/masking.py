"""Dynamic masked-LM masking, token-level or whole-word, drawn on the batch's device.

Masks are a pure function of ``(input_ids, generator state)``: the module seeds the generator from
``(seed, global_step)``, so masks are fresh at every step and epoch, yet a resumed run draws exactly the
masks an uninterrupted one would.
"""

from __future__ import annotations

import string

import torch
from transformers import PreTrainedTokenizerBase

from domainbert.errors import DomainBertError

#: the label value that losses and metrics skip (PyTorch's and Hugging Face's convention)
IGNORE_INDEX = -100
_PUNCT = set(string.punctuation)


def word_scheme(tokenizer: PreTrainedTokenizerBase) -> str:
    """How the vocabulary marks words: ``wordpiece`` (``##``), ``bpe`` (``Ġ``) or ``sentencepiece`` (``▁``)."""
    vocab = tokenizer.get_vocab()
    counts = {
        "wordpiece": sum(t.startswith("##") for t in vocab),
        "bpe": sum(t.startswith("Ġ") for t in vocab),
        "sentencepiece": sum(t.startswith("▁") for t in vocab),
    }
    return max(counts, key=counts.get)


def continuation_table(tokenizer: PreTrainedTokenizerBase) -> torch.Tensor:
    """``table[id]`` is True when token ``id`` continues the previous token's word.

    WordPiece: pieces starting with ``##``. Byte-level BPE and SentencePiece: pieces *not* starting with
    the word-start marker (``Ġ``/``▁``). Special tokens always start a new word; so does punctuation for
    byte-level BPE, whose pre-tokenizer splits it from the word (SentencePiece keeps ``systems.`` whole).
    """
    scheme = word_scheme(tokenizer)
    size = max(len(tokenizer), max(tokenizer.get_vocab().values()) + 1)
    table = torch.zeros(size, dtype=torch.bool)
    special = set(tokenizer.all_special_ids)
    for tok, idx in tokenizer.get_vocab().items():
        if idx in special:
            continue
        if scheme == "wordpiece":
            cont = tok.startswith("##")
        else:
            marker = "Ġ" if scheme == "bpe" else "▁"
            cont = not tok.startswith(marker)
            if scheme == "bpe" and all(c in _PUNCT for c in tok):
                cont = False
        table[idx] = cont
    for idx, added in tokenizer.added_tokens_decoder.items():  # whole words added by `domainbert vocab extend`
        if getattr(added, "single_word", False) and not added.special and idx < size:
            table[idx] = False
    return table


class Masker:
    """BERT masking: pick ``probability`` of the tokens; of those 80% → [MASK], 10% → random, 10% unchanged.

    Special tokens and padding are never picked. With ``whole_word`` the pick is made per word and every
    piece of a picked word is masked together (correct for WordPiece ``##``, byte-level BPE ``Ġ`` and
    SentencePiece ``▁`` vocabularies).
    """

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        probability: float = 0.15,
        mask_ratio: float = 0.8,
        random_ratio: float = 0.1,
        whole_word: bool = False,
    ) -> None:
        """Build the masker's lookup tables from ``tokenizer``.

        Args:
            tokenizer: the model's tokenizer; it must have a mask token.
            probability: share of (non-special) tokens or words selected for prediction.
            mask_ratio: share of the selected tokens replaced by the mask token.
            random_ratio: share replaced by a random token (the rest stay unchanged).
            whole_word: select whole words instead of single tokens.
        """
        if tokenizer.mask_token_id is None:
            raise DomainBertError(f"the tokenizer {tokenizer.name_or_path!r} has no mask token; it cannot do masked LM")
        if not 0 < probability < 1 or mask_ratio + random_ratio > 1:
            raise DomainBertError(
                f"masking ratios: expected 0 < probability < 1 and mask + random <= 1, got probability={probability}, "
                f"mask={mask_ratio}, random={random_ratio}"
            )
        self.probability, self.mask_ratio, self.random_ratio = probability, mask_ratio, random_ratio
        self.whole_word = whole_word
        self.mask_id = tokenizer.mask_token_id
        size = max(len(tokenizer), max(tokenizer.get_vocab().values()) + 1)
        self.special = torch.zeros(size, dtype=torch.bool)
        self.special[list(set(tokenizer.all_special_ids))] = True
        self.random_pool = (~self.special).nonzero().squeeze(1)
        self.continuation = continuation_table(tokenizer) if whole_word else None

    def _to(self, device: torch.device) -> None:
        if self.special.device != device:
            self.special = self.special.to(device)
            self.random_pool = self.random_pool.to(device)
            if self.continuation is not None:
                self.continuation = self.continuation.to(device)

    def word_starts(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Boolean ``(B, T)``: True where a token starts a word (special tokens are words of their own)."""
        self._to(input_ids.device)
        special = self.special[input_ids]
        prev_special = torch.ones_like(special)
        prev_special[:, 1:] = special[:, :-1]
        return ~self.continuation[input_ids] | special | prev_special

    def __call__(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Return ``(masked_input_ids, labels)``; labels are ``-100`` where nothing is predicted."""
        self._to(input_ids.device)
        candidates = ~self.special[input_ids]
        if attention_mask is not None:
            candidates &= attention_mask.bool()
        u = torch.rand(input_ids.shape, device=input_ids.device, generator=generator)
        if self.whole_word:
            starts = self.word_starts(input_ids)
            pos = torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)
            start_of = torch.where(starts, pos, torch.zeros_like(pos)).cummax(dim=1).values
            u = u.gather(1, start_of)
        picked = (u < self.probability) & candidates
        labels = torch.where(picked, input_ids, torch.full_like(input_ids, IGNORE_INDEX))
        r = torch.rand(input_ids.shape, device=input_ids.device, generator=generator)
        to_mask = picked & (r < self.mask_ratio)
        to_random = picked & (r >= self.mask_ratio) & (r < self.mask_ratio + self.random_ratio)
        out = torch.where(to_mask, torch.full_like(input_ids, self.mask_id), input_ids)
        pool_idx = torch.randint(len(self.random_pool), input_ids.shape, device=input_ids.device, generator=generator)
        out = torch.where(to_random, self.random_pool[pool_idx], out)
        return out, labels
