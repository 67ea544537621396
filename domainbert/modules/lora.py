"""LoRA through ``peft``: per-family target modules, a trained task head, and merged exports.

Fine-tuning modules and the masked-LM module take ``lora: LoraSettings | None``; ``None`` means the whole model
trains, and a value (even ``{}``, all defaults) switches to LoRA. The encoder is frozen, low-rank adapters are added
to the attention projections its family's record names (:mod:`domainbert.core.families`), and the task head is
trained in full. A fine-tuning head (``classifier``, ``qa_outputs``...) is saved with the adapter (peft's
``modules_to_save``, :func:`apply_lora`); the masked-LM head is left outside peft, trainable as it is
(:func:`apply_encoder_lora`), since its decoder is tied to the encoder's input embeddings, which stay frozen.
:func:`merged` folds the adapters into a plain ``transformers`` model for export.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Literal

from torch import nn

from domainbert.core import settings
from domainbert.core.families import FAMILIES, family
from domainbert.errors import DomainBertError
from domainbert.modules.tasks import Task, spec

#: The ``bias`` values peft's LoRA takes.
BIASES = ("none", "all", "lora_only")


@dataclass
class LoraSettings:
    """LoRA hyperparameters.

    Attributes:
        r: rank of the adapters.
        alpha: scaling numerator (``lora_alpha``); the update is scaled by ``alpha / r``.
        dropout: dropout on the adapter input.
        target_modules: module names to adapt; None picks the family's attention query and value.
        bias: which biases to train: ``none``, ``all`` or ``lora_only``.
    """

    r: int = 8
    alpha: int = 16
    dropout: float = 0.1
    target_modules: list[str] | None = None
    bias: Literal["none", "all", "lora_only"] = "none"

    def __post_init__(self) -> None:
        """Refuse a ``bias`` peft does not know (a traceback from inside peft otherwise).

        Raises:
            SettingError: naming ``bias`` and the three choices.
        """
        settings.one_of(self.bias, "bias", BIASES)


def as_settings(value: LoraSettings | dict | None) -> LoraSettings | None:
    """Accept a :class:`LoraSettings`, a plain dict of its fields (as stored in hparams), or None."""
    return settings.as_settings(LoraSettings, value, "lora")


def target_modules(model_type: str) -> list[str]:
    """The attention projections to adapt for a model family.

    Raises:
        DomainBertError: for a family without a known default (name them in ``lora.target_modules``).
    """
    targets = family(model_type, fallback=True).lora_targets
    if targets is None:
        known = sorted(name for name, f in FAMILIES.items() if f.lora_targets is not None)
        raise DomainBertError(
            f"lora: no default target modules for model_type {model_type!r}; set model.lora.target_modules "
            f"(known families: {known})"
        )
    return list(targets)


def head_modules(model: nn.Module) -> list[str]:
    """Names of the task-head children of a ``transformers`` model: everything but the encoder that has weights."""
    base = getattr(model, "base_model_prefix", "")
    return [name for name, child in model.named_children() if name != base and any(True for _ in child.parameters())]


def apply_lora(
    model: nn.Module, settings: LoraSettings, task: Task | str = Task.CLASSIFICATION, new_keys: list[str] | tuple = ()
) -> nn.Module:
    """Wrap ``model`` in a peft model: adapters on the targets, the task head trained and saved in full.

    Args:
        model: a ``transformers`` model with a task head.
        settings: the LoRA hyperparameters.
        task: ``classification``, ``tagging`` or ``qa`` (:class:`~domainbert.modules.tasks.Task`; the older
            ``seq_cls`` and ``token_cls`` are accepted). The masked-LM head takes :func:`apply_encoder_lora`.
        new_keys: weights the checkpoint lacked (initialised at random, such as BERT's pooler on an MLM
            checkpoint); their modules are trained in full too, since a frozen random layer would stay random.
    """
    from peft import LoraConfig

    peft_type = spec(task).peft_type
    if peft_type is None:
        raise DomainBertError(
            f"lora: apply_lora applies to classification, tagging and qa heads, not to {Task.parse(task)} "
            "(a masked-LM model takes apply_encoder_lora)"
        )
    heads = head_modules(model)
    extra = sorted({k.rsplit(".", 1)[0] for k in new_keys if "." in k})
    extra = [m for m in extra if m.split(".", 1)[0] not in heads]
    targets = settings.target_modules or target_modules(model.config.model_type)
    config = LoraConfig(
        task_type=peft_type,
        r=settings.r,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=list(targets),
        bias=settings.bias,
        modules_to_save=heads + extra,
    )
    return _wrap(model, config)


def apply_encoder_lora(model: nn.Module, settings: LoraSettings, new_keys: list[str] | tuple = ()) -> nn.Module:
    """Adapters on the base encoder's targets only; every weight outside the encoder stays trainable, in place.

    For heads that peft's ``modules_to_save`` cannot copy cleanly: the masked-LM head's decoder is tied to the input
    embeddings, and a saved copy would untie it. The head is left outside peft instead: the encoder's weights are
    frozen (the tied decoder with them), the adapters and the head's own weights (transform, LayerNorm, output bias;
    a next-sentence head) train. ``model`` itself is changed in place (adapters inserted, ``requires_grad`` set);
    the returned peft model wraps it, for :func:`merged`.

    Args:
        model: a ``transformers`` model with a head on its base encoder (``AutoModelForMaskedLM``).
        settings: the LoRA hyperparameters; ``target_modules`` are matched inside the encoder only.
        new_keys: weights the checkpoint lacked; those inside the encoder (a pooler) train in full.

    Raises:
        DomainBertError: no encoder module matches the targets, or peft refuses one.
    """
    from peft import LoraConfig

    config = LoraConfig(
        r=settings.r,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=encoder_targets(model, settings),
        bias=settings.bias,
    )
    wrapped = _wrap(model, config)
    encoder = {id(p) for p in model.base_model.parameters()}
    new = set(new_keys)
    for name, p in model.named_parameters():
        if id(p) not in encoder or name in new:
            p.requires_grad_(True)
    return wrapped


def encoder_targets(model: nn.Module, settings: LoraSettings) -> list[str]:
    """Full names of the base encoder's modules to adapt: those whose name ends with ``.<target>``.

    Raises:
        DomainBertError: none matches.
    """
    names = settings.target_modules or target_modules(model.config.model_type)
    prefix = model.base_model_prefix + "."
    found = [
        n
        for n, _ in model.named_modules()
        if n.startswith(prefix) and any(n == prefix + t or n.endswith("." + t) for t in names)
    ]
    if not found:
        raise DomainBertError(
            f"lora.target_modules={list(names)}: no module of the {model.config.model_type} encoder "
            f"({model.base_model_prefix}) is named so; name its attention or feed-forward layers (query, value, dense)"
        )
    return found


def _wrap(model: nn.Module, config) -> nn.Module:
    """``get_peft_model``, its refusals as :class:`DomainBertError` (and without peft's own deprecation noise)."""
    import warnings

    from peft import get_peft_model

    try:
        with warnings.catch_warnings():  # peft 0.21 reads transformers 5's deprecated ``is_gradient_checkpointing``
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing", category=FutureWarning)
            return get_peft_model(model, config)
    except (ValueError, TypeError, KeyError, NotImplementedError) as err:  # peft's refusals of a setting
        detail = " ".join(str(err).split()) or type(err).__name__
        raise DomainBertError(f"lora: peft refused the settings: {detail}") from err


def is_peft(model: nn.Module) -> bool:
    """True for a peft-wrapped model."""
    try:
        from peft import PeftModel
    except ImportError:  # pragma: no cover - peft is a dependency
        return False
    return isinstance(model, PeftModel)


def merged(model: nn.Module) -> nn.Module:
    """A plain ``transformers`` model with the adapters merged in (``merge_and_unload`` on a copy).

    The model being trained is left as it is; a model without adapters is returned unchanged.
    """
    if not is_peft(model):
        return model
    plain = copy.deepcopy(model).merge_and_unload()
    plain.train(model.training)
    return plain
