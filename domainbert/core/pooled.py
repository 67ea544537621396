"""A sequence classifier over the *mean* of the token states, for any encoder family.

Sentence-embedding checkpoints (all-MiniLM-L6-v2 and other sentence-transformers models) were trained so that
the mean of their token states is the text's representation; BERT's ``[CLS]`` pooler in such a checkpoint is
left over from an earlier stage. ``transformers`` has no mean-pooling classification head, so this module
builds one per family: the family's own ``PreTrainedModel`` base (its config class, weight names, initialiser,
gradient checkpointing), its encoder without pooler, dropout and a linear layer.

Exports are Hugging Face folders whose ``config.json`` carries ``classifier_pooling: mean``, a ``model_type`` of
domainbert's own (:data:`MODEL_TYPE`, the family's in :data:`FAMILY_KEY`) and an ``auto_map`` to
``modeling_domainbert.py``, written beside the weights. transformers does not know that model type, so plain
``AutoModelForSequenceClassification.from_pretrained(path)`` or ``pipeline(...)`` fails with its own error asking for
``trust_remote_code=True`` instead of loading the family's ``[CLS]`` head with a random pooler (which would answer
wrong); with it, they load this class and give domainbert's logits. domainbert itself never runs that file:
:func:`family_config` reads the config as the family's and :func:`pooled_class` builds the same class from this
module. Exports written before (``model_type`` the family's) still load in domainbert.
"""

from __future__ import annotations

import inspect

import torch
from torch import nn
from transformers import MODEL_MAPPING, PretrainedConfig
from transformers.modeling_outputs import SequenceClassifierOutput

#: the config key that marks a mean-pooling classifier
POOLING_KEY = "classifier_pooling"
#: the remote-code file written into exports
MODELING_FILE = "modeling_domainbert.py"
#: the ``model_type`` of a mean-pooling export's ``config.json``: unknown to transformers, so it asks for remote code
MODEL_TYPE = "domainbert-mean-pooling"
#: the config key of such an export that names the encoder family's own ``model_type``
FAMILY_KEY = "domainbert_model_type"


class MeanPoolingHead:
    """The mean-pooling classifier's own parts; mixed into the family's ``PreTrainedModel`` base."""

    def _build(self, config) -> None:
        encoder_cls = self._encoder_cls
        try:
            encoder = encoder_cls(config, add_pooling_layer=False)
        except TypeError:  # families without a pooler (DistilBERT, ELECTRA) take no such argument
            encoder = encoder_cls(config)
        setattr(self, self.base_model_prefix, encoder)
        p = None  # each family's own name for the classifier dropout first, then its hidden dropout
        for name in ("classifier_dropout", "classifier_dropout_prob", "seq_classif_dropout", "hidden_dropout_prob"):
            if p is None:
                p = getattr(config, name, None)
        if p is None:
            p = getattr(config, "dropout", None)
        self.dropout = nn.Dropout(p or 0.0)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        output_attentions: bool | None = None,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs,
    ) -> SequenceClassifierOutput:
        """Logits from the mean of the token states (padding excluded); cross-entropy loss when labels are given."""
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "inputs_embeds": inputs_embeds}
        if token_type_ids is not None:
            inputs["token_type_ids"] = token_type_ids
        out = getattr(self, self.base_model_prefix)(
            **inputs, output_hidden_states=output_hidden_states, output_attentions=output_attentions, return_dict=True
        )
        hidden = out.last_hidden_state
        if attention_mask is None:
            attention_mask = torch.ones(hidden.shape[:2], device=hidden.device)
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        logits = self.classifier(self.dropout(pooled))
        loss = None
        if labels is not None:
            if self.config.problem_type == "multi_label_classification":
                loss = nn.functional.binary_cross_entropy_with_logits(logits.float(), labels.float())
            else:
                loss = nn.functional.cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.view(-1))
        return SequenceClassifierOutput(
            loss=loss, logits=logits, hidden_states=out.hidden_states, attentions=out.attentions
        )


def _family(config: PretrainedConfig) -> tuple[type, type]:
    """The family's base model class (``BertModel``) and its ``PreTrainedModel`` base (``BertPreTrainedModel``)."""
    try:
        encoder_cls = MODEL_MAPPING[type(config)]
    except KeyError as err:
        from domainbert.errors import DomainBertError

        raise DomainBertError(f"pooling=mean: no encoder class is known for model_type {config.model_type!r}") from err
    base = next(c for c in encoder_cls.__mro__[1:] if c.__name__.endswith("PreTrainedModel"))
    return encoder_cls, base


_CLASSES: dict[type, type] = {}


def pooled_class(config: PretrainedConfig) -> type:
    """The mean-pooling classifier class of ``config``'s family (built once per family)."""
    encoder_cls, base = _family(config)
    if encoder_cls not in _CLASSES:
        name = "MeanPooling" + encoder_cls.__name__.removesuffix("Model") + "ForSequenceClassification"

        def __init__(self, config):  # noqa: N807
            base.__init__(self, config)
            self._build(config)
            self.post_init()

        _CLASSES[encoder_cls] = type(
            name, (MeanPoolingHead, base), {"__init__": __init__, "_encoder_cls": encoder_cls, "__module__": __name__}
        )
    return _CLASSES[encoder_cls]


def is_mean_pooled(config: PretrainedConfig) -> bool:
    """True for configs saved by a mean-pooling classifier."""
    return getattr(config, POOLING_KEY, None) == "mean"


def mark_config(config: PretrainedConfig) -> None:
    """Record the pooling, the architecture and the remote-code entry point in ``config`` (before saving)."""
    cls = pooled_class(config)
    setattr(config, POOLING_KEY, "mean")
    config.architectures = [cls.__name__]
    config.auto_map = {"AutoModelForSequenceClassification": f"modeling_domainbert.{cls.__name__}"}


def unmark_config(config: PretrainedConfig) -> None:
    """Undo :func:`mark_config` (a mean-pooling export fine-tuned again with the family's own head)."""
    if getattr(config, POOLING_KEY, None) is not None:
        setattr(config, POOLING_KEY, None)
    if is_own_code(getattr(config, "auto_map", None)):
        del config.auto_map


def is_own_code(auto_map) -> bool:
    """True for an ``auto_map`` whose every entry points into domainbert's ``modeling_domainbert.py``."""
    if not isinstance(auto_map, dict) or not auto_map:
        return False
    refs = [r for v in auto_map.values() for r in (v if isinstance(v, list | tuple) else [v]) if r]
    return bool(refs) and all(str(r).startswith("modeling_domainbert.") for r in refs)


def is_export_dict(data) -> bool:
    """True for the ``config.json`` contents of a mean-pooling export (domainbert's :data:`MODEL_TYPE`)."""
    return isinstance(data, dict) and data.get("model_type") == MODEL_TYPE


def family_config(data: dict, where: str, **kwargs) -> PretrainedConfig:
    """The family's own config (``BertConfig``...) of a mean-pooling export, from its ``config.json`` contents.

    Args:
        data: the contents of ``config.json``.
        where: the file, for errors.
        **kwargs: attributes to set over the file's (as ``from_pretrained`` takes them).

    Raises:
        DomainBertError: :data:`FAMILY_KEY` names no model type transformers knows.
    """
    from transformers import CONFIG_MAPPING

    from domainbert.errors import DomainBertError

    family = data.get(FAMILY_KEY)
    if not isinstance(family, str) or family not in CONFIG_MAPPING:
        raise DomainBertError(
            f"{where}: field {FAMILY_KEY!r}: expected the encoder's model_type (bert, roberta...), got {family!r}"
        )
    plain = {k: v for k, v in data.items() if k not in (FAMILY_KEY, "auto_map")}
    plain["model_type"] = family
    return CONFIG_MAPPING[family].from_dict(plain, **kwargs)


def config_class_name(cls: type) -> str:
    """The name of the remote-code config class written for the classifier class ``cls``."""
    return cls.__name__.removesuffix("ForSequenceClassification") + "Config"


def export_config(data: dict, cls: type) -> dict:
    """``config.json``'s contents (``data``, as ``save_pretrained`` wrote them) as a mean-pooling export writes them.

    The family's ``model_type`` moves to :data:`FAMILY_KEY` and domainbert's :data:`MODEL_TYPE` takes its place;
    ``auto_map`` names the config and classifier classes of ``modeling_domainbert.py``.
    """
    out = dict(data)
    family = out.get(FAMILY_KEY) if is_export_dict(out) else out.get("model_type")
    out.update({"model_type": MODEL_TYPE, FAMILY_KEY: family, POOLING_KEY: "mean"})
    out["auto_map"] = {
        "AutoConfig": f"modeling_domainbert.{config_class_name(cls)}",
        "AutoModelForSequenceClassification": f"modeling_domainbert.{cls.__name__}",
    }
    return out


def modeling_source(model: nn.Module) -> str:
    """The self-contained ``modeling_domainbert.py`` of ``model``'s class, to write into its export."""
    cls = type(model)
    encoder_cls, base = cls._encoder_cls, next(c for c in cls.__mro__ if c.__name__.endswith("PreTrainedModel"))
    config_cls = encoder_cls.config_class
    head = inspect.getsource(MeanPoolingHead)
    text = f'''"""Mean-pooling sequence classifier written by domainbert; load with trust_remote_code=True."""

import torch
from torch import nn
from transformers.modeling_outputs import SequenceClassifierOutput
from {config_cls.__module__} import {config_cls.__name__}
from {encoder_cls.__module__} import {encoder_cls.__name__}, {base.__name__}


class {config_class_name(cls)}({config_cls.__name__}):
    """{config_cls.__name__} under domainbert's model type, which transformers loads only with this file."""

    model_type = {MODEL_TYPE!r}


{head}

class {cls.__name__}(MeanPoolingHead, {base.__name__}):
    """Encoder without pooler, mean of the token states, dropout, linear."""

    config_class = {config_class_name(cls)}
    _encoder_cls = {encoder_cls.__name__}

    def __init__(self, config):
        {base.__name__}.__init__(self, config)
        self._build(config)
        self.post_init()
'''
    return text
