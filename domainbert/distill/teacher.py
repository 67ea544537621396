"""The distillation teacher: loaded with its trained head, frozen, run under ``no_grad``, kept out of checkpoints."""

from __future__ import annotations

import contextlib

import torch
from torch import nn
from transformers import PreTrainedModel

from domainbert.core.hf import head_missing, load_config, load_model
from domainbert.errors import DomainBertError
from domainbert.modules.tasks import Task, spec


def load_teacher(path: str, task: Task | str, name: str | None = None) -> PreTrainedModel:
    """The teacher at ``path`` with its ``task`` head, in eval mode with every weight frozen.

    Args:
        path: the teacher's folder (an installed alias already resolved).
        task: the task; the teacher must have a trained head for it.
        name: the teacher as the user named it, for messages.

    Raises:
        DomainBertError: the checkpoint lacks the head's weights (a pretrained encoder, not a fine-tuned model).
    """
    task_spec = spec(task)
    model, missing = load_model(task_spec.auto_cls, path, config=load_config(path))
    if missing_head := head_missing(model, missing):
        raise DomainBertError(
            f"the teacher {name or path} has no trained {task_spec.head} head "
            f"(missing: {', '.join(missing_head[:4])}): distil from a fine-tuned model, e.g. the hf/ export of a "
            "fine-tuning run"
        )
    model.eval()
    model.requires_grad_(False)
    return model


def teacher_labels(config) -> list[str]:
    """The labels of the teacher's head in id order (``LABEL_i`` where it names none)."""
    return [str(config.id2label[i]) for i in range(config.num_labels)]


def is_multi_label(config) -> bool:
    """True for a multi-label classifier (sigmoid outputs)."""
    return getattr(config, "problem_type", None) == "multi_label_classification"


def teacher_autocast(trainer, device: torch.device):
    """bf16 autocast for the teacher's forward pass when the trainer trains in bf16; else nothing."""
    precision = str(getattr(trainer, "precision", "")) if trainer is not None else ""
    if "bf16" in precision:
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def drop_teacher_weights(module: nn.Module, state_dict: dict, prefix: str, local_metadata: dict) -> None:
    """``state_dict`` post-hook: the frozen ``teacher`` is not part of the module's saved state (it is reloaded)."""
    for key in [k for k in state_dict if k.startswith(prefix + "teacher.")]:
        del state_dict[key]
