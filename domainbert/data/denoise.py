"""Deletion noise for denoising auto-encoders (TSDAE): each text loses a share of its tokens, the rest kept in order.

The noise is drawn from a ``torch.Generator`` the caller seeds (``domainbert.core.seeding.step_generator``), so a
step's noise depends only on ``(seed, step)``: fresh at every step, the same on a resumed run. Special tokens
(``[CLS]``, ``[SEP]``, padding) are never deleted, and every text keeps at least one of its own tokens.
"""

from __future__ import annotations

import torch

from domainbert.errors import DomainBertError


def delete_tokens(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    special: torch.Tensor,
    ratio: float,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Which tokens survive deletion noise: each text token is deleted with probability ``ratio``.

    Args:
        input_ids: token ids, ``(n, length)``.
        attention_mask: 1 for tokens, 0 for padding, ``(n, length)``.
        special: True where a token is special (never deleted), ``(n, length)``.
        ratio: the chance that each text token is deleted, in ``[0, 1)``.
        generator: the random stream of the draw.

    Returns:
        The ``(n, length)`` boolean mask of the kept tokens: every special token, about ``1 - ratio`` of the text
        tokens, and at least one text token in every row that has one (a row that lost them all keeps one, drawn
        at random).
    """
    draw = torch.rand(input_ids.shape, generator=generator, device=input_ids.device)
    text = attention_mask.bool() & ~special
    kept = text & (draw >= ratio)
    lost_all = text.any(dim=1) & ~kept.any(dim=1)
    if lost_all.any():
        rescue = torch.where(text, draw, torch.full_like(draw, -1.0)).argmax(dim=1)  # a random text token of each row
        kept[lost_all, rescue[lost_all]] = True
    return kept | (special & attention_mask.bool())


def compact(batch: dict, kept: torch.Tensor, pad_id: int) -> dict:
    """``batch`` with only the ``kept`` tokens of each row, moved left in their order, padded with ``pad_id``.

    Args:
        batch: ``input_ids`` and ``attention_mask`` (and ``token_type_ids`` where the tokenizer makes them).
        kept: the boolean mask of the tokens to keep, ``(n, length)``.
        pad_id: the padding id.

    Returns:
        ``input_ids`` and ``attention_mask`` (and ``token_type_ids``), as long as the longest row kept.
    """
    order = torch.argsort((~kept).to(torch.int8), dim=1, stable=True)  # kept tokens first, in their order
    lengths = kept.sum(dim=1)
    width = max(int(lengths.max()), 1) if kept.numel() else 1
    order = order[:, :width]
    mask = torch.arange(width, device=kept.device)[None, :] < lengths[:, None]
    ids = batch["input_ids"].gather(1, order).masked_fill(~mask, pad_id)
    out = {"input_ids": ids, "attention_mask": mask.to(batch["attention_mask"].dtype)}
    if "token_type_ids" in batch:
        out["token_type_ids"] = batch["token_type_ids"].gather(1, order).masked_fill(~mask, 0)
    return out


class Deleter:
    """Deletion noise over tokenized batches: ``deleter(batch, generator)`` is the noisy batch."""

    def __init__(self, tokenizer, ratio: float = 0.6) -> None:
        """Delete about ``ratio`` of each text's tokens (special tokens of ``tokenizer`` kept).

        Raises:
            DomainBertError: a ratio outside ``[0, 1)`` (at 1 every text would keep a single token).
        """
        if not 0 <= ratio < 1:
            raise DomainBertError(f"model.deletion_ratio={ratio}: expected a share in [0, 1)")
        self.ratio = float(ratio)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.special_ids = torch.tensor(sorted(set(tokenizer.all_special_ids)), dtype=torch.long)

    def special(self, input_ids: torch.Tensor) -> torch.Tensor:
        """True where ``input_ids`` holds a special token."""
        return torch.isin(input_ids, self.special_ids.to(input_ids.device))

    def __call__(self, batch: dict, generator: torch.Generator | None = None) -> dict:
        """The noisy copy of ``batch`` (``input_ids``, ``attention_mask``, ``token_type_ids`` where given)."""
        ids = batch["input_ids"]
        mask = batch.get("attention_mask")
        if mask is None:
            mask = (ids != self.pad_id).long()
        kept = delete_tokens(ids, mask, self.special(ids), self.ratio, generator)
        return compact({**batch, "attention_mask": mask}, kept, self.pad_id)
