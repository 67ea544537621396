"""Loading and saving Hugging Face checkpoints: local folders first, hub names where there is a network."""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from domainbert.core.families import max_positions
from domainbert.core.files import atomic_dir, newest_checkpoint
from domainbert.core.models_local import resolve_local_alias
from domainbert.core.models_local import resolve_package as resolve_package  # re-exported: its home before
from domainbert.core.quiet import quiet_transformers
from domainbert.errors import DomainBertError

log = logging.getLogger(__name__)

#: Config attribute names, per role, across BERT, RoBERTa, ALBERT, DistilBERT and ELECTRA.
DROPOUT_ATTRS = {
    "hidden": ("hidden_dropout_prob", "dropout"),
    "attention": ("attention_probs_dropout_prob", "attention_dropout"),
    "classifier": ("classifier_dropout", "classifier_dropout_prob", "seq_classif_dropout", "qa_dropout"),
}


def check_source(name: str) -> str:
    """Return a local folder for ``name`` (resolving ``pkg:``), or ``name`` if it could be a hub name.

    Raises:
        DomainBertError: a path that does not exist, a file, a folder without ``config.json``, or one whose
            ``config.json`` is not valid JSON.
    """
    name = str(name)
    if name.startswith("pkg:"):
        name = resolve_package(name)
    p = Path(os.path.expanduser(name))
    if p.exists():
        if not p.is_dir():
            raise DomainBertError(f"{name}: expected a Hugging Face model folder, found a file")
        if not (p / "config.json").exists():
            raise DomainBertError(f"{name}: no config.json in this folder; expected a save_pretrained() folder")
        read_config_json(p)
        return str(p)
    if name.startswith((".", "/", "~")) or name.count("/") > 1:
        raise DomainBertError(f"{name}: no such folder (and not a hub name of the form 'org/model')")
    return name


def read_config_json(folder: str | os.PathLike) -> dict:
    """The contents of ``folder/config.json``.

    Raises:
        DomainBertError: the file cannot be read, is not valid JSON (a half-written file, say) or is not an object.
    """
    path = Path(folder) / "config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise DomainBertError(f"{path}: cannot be read ({err.strerror or err})") from err
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise DomainBertError(
            f"{path}: not valid JSON ({err}); the file may be half-written: export or save the model again"
        ) from err
    if not isinstance(data, dict):
        raise DomainBertError(f"{path}: expected a JSON object of config fields, found {type(data).__name__}")
    return data


def check_no_foreign_code(data: dict, folder: str) -> None:
    """Raise if ``config.json`` (``data``) names modelling code of the model's own in ``auto_map``.

    domainbert's own ``modeling_domainbert.py`` (mean-pooling exports) is allowed: domainbert builds that class
    from its own source and never runs the file.
    """
    from domainbert.core.pooled import is_own_code

    auto_map = data.get("auto_map")
    if not auto_map or is_own_code(auto_map):
        return
    names = ", ".join(f"{k} -> {v}" for k, v in auto_map.items()) if isinstance(auto_map, dict) else str(auto_map)
    raise DomainBertError(
        f"{Path(folder) / 'config.json'}: field 'auto_map' names the model's own code ({names}); domainbert does "
        "not run code shipped in a model folder. Use a checkpoint saved as a transformers architecture (load it "
        "once with trust_remote_code=True and save_pretrained() a standard class such as BertModel), or, for a "
        "folder you trust, pass --model.trust_remote_code true where the module offers it (mlm, contrastive, tsdae; "
        "never read from a checkpoint)"
    )


def load_config(name: str, dropout: dict[str, float | None] | None = None, trust_remote_code: bool = False, **kw: Any):
    """Load a model config, applying dropout overrides under each family's own attribute names.

    A mean-pooling export (``model_type`` domainbert's) comes back as its family's config (``BertConfig``...)
    without running its ``modeling_domainbert.py``.

    Raises:
        DomainBertError: an unreadable folder or ``config.json``, a folder with code of its own (unless
            ``trust_remote_code``), a config transformers cannot read, or a dropout outside [0, 1).
    """
    from domainbert.core.pooled import family_config, is_export_dict

    name = check_source(name)
    data = read_config_json(name) if Path(name).is_dir() else None
    if is_export_dict(data):
        config = family_config(data, str(Path(name) / "config.json"), name_or_path=name, **kw)
    else:
        if data is not None and not trust_remote_code:
            check_no_foreign_code(data, name)
        config = _auto_config(name, trust_remote_code, **kw)
    for role, value in (dropout or {}).items():
        if value is None:
            continue
        if not 0.0 <= value < 1.0:
            raise DomainBertError(f"{role}_dropout={value}: expected a probability in [0, 1)")
        for attr in DROPOUT_ATTRS[role]:
            if hasattr(config, attr):
                setattr(config, attr, float(value))
    return config


def _auto_config(name: str, trust_remote_code: bool, **kw: Any):
    """``AutoConfig.from_pretrained``, its failures as one-line DomainBertErrors."""
    try:
        with quiet_transformers():
            return AutoConfig.from_pretrained(name, trust_remote_code=trust_remote_code, **kw)
    except OSError as err:
        if Path(name).is_dir():
            raise DomainBertError(f"{Path(name) / 'config.json'}: transformers cannot read it ({err})") from err
        raise DomainBertError(
            f"could not load the model config from {name!r}: it is not a local folder and the hub could not be "
            f"reached ({err.__class__.__name__}). Pass a local folder."
        ) from err
    except ValueError as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise DomainBertError(f"{name}: transformers cannot load this model's config: {first}") from err


def dropout_values(config) -> dict[str, float]:
    """The dropout probabilities of ``config``, under the attribute names its family uses."""
    return {a: getattr(config, a) for attrs in DROPOUT_ATTRS.values() for a in attrs if hasattr(config, a)}


def training_config(name: str, dropout: dict[str, float | None], trust_remote_code: bool = False):
    """A pretraining stage's config, with its own ``dropout``; and the checkpoint's dropout for its export.

    Returns:
        ``(config, export_config)``: the config to train with, and the starting checkpoint's dropout values
        (None when ``dropout`` overrides nothing). Dropout during continued pretraining is a training choice,
        not a property of the model: the export keeps the checkpoint's, so fine-tuning from it gets what it expects.
    """
    config = load_config(name, dropout, trust_remote_code=trust_remote_code)
    if all(v is None for v in dropout.values()):
        return config, None
    return config, dropout_values(load_config(name, trust_remote_code=trust_remote_code))


def load_model(auto_cls, name: str, config=None, trust_remote_code: bool = False, **kw: Any):
    """Load ``auto_cls.from_pretrained(name)``, returning ``(model, missing_keys)``.

    ``missing_keys`` lists the weights the checkpoint lacked, which the model initialised at random
    (for example an MLM head on a sentence-embedding checkpoint).
    """
    name = check_source(name)
    if config is None:
        config = load_config(name, trust_remote_code=trust_remote_code)
    auto_cls = _mean_pooled_class(auto_cls, config)
    try:
        with quiet_transformers():  # the load report: the caller names what was initialised at random
            model, info = auto_cls.from_pretrained(
                name, config=config, trust_remote_code=trust_remote_code, output_loading_info=True, **kw
            )
    except OSError as err:
        raise DomainBertError(f"could not load model weights from {name!r}: {err}") from err
    except ValueError as err:
        raise DomainBertError(f"{name!r} cannot be loaded as {auto_cls.__name__}: {err}") from err
    return model, sorted(info.get("missing_keys", []))


def head_missing(model, missing: list[str]) -> list[str]:
    """The weights outside the encoder (``base_model_prefix``) that ``missing`` lists: a head left random."""
    prefix = model.base_model_prefix + "."
    return [k for k in missing if not k.startswith(prefix)]


def named(names: Sequence[str], limit: int = 4) -> str:
    """``names`` sorted, the first ``limit`` of them written out and the rest counted, for one-line messages.

    Example:
    >>> named(["c", "a", "b", "e", "d", "f"])
    'a, b, c, d (+2 more)'
    """
    names = sorted(names)
    more = f" (+{len(names) - limit} more)" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def check_weights_fit(what: str, missing: Sequence[str] = (), unexpected: Sequence[str] = (), fix: str = "") -> None:
    """Raise unless a checkpoint's weights fit its model: none missing (it would start them at random), none extra.

    The one check of every loader of a trained model (the distillation teacher, pseudo-labelling's teacher,
    :func:`~domainbert.deploy.load.load_variant` and so ``export`` and ``predict``, a classifier's ``init_from``).

    Args:
        what: the checkpoint and what is wrong, as the message starts (``the teacher x has no trained head``).
        missing: the model's weights that the checkpoint lacks.
        unexpected: the checkpoint's weights that the model has no place for.
        fix: what to do instead, ending the message.

    Raises:
        DomainBertError: one line naming (at most four of) each.
    """
    parts = [f"missing {named(missing)}"] if missing else []
    parts += [f"unexpected {named(unexpected)}"] if unexpected else []
    if parts:
        raise DomainBertError(f"{what}: {'; '.join(parts)}" + (f"; {fix}" if fix else ""))


def _mean_pooled_class(auto_cls, config):
    """Domainbert's mean-pooling classifier class where ``config`` marks one; else ``auto_cls`` unchanged.

    Exports of a mean-pooling classifier name a remote-code class in ``auto_map``; domainbert builds the same
    class from its own code instead, so no code from a model folder ever runs.
    """
    from domainbert.core.pooled import is_mean_pooled, pooled_class

    if is_mean_pooled(config) and getattr(auto_cls, "__name__", "") == "AutoModelForSequenceClassification":
        return pooled_class(config)
    return auto_cls


def write_modeling_file(model, folder: str | os.PathLike) -> None:
    """Make a mean-pooling classifier's saved folder its export: ``modeling_domainbert.py`` and its ``config.json``.

    The config gets domainbert's ``model_type`` (see :mod:`domainbert.core.pooled`), so that plain transformers
    refuses it without ``trust_remote_code=True`` instead of loading a ``[CLS]`` head that would answer wrong.
    Other models' folders are left as they are.
    """
    from domainbert.core.pooled import MODELING_FILE, export_config, is_mean_pooled, modeling_source

    config = getattr(model, "config", None)
    if config is not None and is_mean_pooled(config) and hasattr(type(model), "_encoder_cls"):
        Path(folder, MODELING_FILE).write_text(modeling_source(model), encoding="utf-8")
        path = Path(folder, "config.json")
        data = export_config(read_config_json(folder), type(model))
        path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def load_tokenizer(name: str, trust_remote_code: bool = False) -> PreTrainedTokenizerBase:
    """Load the fast tokenizer saved with a checkpoint."""
    from domainbert.core.pooled import is_export_dict

    name = check_source(name)
    kw: dict[str, Any] = {}
    if Path(name).is_dir() and is_export_dict(read_config_json(name)):
        kw["config"] = load_config(name)  # transformers would otherwise try (and refuse) the export's own code
    try:
        with quiet_transformers():
            tok = AutoTokenizer.from_pretrained(name, use_fast=True, trust_remote_code=trust_remote_code, **kw)
    except (OSError, ValueError) as err:
        raise DomainBertError(f"could not load a tokenizer from {name!r}: {err}") from err
    if not tok.is_fast:
        raise DomainBertError(f"{name!r}: a fast (Rust) tokenizer is required; found {type(tok).__name__}")
    if len(tok) <= len(tok.all_special_tokens):  # transformers 5 builds an empty vocabulary when the files are missing
        raise DomainBertError(
            f"{name}: no tokenizer files (tokenizer.json, vocab.txt...): the tokenizer would know only its "
            f"{len(tok)} special tokens and read every word as {tok.unk_token}"
        )
    return tok


def check_tokenizer_fits(tokenizer: PreTrainedTokenizerBase, model: PreTrainedModel, where: str = "") -> None:
    """Raise if the tokenizer can produce ids the model's embedding has no row for."""
    rows = model.get_input_embeddings().num_embeddings
    if len(tokenizer) > rows:
        raise DomainBertError(
            f"{where or 'tokenizer'}: the tokenizer has {len(tokenizer)} tokens but the model's embedding has "
            f"{rows} rows; use the tokenizer saved with this model (or resize it with `domainbert vocab extend`)"
        )


def check_max_length(max_length: int, model_or_config, where: str = "max_length") -> None:
    """Raise if ``max_length`` exceeds the model's position embeddings (less its family's offset)."""
    limit = max_positions(getattr(model_or_config, "config", model_or_config))
    if limit is not None and max_length > limit:
        raise DomainBertError(f"{where}={max_length} is beyond the model's {limit} positions; use at most {limit}")


def _state_dict_of(name: str) -> dict[str, torch.Tensor]:
    """The tensors of a checkpoint's safetensors file(s); empty when not found locally."""
    name = str(name)
    folder = Path(resolve_package(name) if name.startswith("pkg:") else name)
    if not folder.is_dir():
        try:
            from huggingface_hub import snapshot_download

            folder = Path(snapshot_download(name, allow_patterns=["*.safetensors", "*.json"], local_files_only=True))
        except Exception:  # noqa: BLE001 - best effort; absent from the local cache
            return {}
    tensors: dict[str, torch.Tensor] = {}
    for f in sorted(folder.glob("*.safetensors")):
        tensors.update(load_file(str(f)))
    return tensors


def carried_weights(source: str, model: PreTrainedModel) -> dict[str, torch.Tensor]:
    """Weights of ``source`` that ``model`` has no place for (BERT's pooler under an MLM head, say).

    Keys are returned in ``model``'s naming, so that a later ``from_pretrained`` of another head finds them.
    """
    src = _state_dict_of(source)
    if not src:
        return {}
    prefix = model.base_model_prefix
    own = set(model.state_dict().keys())
    headless = not any(k.startswith(prefix + ".") for k in src)
    out = {}
    for key, tensor in src.items():
        if key.endswith("position_ids"):
            continue
        full = f"{prefix}.{key}" if headless else key
        if full not in own and key not in own:
            out[full] = tensor
    return out


def export_hf(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase | None,
    out_dir: str | os.PathLike,
    source: str | None = None,
    card: str | None = None,
    extra_files: dict[str, str] | None = None,
    replace_foreign: bool = False,
    pooling_from: str | None = None,
    pooling: str | None = None,
) -> Path:
    """Write ``model`` and ``tokenizer`` with ``save_pretrained``, atomically.

    Args:
        model: the model to save.
        tokenizer: its tokenizer, saved beside it.
        out_dir: the destination folder; an earlier folder there is replaced only once the new one is complete.
        source: the starting checkpoint; weights it had that ``model`` lacks (BERT's pooler, say) are kept.
        card: a Markdown model card, written as ``README.md``.
        extra_files: further text files to write, by name.
        replace_foreign: replace ``out_dir`` even when domainbert did not write it (the user's ``--overwrite``).
        pooling_from: a sentence-transformers folder whose pooling files (``modules.json``, ``1_Pooling/``...) the
            export carries, so that ``pooling: auto`` fine-tunes it as its source was trained (default: ``source``).
        pooling: the pooling the export records (``mean``, ``cls``), over ``pooling_from``'s; None: as it is.

    Raises:
        DomainBertError: when ``out_dir`` is a folder domainbert did not write (a run folder, a folder of the
            user's), or the disk is full (one line: where, the free space, the run's last good checkpoint).
    """
    out_dir = Path(out_dir)
    last_good = newest_checkpoint(out_dir.parent / "checkpoints")
    with atomic_dir(out_dir, "the Hugging Face export", last_good, replace_foreign) as tmp:
        with quiet_transformers():
            model.save_pretrained(tmp, safe_serialization=True)
        write_modeling_file(model, tmp)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        if source is not None:
            extra = carried_weights(source, model)
            weights = tmp / "model.safetensors"
            if extra and weights.exists():
                merged = load_file(str(weights))
                merged.update({k: v.contiguous() for k, v in extra.items()})
                save_file(merged, str(weights), metadata={"format": "pt"})
                log.info("kept %d weights of %s that training did not touch: %s", len(extra), source, sorted(extra))
        write_sentence_files(pooling_from or source, tmp, pooling, _width(model))
        if card is not None:
            (tmp / "README.md").write_text(card, encoding="utf-8")
        for fname, text in (extra_files or {}).items():
            (tmp / fname).write_text(text, encoding="utf-8")
    return out_dir


#: the files of a sentence-transformers folder that describe its modules (besides each module's own folder)
SENTENCE_FILES = ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json")
#: ``1_Pooling/config.json``'s flag for each pooling
POOLING_FLAGS = {"mean": "pooling_mode_mean_tokens", "cls": "pooling_mode_cls_token", "max": "pooling_mode_max_tokens"}


def _width(model) -> int | None:
    config = getattr(model, "config", None)
    return getattr(config, "hidden_size", None) or getattr(config, "dim", None)


def _local_folder(name: str | None) -> Path | None:
    if not name:
        return None
    try:
        folder = Path(os.path.expanduser(resolve_local_alias(str(name))))
    except DomainBertError:
        return None
    return folder if folder.is_dir() else None


def write_sentence_files(source: str | None, dest: Path, pooling: str | None = None, width: int | None = None) -> None:
    """Give ``dest`` the sentence-transformers module files of ``source`` (``modules.json``, ``1_Pooling/``...).

    These say how the model's sentence embedding is pooled (:func:`domainbert.core.embed.native_pooling`, which
    ``pooling: auto`` reads). Each module folder other than the transformer itself is copied. With ``pooling``
    the pooling module's flags are set to it, and a source without such files gets a minimal pair (transformer,
    pooling).
    """
    src = _local_folder(source)
    modules = src / "modules.json" if src is not None else None
    entries = None
    if modules is not None and modules.is_file():
        try:
            entries = json.loads(modules.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            log.warning("%s: not valid JSON; the export carries no sentence-transformers files", modules)
            entries = None
    if isinstance(entries, list):
        for fname in SENTENCE_FILES:
            if (src / fname).is_file():
                shutil.copyfile(src / fname, dest / fname)
        for entry in entries:
            sub = str(entry.get("path", "")) if isinstance(entry, dict) else ""
            if sub not in ("", ".") and not Path(sub).is_absolute() and ".." not in Path(sub).parts:
                if (src / sub).is_dir():
                    shutil.copytree(src / sub, dest / sub, dirs_exist_ok=True)
    elif pooling is not None:
        entries = [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        ]
        (dest / "modules.json").write_text(json.dumps(entries, indent=2) + "\n", encoding="utf-8")
    if pooling is not None and isinstance(entries, list):
        _set_pooling(dest, entries, pooling, width)


def _set_pooling(dest: Path, entries: list, pooling: str, width: int | None) -> None:
    """Set the pooling module's flags (in ``dest``'s copy) to ``pooling`` alone."""
    if pooling not in POOLING_FLAGS:
        raise DomainBertError(f"pooling={pooling!r}: expected one of {', '.join(POOLING_FLAGS)}")
    sub = next(
        (e.get("path") for e in entries if isinstance(e, dict) and str(e.get("type", "")).endswith("Pooling")), None
    )
    if not sub:
        return
    path = dest / sub / "config.json"
    try:
        cfg = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        cfg = {}
    if width is not None:
        cfg.setdefault("word_embedding_dimension", width)
    for mode, flag in POOLING_FLAGS.items():
        cfg[flag] = mode == pooling
    cfg["pooling_mode_mean_sqrt_len_tokens"] = False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cfg, indent=2) + "\n", encoding="utf-8")
