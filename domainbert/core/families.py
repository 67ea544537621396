"""What differs by model family, in one place: one :class:`Family` record per ``config.model_type``.

A record says where the family's masked-LM head lives (:class:`MlmHead`), which attention projections LoRA adapts
by default, the base model's attribute name (``base_model_prefix``, the first component of its parameter names),
how its position embeddings are offset, and how a distillation student copies its layers (:class:`StudentLayout`).
Every module that treats families differently reads it through :func:`family`. Adding a family is one record in
``_RECORDS`` and its case in ``tests/unit/test_families.py``, which checks each record against a real model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from domainbert.errors import DomainBertError


def attribute(obj: Any, path: str) -> Any:
    """``obj.a.b.c`` for the path ``"a.b.c"``; None where a step is missing."""
    for part in path.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


@dataclass(frozen=True)
class MlmHead:
    """A family's masked-LM head, as attribute paths from its ``AutoModelForMaskedLM`` model.

    Attributes:
        modules: the modules that turn hidden states into vocabulary logits, applied in this order.
        dense: the head's dense transform.
        norm: the LayerNorm after that transform.
        bias: the output bias over the vocabulary.
    """

    modules: tuple[str, ...]
    dense: str
    norm: str
    bias: str

    def logits(self, model: Any, hidden: Any) -> Any:
        """The head applied to ``hidden`` (the encoder's hidden states, at any positions)."""
        for path in self.modules:
            hidden = attribute(model, path)(hidden)
        return hidden


#: a numbered encoder layer in a parameter name (``bert.encoder.layer.3.attention...``)
NUMBERED_LAYER = r"(\.layer\.)(\d+)(\.)"

#: DistilBERT's config names of the generic ones
_DISTILBERT_NAMES = {
    "num_hidden_layers": "n_layers",
    "hidden_size": "dim",
    "num_attention_heads": "n_heads",
    "intermediate_size": "hidden_dim",
    "hidden_dropout_prob": "dropout",
    "attention_probs_dropout_prob": "attention_dropout",
}


@dataclass(frozen=True)
class StudentLayout:
    """How a family's config names its size, and how a student copies the teacher's layers.

    Attributes:
        names: the family's own config names of the generic ones (``num_hidden_layers``, ``hidden_size``...),
            where they differ.
        layer_key: a regular expression of a numbered encoder layer in a parameter name, with three groups
            (before the number, the number, after it); a student renumbers the teacher layers it copies.
            None: the family shares one set of layer weights across its depth (ALBERT), so a student keeps
            them and only applies them fewer times.
    """

    names: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    layer_key: str | None = NUMBERED_LAYER

    def name(self, generic: str) -> str:
        """The family's config name of the generic ``generic`` (itself where the family uses it)."""
        return self.names.get(generic, generic)


@dataclass(frozen=True)
class Family:
    """What differs for one ``config.model_type``.

    Attributes:
        model_type: ``config.model_type``.
        prefix: the base model's attribute name (``base_model_prefix``), the first component of its weight names.
        mlm_head: the masked-LM head; None where none is described (the full model then computes its logits).
        lora_targets: the attention projections LoRA adapts by default; None where none is known.
        positions_after_padding: position ids start after the padding index (RoBERTa, MPNet), so the first
            ``padding_idx + 1`` position embeddings are never used.
        padding_idx: that padding index where the family fixes it; None: the config's ``pad_token_id``.
        student: how a student of this family is sized and copied.
    """

    model_type: str
    prefix: str
    mlm_head: MlmHead | None = None
    lora_targets: tuple[str, ...] | None = None
    positions_after_padding: bool = False
    padding_idx: int | None = None
    student: StudentLayout = StudentLayout()

    def position_offset(self, config: Any) -> int:
        """How many position embeddings come before the first token's (``padding_idx + 1``, or 0)."""
        if not self.positions_after_padding:
            return 0
        pad = self.padding_idx if self.padding_idx is not None else getattr(config, "pad_token_id", None)
        return (1 if pad is None else pad) + 1


_BERT_HEAD = MlmHead(
    ("cls.predictions",),
    "cls.predictions.transform.dense",
    "cls.predictions.transform.LayerNorm",
    "cls.predictions.bias",
)
_ROBERTA_HEAD = MlmHead(("lm_head",), "lm_head.dense", "lm_head.layer_norm", "lm_head.bias")
_QUERY_VALUE = ("query", "value")


def _roberta_like(model_type: str) -> Family:
    return Family(model_type, "roberta", _ROBERTA_HEAD, _QUERY_VALUE, positions_after_padding=True)


_RECORDS = (
    Family("bert", "bert", _BERT_HEAD, _QUERY_VALUE),
    _roberta_like("roberta"),
    _roberta_like("xlm-roberta"),
    _roberta_like("camembert"),
    Family(
        "albert",
        "albert",
        MlmHead(("predictions",), "predictions.dense", "predictions.LayerNorm", "predictions.bias"),
        _QUERY_VALUE,
        student=StudentLayout(layer_key=None),
    ),
    Family(
        "distilbert",
        "distilbert",
        MlmHead(
            ("vocab_transform", "activation", "vocab_layer_norm", "vocab_projector"),
            "vocab_transform",
            "vocab_layer_norm",
            "vocab_projector.bias",
        ),
        ("q_lin", "v_lin"),
        student=StudentLayout(names=MappingProxyType(_DISTILBERT_NAMES)),
    ),
    Family(
        "electra",
        "electra",
        MlmHead(
            ("generator_predictions", "generator_lm_head"),
            "generator_predictions.dense",
            "generator_predictions.LayerNorm",
            "generator_lm_head.bias",
        ),
        _QUERY_VALUE,
    ),
    Family("deberta", "deberta"),
    Family("deberta-v2", "deberta", lora_targets=("query_proj", "value_proj")),
    Family("mpnet", "mpnet", lora_targets=("q", "v"), positions_after_padding=True, padding_idx=1),
)

#: every known family, by ``model_type``
FAMILIES: Mapping[str, Family] = MappingProxyType({f.model_type: f for f in _RECORDS})


def model_type_of(model_type_or_config: Any) -> str | None:
    """The ``model_type`` of a string, a config, or a model (its ``config``)."""
    if model_type_or_config is None or isinstance(model_type_or_config, str):
        return model_type_or_config
    config = getattr(model_type_or_config, "config", model_type_or_config)
    return getattr(config, "model_type", None)


def family(model_type_or_config: Any, *, fallback: bool = False) -> Family:
    """The record of a model family.

    Args:
        model_type_or_config: a ``model_type`` string, a ``transformers`` config, or a model.
        fallback: for an unknown family, return what domainbert assumes of any encoder (its base model named
            after its ``model_type``, no MLM head or LoRA targets described, positions from 0, ``layer.<i>``
            layers) instead of raising.

    Raises:
        DomainBertError: for an unknown family (without ``fallback``), naming it and the known ones.
    """
    model_type = model_type_of(model_type_or_config)
    record = FAMILIES.get(model_type)
    if record is not None:
        return record
    if fallback:
        return Family(str(model_type), str(model_type))
    raise DomainBertError(f"model_type {model_type!r}: not a known model family (known: {', '.join(FAMILIES)})")


def max_positions(config: Any, default: int | None = None) -> int | None:
    """The longest input the config's position embeddings hold (``max_position_embeddings`` less the offset).

    Args:
        config: a ``transformers`` config of any family (an unknown one has no offset).
        default: the table size to assume where the config has no ``max_position_embeddings``; None returns None.
    """
    size = getattr(config, "max_position_embeddings", None)
    size = default if size is None else size
    if size is None:
        return None
    return size - family(config, fallback=True).position_offset(config)
