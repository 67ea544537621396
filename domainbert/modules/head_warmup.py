"""A head warm-up shared by pretraining modules: a new head trains alone, the encoder frozen, then everything does.

A module whose objective adds weights of its own on top of the encoder (the MLM head of a checkpoint that lacks
one, TSDAE's decoder cross-attention and LM-head transform) mixes :class:`HeadWarmup` in before
:class:`~domainbert.modules.base.HFModule` and defines :meth:`HeadWarmup.is_head_param`. For the first
``head_warmup_steps`` optimizer steps the encoder's parameters are frozen (``requires_grad`` off, so they get no
gradient and the optimizer, weight decay included, leaves them exactly as they were: weights tied to them are the
same tensors and stay put too) and the head's parameter groups learn at ``head_warmup_lr``; then the encoder is
unfrozen and every group follows the module's main schedule, delayed by the warm-up.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from domainbert.core.compat import ddp_kwargs
from domainbert.errors import DomainBertError

log = logging.getLogger(__name__)


def resolve_head_warmup_steps(value: int | float | None, default: int) -> int:
    """The number of head warm-up steps: ``value``, or ``default`` when it is None.

    Raises:
        DomainBertError: ``value`` is not a whole number of steps >= 0 (names ``model.head_warmup_steps``).
    """
    if value is None:
        return default
    whole = isinstance(value, int | float) and not isinstance(value, bool) and float(value).is_integer()
    if not whole or value < 0:
        raise DomainBertError(f"model.head_warmup_steps={value!r}: expected a whole number of steps >= 0, or null")
    return int(value)


def split_groups(groups: list[dict], is_head: Callable[[str], bool]) -> list[dict]:
    """``groups`` (with ``names``) each split into its head and its encoder parameters, settings kept.

    So each part can follow its own schedule; the split never changes what AdamW computes for a parameter.
    """
    out = []
    for g in groups:
        for head in (True, False):
            idx = [i for i, n in enumerate(g["names"]) if is_head(n) == head]
            if idx:
                out.append({**g, "params": [g["params"][i] for i in idx], "names": [g["names"][i] for i in idx]})
    return out


class HeadWarmup:
    """Mixin: train the head alone for ``head_warmup_steps`` (encoder frozen) at ``head_warmup_lr``, then everything.

    The host sets :attr:`head_warmup_steps` (see :func:`resolve_head_warmup_steps`), saves ``head_warmup_lr`` and
    ``learning_rate`` in its hyperparameters, defines :meth:`is_head_param`, and builds its LR multipliers with
    :meth:`head_warmup_lambdas`. :attr:`encoder_trainable` names the encoder parameters that train once it is
    unfrozen (None: all of them); the rest stay frozen (LoRA's base weights, an unused pooler).
    """

    head_warmup_steps: int = 0
    encoder_trainable: set[str] | None = None
    _encoder_frozen: bool = False

    def is_head_param(self, name: str) -> bool:
        """True for the head's own parameters (named as in ``self.named_parameters()``)."""
        raise NotImplementedError

    def head_groups_apart(self) -> bool:
        """Whether the optimizer keeps head and encoder parameters in separate groups (needed during a warm-up)."""
        return True

    def set_encoder_frozen(self, frozen: bool) -> None:
        """Freeze or unfreeze the encoder (only :attr:`encoder_trainable` when set). Heads stay trainable."""
        trainable = self.encoder_trainable
        for name, p in self.named_parameters():
            if not self.is_head_param(name):
                p.requires_grad_(not frozen and (trainable is None or name in trainable))
        self._encoder_frozen = frozen

    def main_warmup_steps(self, total_steps: int) -> int:
        """Steps of the main schedule's LR warm-up: ``warmup_ratio`` of the steps after the head warm-up."""
        return int(round(self.hparams.warmup_ratio * max(0, total_steps - self.head_warmup_steps)))

    def head_warmup_lambdas(self, groups: list[dict], main: Callable[[int], float]) -> list:
        """Head groups: ``head_warmup_lr`` during the head warm-up, then ``main``; every other group: ``main``.

        ``main`` is the module's schedule delayed by the warm-up (0 before it, so a frozen encoder learns nothing).
        """
        w = self.head_warmup_steps
        ratio = self.hparams.head_warmup_lr / self.hparams.learning_rate

        def head(step: int) -> float:
            return ratio if step < w else main(step)

        return [head if all(self.is_head_param(n) for n in g["names"]) else main for g in groups]

    def trainable_groups(self) -> list[dict]:
        """The host's groups, split into head and encoder parameters (when :meth:`head_groups_apart`).

        An encoder a failed fit left frozen (its ``on_train_end`` never ran) is unfrozen first, so every parameter
        that trains is in a group.
        """
        if self._encoder_frozen:
            self.set_encoder_frozen(False)
        groups = super().trainable_groups()
        return split_groups(groups, self.is_head_param) if self.head_groups_apart() else groups

    def on_fit_start(self) -> None:
        """Refuse a warm-up under DDP that does not allow unused parameters; warn when it outlasts the run.

        Raises:
            DomainBertError: DDP without ``find_unused_parameters`` and ``head_warmup_steps`` > 0 (the frozen encoder
                gets no gradient, which DDP's reducer refuses at the second step).
        """
        super().on_fit_start()
        w, trainer = self.head_warmup_steps, self.trainer
        if w <= 0:
            return
        kwargs = ddp_kwargs(trainer.strategy)
        if kwargs is not None and trainer.world_size > 1 and not kwargs.get("find_unused_parameters"):
            raise DomainBertError(
                f"model.head_warmup_steps={w} freezes the encoder, and DDP refuses parameters without a gradient: "
                "use --trainer.strategy ddp_find_unused_parameters_true, or --model.head_warmup_steps 0"
            )
        total = trainer.estimated_stepping_batches
        if total is not None and total <= w:
            log.warning(
                "model.head_warmup_steps=%d covers the whole run (%s steps): only the head trains, the encoder stays "
                "the base model's",
                w,
                total,
            )

    def on_train_batch_start(self, batch, batch_idx: int) -> None:
        frozen = self.global_step < self.head_warmup_steps
        if frozen != self._encoder_frozen:
            self.set_encoder_frozen(frozen)
            log.info("step %d: encoder %s", self.global_step, "frozen (head warm-up)" if frozen else "unfrozen")

    def on_train_end(self) -> None:
        self.set_encoder_frozen(False)
