"""Head pruning (Michel et al., 2019): score every attention head, remove the least important, re-fit briefly.

The importance of a head is the expected absolute gradient of the loss with respect to a mask on its output. A pruned
model records the original indexes of its removed heads in its config (``domainbert_pruned_heads``), so that
:func:`domainbert.deploy.load.load_variant` can rebuild its structure before loading its weights.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from domainbert.deploy.bench import model_inputs
from domainbert.errors import DomainBertError

#: The config key that records the pruned heads, ``{block name: original head indexes}``.
PRUNED_KEY = "domainbert_pruned_heads"


@dataclass
class HeadBlock:
    """One self-attention block: its query/key/value projections, output projection and head size."""

    name: str
    attention: nn.Module
    qkv: tuple[str, str, str]
    out_owner: nn.Module
    out_attr: str
    head_size: int

    @property
    def heads(self) -> int:
        """The block's current number of heads."""
        return getattr(self.attention, self.qkv[0]).out_features // self.head_size

    @property
    def out(self) -> nn.Linear:
        """The projection that mixes the heads' outputs."""
        return getattr(self.out_owner, self.out_attr)


def head_blocks(model: nn.Module) -> list[HeadBlock]:
    """Every self-attention block of a BERT, RoBERTa, ELECTRA, ALBERT or DistilBERT model, in order.

    ALBERT has one block shared by all its layers, so pruning it prunes every layer alike.
    """
    blocks = []
    for name, mod in model.named_modules():
        if all(hasattr(mod, a) for a in ("query", "key", "value")) and hasattr(mod, "attention_head_size"):
            if hasattr(mod, "dense"):  # ALBERT: the output projection lives in the same module
                owner, attr = mod, "dense"
            else:  # BERT family: <...>.attention.self + <...>.attention.output.dense
                parent = model.get_submodule(name.rsplit(".", 1)[0])
                owner, attr = parent.output, "dense"
            blocks.append(HeadBlock(name, mod, ("query", "key", "value"), owner, attr, mod.attention_head_size))
        elif all(hasattr(mod, a) for a in ("q_lin", "k_lin", "v_lin", "out_lin")):  # DistilBERT
            blocks.append(HeadBlock(name, mod, ("q_lin", "k_lin", "v_lin"), mod, "out_lin", mod.attention_head_size))
    if not blocks:
        raise DomainBertError(f"{type(model).__name__}: no self-attention blocks found to prune")
    return blocks


def count_heads(model: nn.Module) -> int:
    """Total attention heads over all blocks."""
    return sum(b.heads for b in head_blocks(model))


@contextlib.contextmanager
def head_masks(model: nn.Module):
    """Attach a ones mask per head (a leaf tensor with gradients) on every block's output; yield the masks."""
    blocks = head_blocks(model)
    masks, handles = [], []
    for block in blocks:
        mask = torch.ones(block.heads, requires_grad=True)
        masks.append(mask)

        def hook(_module, args, mask=mask, d=block.head_size):
            x = args[0]
            return (x * mask.to(x.dtype).repeat_interleave(d),) + tuple(args[1:])

        handles.append(block.out.register_forward_pre_hook(hook))
    try:
        yield blocks, masks
    finally:
        for h in handles:
            h.remove()


def head_importance(
    model: nn.Module, batches: Iterable[dict], loss_fn: Callable[[Any, dict], torch.Tensor], normalize: bool = True
) -> dict[str, torch.Tensor]:
    """Importance of each head: ``sum over batches of |dL/d mask_h|`` (Michel et al., 2019).

    Args:
        model: the model (its weights get no update; their gradients are cleared).
        batches: labelled batches.
        loss_fn: ``(model_output, batch) -> loss``.
        normalize: divide each block's scores by their L2 norm, as the paper does before ranking globally.

    Returns:
        ``{block name: scores (heads,)}``.
    """
    was_training = model.training
    model.eval()
    with head_masks(model) as (blocks, masks):
        scores = [torch.zeros(len(m)) for m in masks]
        for batch in batches:
            out = model(**model_inputs(model, batch))
            loss = loss_fn(out, batch)
            grads = torch.autograd.grad(loss, masks, allow_unused=True)
            for s, g in zip(scores, grads):
                if g is not None:
                    s += g.detach().abs()
    model.zero_grad(set_to_none=True)
    model.train(was_training)
    if normalize:
        scores = [s / s.norm().clamp_min(1e-12) for s in scores]
    return {b.name: s for b, s in zip(blocks, scores)}


def choose_heads(importance: dict[str, torch.Tensor], fraction: float) -> dict[str, list[int]]:
    """The least important ``fraction`` of all heads, ranked globally, keeping at least one head per block."""
    if not 0.0 <= fraction < 1.0:
        raise DomainBertError(f"prune_heads={fraction}: expected a fraction in [0, 1)")
    ranked = sorted((float(s), name, h) for name, scores in importance.items() for h, s in enumerate(scores))
    target = int(round(fraction * len(ranked)))
    left = {name: len(scores) for name, scores in importance.items()}
    chosen: dict[str, list[int]] = {}
    for _, name, h in ranked:
        if sum(len(v) for v in chosen.values()) >= target:
            break
        if left[name] <= 1:
            continue
        chosen.setdefault(name, []).append(h)
        left[name] -= 1
    return {k: sorted(v) for k, v in chosen.items()}


def _slice_linear(lin: nn.Linear, index: torch.Tensor, dim: int) -> nn.Linear:
    w = lin.weight.index_select(dim, index).detach().clone()
    new = nn.Linear(w.shape[1], w.shape[0], bias=lin.bias is not None, dtype=w.dtype, device=w.device)
    new.weight.data.copy_(w)
    if lin.bias is not None:
        b = lin.bias.detach().clone() if dim == 1 else lin.bias.index_select(0, index).detach().clone()
        new.bias.data.copy_(b)
    return new


def prune_heads(model: nn.Module, heads: dict[str, list[int]]) -> dict[str, list[int]]:
    """Remove ``heads`` (``{block name: head indexes}``) from the model, in place.

    The query/key/value projections lose the heads' rows and the output projection their columns, so the
    model is smaller and faster, with the same input and output shapes. The config records the original
    indexes under ``domainbert_pruned_heads`` so that :func:`load_variant` can rebuild the structure.

    Returns:
        All heads pruned so far, by block.
    """
    if not heads:
        return dict(getattr(model.config, PRUNED_KEY, None) or {})
    blocks = {b.name: b for b in head_blocks(model)}
    record = {k: list(v) for k, v in (getattr(model.config, PRUNED_KEY, None) or {}).items()}
    for name, drop in heads.items():
        if name not in blocks:
            raise DomainBertError(f"no attention block {name!r} in {type(model).__name__}")
        block = blocks[name]
        n, d = block.heads, block.head_size
        drop = sorted(set(int(h) for h in drop))
        if any(not 0 <= h < n for h in drop) or len(drop) >= n:
            raise DomainBertError(f"{name}: cannot prune heads {drop} of {n} (at least one must stay)")
        keep = [h for h in range(n) if h not in drop]
        index = torch.cat([torch.arange(h * d, (h + 1) * d) for h in keep])
        for attr in block.qkv:
            setattr(block.attention, attr, _slice_linear(getattr(block.attention, attr), index, 0))
        setattr(block.out_owner, block.out_attr, _slice_linear(block.out, index, 1))
        for attr in ("num_attention_heads", "n_heads"):
            if hasattr(block.attention, attr):
                setattr(block.attention, attr, len(keep))
        if hasattr(block.attention, "all_head_size"):
            block.attention.all_head_size = len(keep) * d
        # record the original head numbers (heads pruned earlier shift the current ones)
        before = sorted(record.get(name, []))
        original = [h for h in range(n + len(before)) if h not in before]
        record[name] = sorted(before + [original[h] for h in drop])
    setattr(model.config, PRUNED_KEY, record)
    return record


def refit(
    model: nn.Module,
    batches: list[dict],
    steps: int,
    learning_rate: float = 3e-5,
    teacher: nn.Module | None = None,
    temperature: float = 2.0,
    alpha: float = 0.5,
) -> list[float]:
    """A short re-fit after pruning: cross-entropy on the labels, plus the teacher's soft targets if given.

    Returns:
        The loss of each step.
    """
    if steps <= 0:
        return []
    if not batches:
        raise DomainBertError("--refit_steps needs labelled training data: give --train")
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=learning_rate, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: max(0.0, 1 - s / steps))
    losses = []
    for step in range(steps):
        batch = batches[step % len(batches)]
        logits = model(**model_inputs(model, batch)).logits
        loss = F.cross_entropy(logits, batch["labels"])
        if teacher is not None:
            with torch.no_grad():
                t = teacher(**model_inputs(teacher, batch)).logits
            kl = F.kl_div(
                F.log_softmax(logits / temperature, -1),
                F.log_softmax(t / temperature, -1),
                log_target=True,
                reduction="batchmean",
            )
            loss = (1 - alpha) * loss + alpha * kl * temperature**2
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(float(loss))
    model.eval()
    return losses


def prune_and_refit(
    model: nn.Module,
    batches: list[dict],
    fraction: float,
    importance_batches: int = 8,
    refit_steps: int = 0,
    refit_lr: float = 3e-5,
    teacher: nn.Module | None = None,
) -> tuple[nn.Module, dict[str, Any]]:
    """A pruned copy of a single-label classifier: heads scored on ``batches``, the least important removed, re-fit.

    Args:
        model: the classifier (left untouched).
        batches: labelled training batches, in the order the re-fit takes them.
        fraction: fraction of all attention heads to remove, in ``[0, 1)``.
        importance_batches: the first batches, which score the heads.
        refit_steps: optimizer steps of re-fitting after pruning.
        refit_lr: learning rate of the re-fit.
        teacher: a teacher whose soft targets join the re-fit's loss.

    Returns:
        ``(pruned model, report fields)``: head counts, pruned heads, re-fit losses and every head's importance.
    """
    pruned = copy.deepcopy(model)
    heads_before = count_heads(pruned)
    importance = head_importance(
        pruned, batches[:importance_batches], lambda out, batch: F.cross_entropy(out.logits, batch["labels"])
    )
    record = prune_heads(pruned, choose_heads(importance, fraction))
    losses = refit(pruned, batches, refit_steps, refit_lr, teacher)
    return pruned, {
        "heads_before": heads_before,
        "heads_after": count_heads(pruned),
        "pruned_heads": record,
        "refit_steps": refit_steps,
        "refit_loss_first_last": [round(losses[0], 4), round(losses[-1], 4)] if losses else None,
        "importance": {k: [round(float(x), 4) for x in v] for k, v in importance.items()},
    }
