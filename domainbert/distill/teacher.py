"""The distillation teacher: loaded with its trained head, frozen, run under ``no_grad``, kept out of checkpoints.

A teacher is one fine-tuned model, or several whose class probabilities are averaged (:class:`TeacherEnsemble`:
the seeds' ensemble moved into one student, Hinton et al. 2015). A teacher that tokenizes differently from the
student reads the student's tokens decoded back to text (:class:`Retokenized`), so a larger model of another
family can teach a smaller one; only its logits are distilled.
"""

from __future__ import annotations

import contextlib
import functools
import inspect

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import SequenceClassifierOutput

from domainbert.core.hf import check_weights_fit, head_missing, load_config, load_model
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
    check_weights_fit(
        f"the teacher {name or path} has no trained {task_spec.head} head",
        head_missing(model, missing),
        fix="distil from a fine-tuned model, e.g. the hf/ export of a fine-tuning run",
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


class TeacherEnsemble(nn.Module):
    """Several teachers with one label set as one: the logarithm of their mean class probabilities.

    Multi-label members average their per-label probabilities (returned as logits again). Hidden states and
    attention maps are the first member's: the hidden-state and attention losses read that member alone.

    Examples:
        >>> import torch
        >>> class Fixed(nn.Module):
        ...     def __init__(self, logits):
        ...         super().__init__()
        ...         self.out = torch.tensor([logits])
        ...     def forward(self, **inputs):
        ...         return SequenceClassifierOutput(logits=self.out)
        >>> ensemble = TeacherEnsemble([Fixed([0.0, 0.0]), Fixed([0.0, 100.0])])
        >>> ensemble(input_ids=None).logits.softmax(-1)  # (0.5, 0.5) and (0, 1) averaged
        tensor([[0.2500, 0.7500]])
    """

    def __init__(self, members: list[nn.Module], multi_label: bool = False) -> None:
        """Keep the members (each already frozen), the first one's config as the ensemble's."""
        super().__init__()
        self.members = nn.ModuleList(members)
        self.multi_label = multi_label
        self.config = getattr(members[0], "config", None)

    def forward(self, **inputs) -> SequenceClassifierOutput:
        outs = [member(**model_inputs(member, inputs)) for member in self.members]
        logits = torch.stack([o.logits.float() for o in outs])
        if self.multi_label:
            p = torch.sigmoid(logits).mean(0).clamp(1e-7, 1 - 1e-7)
            mean = torch.log(p) - torch.log1p(-p)
        else:
            mean = torch.logsumexp(torch.log_softmax(logits, -1), 0) - torch.log(torch.tensor(float(len(outs))))
        first = outs[0]
        return SequenceClassifierOutput(
            logits=mean,
            hidden_states=getattr(first, "hidden_states", None),
            attentions=getattr(first, "attentions", None),
        )


class Retokenized(nn.Module):
    """A sequence classifier with a tokenizer of its own, called with another tokenizer's token ids.

    The ids are decoded back to text with the student's tokenizer (padding and special tokens left out) and
    tokenized again with the teacher's, up to ``max_length``; only the logits come back (token positions of two
    tokenizers do not correspond, so there are no hidden states or attention maps to compare).

    Args:
        model: the teacher (frozen).
        tokenizer: the teacher's tokenizer.
        student_tokenizer: the tokenizer whose ids the calls bring.
        max_length: the teacher's longest input.
    """

    def __init__(self, model: nn.Module, tokenizer, student_tokenizer, max_length: int = 512) -> None:
        super().__init__()
        self.model = model
        self.tokenizer = tokenizer
        self.student_tokenizer = student_tokenizer
        self.max_length = max_length
        self.config = model.config

    def texts(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> list[str]:
        """The texts behind a batch of the student's token ids."""
        rows = (
            input_ids.tolist()
            if attention_mask is None
            else [r[m.bool()].tolist() for r, m in zip(input_ids, attention_mask)]
        )
        return self.student_tokenizer.batch_decode(rows, skip_special_tokens=True)

    def forward(self, input_ids, attention_mask=None, **kw) -> SequenceClassifierOutput:
        texts = self.texts(input_ids, attention_mask)
        enc = self.tokenizer(texts, truncation=True, max_length=self.max_length, padding=True, return_tensors="pt")
        enc = {k: v.to(input_ids.device) for k, v in enc.items() if k in self.tokenizer.model_input_names}
        return SequenceClassifierOutput(logits=self.model(**enc, return_dict=True).logits)


def teacher_max_length(tokenizer, model) -> int:
    """The longest input a teacher takes: its tokenizer's limit, capped by its position embeddings."""
    limits = [getattr(tokenizer, "model_max_length", None), getattr(model.config, "max_position_embeddings", None)]
    limits = [int(x) for x in limits if isinstance(x, int) and 0 < x < 10**6]
    return min(limits) if limits else 512


@functools.cache
def accepted_inputs(cls) -> frozenset[str] | None:
    """The keyword arguments a model class's ``forward`` takes (DistilBERT takes no ``token_type_ids``).

    None when it takes any (``**kwargs``).
    """
    params = inspect.signature(cls.forward).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return None
    return frozenset(params)


def model_inputs(model: nn.Module, inputs: dict) -> dict:
    """``inputs`` less the keyword arguments ``model``'s ``forward`` does not take."""
    accepted = accepted_inputs(type(model))
    return dict(inputs) if accepted is None else {k: v for k, v in inputs.items() if k in accepted}
