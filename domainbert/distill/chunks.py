"""A training batch run in length-sorted chunks: the same rows and outputs, with less padding.

A batch of randomly drawn texts is padded to its longest row, and on a CPU a padded token costs as much as a real
one: at batch 32 with at most 128 tokens, a third of a Debian batch is padding. Grouping rows of similar length
into batches removes it but changes which rows share a batch, and that cost the distilled student validation
accuracy (docs/benchmarks/distillation.md). Here the batch stays as drawn: its rows are sorted by length and split into
chunks of a few rows, each chunk runs padded only to its own longest row, and the outputs are put back in the
batch's row order and padded width. Every real token's output is the same as in one pass over the whole batch
(up to float rounding), so the losses and their gradients are those of the whole batch; only a training model's
dropout masks are drawn differently.

:func:`length_chunks` chooses the chunks; :func:`run_in_chunks` runs a model on them and puts the outputs back.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from domainbert.distill.task_table import Layout, Outputs
from domainbert.errors import DomainBertError

#: rows per chunk on a CPU without AMX for ``chunk_rows: auto``: among the fastest measured on AVX2 (fp32) and
#: AVX512-BF16 (bf16) CPUs, with the student's macro-F1 over seeds the same as the whole batch's
#: (docs/benchmarks/distillation.md, ``examples/benchmarks/distill_chunks.py``).
AUTO_CHUNK_ROWS = 8


def auto_chunk_rows(device: torch.device, precision: str) -> int | None:
    """What ``chunk_rows: auto`` runs: :data:`AUTO_CHUNK_ROWS` on a CPU (not AMX in bf16), else None (the whole batch).

    On a CPU with AMX training in bf16 the whole batch is faster: its matrix products cost little there, and each
    chunk repeats the rest of the step's work (docs/benchmarks/distillation.md).

    Args:
        device: where the models run.
        precision: the trainer's precision (``bf16-mixed``, ``32-true``, ...).

    Examples:
        >>> auto_chunk_rows(torch.device("cuda"), "bf16-mixed") is None
        True
        >>> auto_chunk_rows(torch.device("cpu"), "32-true")
        8
    """
    if device.type != "cpu":
        return None
    from domainbert.core.hardware import cpu_has_amx

    return None if "bf16" in precision and cpu_has_amx() else AUTO_CHUNK_ROWS


def check_chunk_rows(rows) -> None:
    """Refuse a ``chunk_rows`` that is not a positive whole number, ``auto`` or None."""
    if rows is None or rows == "auto" or (isinstance(rows, int) and not isinstance(rows, bool) and rows >= 1):
        return
    raise DomainBertError(f"chunk_rows={rows!r}: expected a number of rows of at least 1, 'auto' or null")


def length_chunks(attention_mask: torch.Tensor, rows: int | None) -> list[torch.Tensor] | None:
    """The batch's row indices, longest row first, in chunks of ``rows``; None to run the batch whole.

    None when ``rows`` is None or not smaller than the batch, or when the padding is not all on the right (a
    left-padding tokenizer): chunks are cut to their longest row's length from the left.
    """
    n, width = attention_mask.shape
    if rows is None or rows >= n:
        return None
    lengths = attention_mask.sum(1)
    if not torch.equal(attention_mask.bool(), torch.arange(width, device=lengths.device) < lengths[:, None]):
        return None
    order = torch.argsort(lengths, descending=True, stable=True)
    return list(order.split(rows))


def run_in_chunks(
    run: Callable[..., object],
    inputs: dict[str, torch.Tensor],
    selected: torch.Tensor | None,
    chunks: list[torch.Tensor],
    layout: Layout,
) -> Outputs:
    """``run(inputs, selected)`` on each chunk of rows, its outputs put back as one pass over the batch gives them.

    Args:
        run: ``(inputs, selected) -> output`` with ``logits`` and, where asked for, ``hidden_states`` and
            ``attentions`` (a task's ``run`` with its model and output flags bound).
        inputs: the model's inputs, each ``(batch, width)``, right-padded; ``attention_mask`` among them.
        selected: ``(batch, width)`` positions whose logits the run returns (masked-LM), or None.
        chunks: row indices per chunk (:func:`length_chunks`); together every row once.
        layout: how ``logits`` are laid out (``row``: one per text; ``token``: ``(rows, width, ...)``;
            ``selected``: one per selected position, in row-major order).

    Returns:
        Outputs whose tensors equal those of one pass over the whole batch at every real token (padded
        positions hold zeros).
    """
    n, width = inputs["attention_mask"].shape
    lengths = inputs["attention_mask"].sum(1)
    logits, hidden, attentions, places = [], [], [], []
    for rows in chunks:
        cut = int(lengths[rows[0]])
        part_selected = selected[rows, :cut] if selected is not None else None
        out = run({k: v[rows, :cut] for k, v in inputs.items()}, part_selected)
        logits.append(_widen(out.logits, width, 1) if layout == "token" else out.logits)
        if getattr(out, "hidden_states", None) is not None:
            hidden.append([_widen(h, width, 1) for h in out.hidden_states])
        if getattr(out, "attentions", None) is not None:
            attentions.append([_widen(_widen(a, width, -1), width, -2) for a in out.attentions])
        if layout == "selected":
            rr, pos = part_selected.nonzero(as_tuple=True)
            places.append(rows[rr] * width + pos)
    row_back = _inverse(torch.cat(chunks), n)
    back = torch.argsort(torch.cat(places)) if layout == "selected" else row_back
    return Outputs(
        torch.cat(logits)[back],
        tuple(torch.cat(layer)[row_back] for layer in zip(*hidden)) if hidden else None,
        tuple(torch.cat(layer)[row_back] for layer in zip(*attentions)) if attentions else None,
    )


def _widen(x: torch.Tensor, width: int, dim: int) -> torch.Tensor:
    """``x`` padded with zeros at the end of dimension ``dim`` to ``width``."""
    missing = width - x.shape[dim]
    if missing == 0:
        return x
    pad = [0, 0] * (x.dim() - dim % x.dim() - 1) + [0, missing]
    return F.pad(x, pad)


def _inverse(order: torch.Tensor, n: int) -> torch.Tensor:
    """The permutation that puts rows taken in ``order`` back in their places."""
    back = torch.empty(n, dtype=torch.long, device=order.device)
    back[order] = torch.arange(n, device=order.device)
    return back
