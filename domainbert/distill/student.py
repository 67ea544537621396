"""Building a distillation student: from a config, from the teacher's own layers, or from a checkpoint.

- :func:`student_from_teacher` copies the embeddings, every k-th encoder layer and the task head of the
  teacher (DistilBERT's initialisation, Sanh et al. 2019). BERT, RoBERTa, ELECTRA and DistilBERT number
  their layers (``...layer.<i>.``); ALBERT shares one set of layer weights across its depth, so for ALBERT
  the student keeps the shared weights and only applies them fewer times (faster, but not smaller).
- :func:`student_from_config` builds a randomly initialised student from the teacher's config with
  overrides (fewer layers, a smaller width), so the vocabulary and the label set stay the teacher's.
- :func:`student_from_checkpoint` loads any smaller checkpoint (and may cut it to some of its own layers);
  :func:`check_same_tokenizer` then makes sure both models read the same token ids, unless the student may keep
  a tokenizer of its own (classification: the teacher reads the student's tokens as text).

:func:`build_student` picks one of the three from ``DistillationModule``'s arguments. Every function takes the
task by its name (:class:`domainbert.modules.tasks.Task`), which picks the head class.
"""

from __future__ import annotations

import copy
import logging
import re

from transformers import AutoConfig, PreTrainedModel

from domainbert.core.families import family
from domainbert.core.hf import check_tokenizer_fits, load_config, load_model, load_tokenizer
from domainbert.core.models_local import resolve_local_alias
from domainbert.errors import DomainBertError
from domainbert.modules.tasks import Task, spec

log = logging.getLogger(__name__)


def auto_class(task: Task | str):
    """The ``transformers`` auto class of ``task``'s head; a clear error for an unknown task."""
    return spec(task).auto_cls


def _layout(config):
    """The student layout of ``config``'s family (:mod:`domainbert.core.families`); generic for an unknown one."""
    return family(config, fallback=True).student


def num_layers(config) -> int:
    """The encoder depth of a config of any supported family."""
    return int(getattr(config, _layout(config).name("num_hidden_layers")))


def hidden_width(config) -> int:
    """The hidden size of a config of any supported family."""
    return int(getattr(config, _layout(config).name("hidden_size")))


def set_num_layers(config, n: int) -> None:
    """Set the encoder depth under the family's own attribute name."""
    setattr(config, _layout(config).name("num_hidden_layers"), n)


def select_layers(student_layers: int, teacher_layers: int, strategy: str = "every_k") -> list[int]:
    """The 0-based teacher layers a ``student_layers``-deep student is copied from.

    Args:
        student_layers: the student's depth ``S``.
        teacher_layers: the teacher's depth ``T``.
        strategy: ``every_k``: the top layer of each block of ``T/S`` layers (6 -> 3 copies 1, 3, 5; the same
            layers TinyBERT's uniform map matches); ``spread``: evenly spaced from the first to the last
            layer (DistilBERT's 12 -> 6 copies 0, 2, 4, 7, 9, 11).
    """
    if not 1 <= student_layers <= teacher_layers:
        raise DomainBertError(
            f"student_layers={student_layers}: expected between 1 and the teacher's {teacher_layers} layers"
        )
    if strategy == "every_k":
        return [round((m + 1) * teacher_layers / student_layers) - 1 for m in range(student_layers)]
    if strategy == "spread":
        if student_layers == 1:
            return [teacher_layers - 1]
        step = (teacher_layers - 1) / (student_layers - 1)
        return [int(i * step + 0.5) for i in range(student_layers)]
    raise DomainBertError(f"layer_selection={strategy!r}: expected 'every_k' or 'spread'")


def copied_layer_map(selected: list[int]) -> dict[int, int]:
    """The hidden-state layer map of a student copied from teacher layers ``selected`` (0 = embeddings)."""
    return {0: 0, **{m + 1: t + 1 for m, t in enumerate(selected)}}


def student_from_teacher(teacher: PreTrainedModel, layers: int | list[int], strategy: str = "every_k"):
    """A student of the teacher's class with the teacher's embeddings, head and chosen layers.

    Args:
        teacher: the teacher model (any task head).
        layers: the student's depth (layers chosen by ``strategy``), or the 0-based teacher layers to copy.
        strategy: ``every_k`` or ``spread`` (see :func:`select_layers`).

    Returns:
        ``(student, selected)``: the new model and the teacher layers it was copied from.
    """
    depth = num_layers(teacher.config)
    if isinstance(layers, int):
        selected = select_layers(layers, depth, strategy)
    else:
        selected = [int(i) for i in layers]
        bad = [i for i in selected if not 0 <= i < depth]
        if not selected or bad:
            raise DomainBertError(f"student_layers={layers}: teacher layers are numbered 0..{depth - 1}")
    config = copy.deepcopy(teacher.config)
    set_num_layers(config, len(selected))
    student = type(teacher)(config)
    layer_key = _layout(config).layer_key
    if layer_key is None:
        log.warning(
            "%s shares one set of layer weights across its depth: the student keeps them and applies them "
            "%d times instead of %d (faster, not smaller)",
            config.model_type,
            len(selected),
            depth,
        )
    source = teacher.state_dict()
    state = {}
    for key in student.state_dict():
        src = key if layer_key is None else _renumbered(key, layer_key, selected)
        if src not in source:
            raise DomainBertError(f"cannot copy {key} into the student: the teacher has no weight {src}")
        state[key] = source[src].detach().clone()
    student.load_state_dict(state, strict=True)
    return student, selected


def _renumbered(key: str, layer_key: str, selected: list[int]) -> str:
    """The teacher's name of the student weight ``key``: student layer ``i`` is teacher layer ``selected[i]``."""
    return re.sub(layer_key, lambda m: f"{m.group(1)}{selected[int(m.group(2))]}{m.group(3)}", key, count=1)


def student_from_config(teacher_config, overrides: dict, task: Task | str):
    """A randomly initialised student: the teacher's config with ``overrides`` (fewer layers, smaller width).

    Generic names (``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``, ``intermediate_size``)
    are mapped onto the family's own (DistilBERT's, :mod:`domainbert.core.families`). ``model_type`` switches
    family (the vocabulary size, special token ids and label set stay the teacher's).
    """
    overrides = dict(overrides)
    model_type = overrides.pop("model_type", teacher_config.model_type)
    if model_type != teacher_config.model_type:
        keep = {
            k: getattr(teacher_config, k)
            for k in ("vocab_size", "pad_token_id", "num_labels", "id2label", "label2id", "problem_type")
            if getattr(teacher_config, k, None) is not None
        }
        keep["max_position_embeddings"] = getattr(teacher_config, "max_position_embeddings", 512)
        try:
            config = AutoConfig.for_model(model_type, **keep)
        except ValueError as err:
            raise DomainBertError(f"student_config.model_type={model_type!r}: {err}") from err
    else:
        config = copy.deepcopy(teacher_config)
    layout = _layout(config)
    for key, value in overrides.items():
        key = layout.name(key)
        if not hasattr(config, key):
            raise DomainBertError(f"student_config.{key}: {config.model_type} configs have no such field")
        setattr(config, key, value)
    try:
        return auto_class(task).from_config(config)
    except ValueError as err:
        raise DomainBertError(f"student_config {overrides}: {err}") from err


def tokenizer_difference(teacher_tok, student_tok) -> str | None:
    """None when both tokenizers map every token (and special token) to the same id; else what differs."""
    a, b = teacher_tok.get_vocab(), student_tok.get_vocab()
    if a != b:
        only_t = sorted(set(a) - set(b))
        only_s = sorted(set(b) - set(a))
        moved = sorted(k for k in set(a) & set(b) if a[k] != b[k])
        parts = [f"teacher has {len(a)} tokens, student {len(b)}"]
        if only_t:
            parts.append(f"{len(only_t)} only in the teacher (e.g. {only_t[:3]})")
        if only_s:
            parts.append(f"{len(only_s)} only in the student (e.g. {only_s[:3]})")
        if moved:
            parts.append(f"{len(moved)} with different ids (e.g. {moved[:3]})")
        return "; ".join(parts)
    for attr in ("cls_token_id", "sep_token_id", "pad_token_id", "mask_token_id", "unk_token_id"):
        if getattr(teacher_tok, attr, None) != getattr(student_tok, attr, None):
            return f"{attr}: teacher {getattr(teacher_tok, attr, None)}, student {getattr(student_tok, attr, None)}"
    return None


def check_same_tokenizer(teacher_tok, student_tok, teacher: str, student: str) -> None:
    """Raise a DomainBertError when the student's tokenizer differs from the teacher's.

    Distillation feeds the same token ids to both models and, for masked-LM, compares logits over the
    vocabulary, so the vocabularies must be identical.
    """
    diff = tokenizer_difference(teacher_tok, student_tok)
    if diff is not None:
        raise DomainBertError(
            f"the student {student} does not use the teacher's tokenizer ({teacher}): {diff}. Distillation needs "
            "one vocabulary; pick a student trained with the teacher's tokenizer, or build one with "
            "model.student_layers / model.student_config"
        )


def student_from_checkpoint(path: str, task: Task | str, teacher_config, own_vocabulary: bool = False):
    """Load a smaller checkpoint as the student, with the teacher's label set on its head.

    Args:
        path: the checkpoint's folder.
        task: the task (its head class).
        teacher_config: the teacher's config (its label set).
        own_vocabulary: the student may have a vocabulary other than the teacher's.

    Returns:
        ``(student, missing_keys)``: weights the checkpoint lacked (a new task head) are random.
    """
    config = load_config(path)
    if spec(task).labelled:
        for key in ("num_labels", "id2label", "label2id", "problem_type"):
            if getattr(teacher_config, key, None) is not None:
                setattr(config, key, getattr(teacher_config, key))
    if not own_vocabulary and getattr(config, "vocab_size", None) != getattr(teacher_config, "vocab_size", None):
        raise DomainBertError(
            f"the student {path} has a vocabulary of {config.vocab_size} tokens and the teacher "
            f"{teacher_config.vocab_size}: distillation needs one tokenizer"
        )
    return load_model(auto_class(task), path, config=config, ignore_mismatched_sizes=True)


def build_student(
    teacher: PreTrainedModel,
    tokenizer,
    task: Task | str,
    student: str | None = None,
    student_layers: int | list[int] | None = None,
    student_config: dict | None = None,
    layer_selection: str = "every_k",
    teacher_name: str = "the teacher",
    own_tokenizer: bool = False,
) -> tuple[PreTrainedModel, dict[int, int] | None, object]:
    """The student from ``student`` (cut to ``student_layers`` when given), ``student_layers`` or ``student_config``.

    Args:
        teacher: the loaded teacher (the first, for several).
        tokenizer: the teacher's tokenizer; a ``student`` checkpoint's own must be the same unless
            ``own_tokenizer``.
        task: the task (its head class).
        student: a smaller checkpoint (folder or installed alias).
        student_layers: the number of layers to copy (of ``student`` when given, else of the teacher), or their
            0-based list.
        student_config: overrides of the teacher's config for a randomly initialised student.
        layer_selection: ``every_k`` or ``spread`` (see :func:`select_layers`).
        teacher_name: the teacher as the user named it, for messages.
        own_tokenizer: a ``student`` checkpoint may keep a tokenizer other than the teacher's.

    Returns:
        ``(student, layer_map, tokenizer)``: the map of the teacher layers a student copied from the teacher came
        from (else None), and the tokenizer the student reads.
    """
    given = [n for n, v in (("student", student), ("student_config", student_config or None)) if v is not None]
    if len(given) > 1 or (not given and student_layers is None):
        raise DomainBertError(
            "give one of model.student (a checkpoint, optionally with model.student_layers of its layers), "
            "model.student_layers (copy teacher layers) and model.student_config (a smaller config); got "
            f"{given + (['student_layers'] if student_layers is not None else []) or 'none'}"
        )
    if student_config and student_layers is not None:
        raise DomainBertError("model.student_config builds a new student: drop model.student_layers beside it")
    layer_map = None
    if student is not None:
        model, tokenizer = _checkpoint_student(
            resolve_local_alias(student), task, teacher.config, tokenizer, teacher_name, student, own_tokenizer
        )
        if student_layers is not None:
            model, selected = student_from_teacher(model, student_layers, layer_selection)
            log.info("student: layers %s of %s copied", selected, student)
    elif student_layers is not None:
        model, selected = student_from_teacher(teacher, student_layers, layer_selection)
        layer_map = copied_layer_map(selected)
        log.info("student: teacher layers %s copied", selected)
    else:
        model = student_from_config(teacher.config, student_config, task)
    check_tokenizer_fits(tokenizer, model, where="student")
    return model, layer_map, tokenizer


def _checkpoint_student(
    path: str, task, teacher_config, tokenizer, teacher_name: str, name: str, own_tokenizer: bool = False
):
    """:func:`student_from_checkpoint` and the tokenizer it reads: its own, checked against the teacher's.

    With ``own_tokenizer`` a student whose tokenizer differs keeps it (the teacher then reads its tokens as text).
    """
    try:
        own = load_tokenizer(path)
    except DomainBertError:
        own = None
    other = own is not None and tokenizer_difference(tokenizer, own) is not None
    model, missing = student_from_checkpoint(path, task, teacher_config, own_vocabulary=own_tokenizer and other)
    if missing:
        log.info("student weights initialised at random: %s", ", ".join(missing))
    if own is None:
        log.warning("%s has no tokenizer; its vocabulary size matches the teacher's, using the teacher's", path)
        return model, tokenizer
    if other and own_tokenizer:
        log.info("the student %s keeps its own tokenizer; the teacher reads its tokens as text", name)
        return model, own
    check_same_tokenizer(tokenizer, own, teacher_name, name)
    return model, tokenizer
