"""Knowledge distillation: a frozen teacher trains a smaller, faster student.

The loss is ``α·KL(student/T ‖ teacher/T)·T² + β·hard-label loss + γ·hidden-state loss + δ·attention loss``
(see :mod:`domainbert.losses`), plus any ``extra_losses``. The teacher is any fine-tuned classifier or
tagger, or a masked-LM; it stays in eval mode, runs under ``no_grad`` (in bf16 autocast when the trainer's
precision is bf16) and is left out of the Lightning checkpoints (it is reloaded from ``teacher``). Its
outputs can be cached on disk once for all epochs and sweep trials (``teacher_cache``).

The student is built in one of three ways (:mod:`domainbert.distill.student`): ``student`` (a smaller checkpoint
using the teacher's tokenizer), ``student_layers`` (the teacher's embeddings, head and every k-th layer,
DistilBERT style) or ``student_config`` (the teacher's config with fewer layers or a smaller width, random
weights). The ``hf/`` export is the student with the teacher's tokenizer.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import logging
from typing import Literal

import torch
from lightning.pytorch.cli import OptimizerCallable
from torch import nn
from torchmetrics import MeanMetric, MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score
from transformers.modeling_outputs import MaskedLMOutput

from domainbert.core.hf import check_tokenizer_fits, load_config, load_model, load_tokenizer
from domainbert.distill.student import (
    auto_class,
    check_same_tokenizer,
    copied_layer_map,
    hidden_width,
    num_layers,
    student_from_checkpoint,
    student_from_config,
    student_from_teacher,
)
from domainbert.distill.teacher_cache import TeacherCache, content_keys, fingerprint
from domainbert.errors import DomainBertError
from domainbert.losses import (
    AttentionLoss,
    HardLabelLoss,
    HiddenStateLoss,
    KLDivergenceLoss,
    build_loss,
    check_layer_map,
    uniform_layer_map,
)
from domainbert.modules.base import HFModule

log = logging.getLogger(__name__)

IGNORE = -100
Task = Literal["sequence-classification", "token-classification", "masked-lm"]


def _resolve(name: str) -> str:
    try:
        from domainbert.core.models_local import resolve_local_alias
    except ImportError:  # pragma: no cover - optional module
        return name
    return resolve_local_alias(name)


def _generic_labels(names: list[str]) -> bool:
    return all(n == f"LABEL_{i}" for i, n in enumerate(names))


class DistillationModule(HFModule):
    """Distil a fine-tuned teacher into a smaller student (classification, tagging or masked-LM).

    Logs ``train/loss`` and each weighted term's raw value (``train/loss_kl``, ``train/loss_hard``,
    ``train/loss_hidden``, ``train/loss_attention``, ...); ``val/loss`` (the student's hard-label loss),
    ``val/acc`` and ``val/f1_macro`` (masked-LM: ``val/acc`` is the masked-token accuracy), and the same
    under ``test/``.
    """

    def __init__(
        self,
        teacher: str,
        student: str | None = None,
        student_layers: int | list[int] | None = None,
        student_config: dict | None = None,
        layer_selection: Literal["every_k", "spread"] = "every_k",
        task: Task = "sequence-classification",
        num_labels: int | None = None,
        label_names: list[str] | None = None,
        temperature: float = 2.0,
        alpha: float = 0.5,
        beta: float = 0.5,
        gamma: float = 0.0,
        delta: float = 0.0,
        hidden_loss: Literal["mse", "cosine"] = "mse",
        layer_map: dict[int, int] | None = None,
        extra_losses: list[dict] | None = None,
        teacher_cache: str | None = None,
        mlm_probability: float = 0.15,
        learning_rate: float = 5e-5,
        weight_decay: float = 0.01,
        warmup_ratio: float = 0.1,
        seed: int = 0,
        optimizer: OptimizerCallable | None = None,
    ) -> None:
        """Load the teacher, build the student and the loss terms.

        Args:
            teacher: the teacher: a Hugging Face folder of a fine-tuned model with the ``task`` head (for example
                a fine-tuning run's ``hf/`` export), or an installed model package's name.
            student: a smaller checkpoint (folder) to start the student from; it must use the teacher's
                tokenizer. Give exactly one of ``student``, ``student_layers`` and ``student_config``.
            student_layers: build the student from the teacher: its embeddings, its head and this many of its
                layers (chosen by ``layer_selection``), or the list of 0-based teacher layers to copy.
            student_config: build a randomly initialised student from the teacher's config with these changes,
                e.g. ``{num_hidden_layers: 3, hidden_size: 256, num_attention_heads: 4, intermediate_size: 1024}``.
            layer_selection: which layers ``student_layers`` copies: ``every_k`` (the top of each block of
                teacher/student layers: 6 -> 3 copies 1, 3, 5) or ``spread`` (first to last, DistilBERT style).
            task: ``sequence-classification``, ``token-classification`` or ``masked-lm``.
            num_labels: number of labels; linked from the data; must equal the teacher's.
            label_names: label names in id order; linked from the data; must equal the teacher's (unless the
                teacher only has generic ``LABEL_i`` names).
            temperature: softmax temperature ``T`` of the soft-target loss.
            alpha: weight of the soft-target loss ``KL(student/T ‖ teacher/T)·T²``.
            beta: weight of the hard-label loss (cross-entropy on the gold labels).
            gamma: weight of the hidden-state loss (0 turns it off).
            delta: weight of the attention-map loss (0 turns it off; on, both models use eager attention).
            hidden_loss: ``mse`` or ``cosine`` for the hidden-state loss.
            layer_map: ``{student_layer: teacher_layer}`` for the hidden-state and attention losses (1-based
                layers, 0 = embeddings); default: the layers a copied student came from, else TinyBERT's
                uniform map.
            extra_losses: more loss terms, each ``{class_path, init_args, weight}``: any ``nn.Module`` whose
                ``forward(student_out, teacher_out, batch)`` returns a scalar (see ``domainbert.losses``).
            teacher_cache: a folder where the teacher's training-set outputs are computed once and reused by
                later epochs and runs (logits, plus the hidden states the hidden-state loss reads). Not for
                masked-LM (the masks change every step) nor with the attention loss.
            mlm_probability: masked-LM: share of tokens masked (when the data does not mask).
            learning_rate: peak learning rate of the student.
            weight_decay: AdamW weight decay (not on biases and LayerNorm).
            warmup_ratio: fraction of the steps with linear warm-up; then linear decay to 0.
            seed: seed of the masked-LM masks.
            optimizer: an optimizer class path and its arguments; AdamW by default.
        """
        super().__init__()
        self.save_hyperparameters(ignore=["optimizer"])
        self.optimizer = optimizer
        self.task = task
        auto_cls = auto_class(task)
        for name, w in (("alpha", alpha), ("beta", beta), ("gamma", gamma), ("delta", delta)):
            if w < 0:
                raise DomainBertError(f"{name}={w}: loss weights must not be negative")
        if teacher_cache and task == "masked-lm":
            raise DomainBertError("teacher_cache does not apply to masked-LM: the masks change at every step")
        if teacher_cache and delta > 0:
            raise DomainBertError("teacher_cache cannot hold attention maps: set delta: 0 or drop teacher_cache")

        # -- teacher ---------------------------------------------------------------------------------
        self.teacher_path = _resolve(teacher)
        t_config = load_config(self.teacher_path)
        teacher_model, missing = load_model(auto_cls, self.teacher_path, config=t_config)
        prefix = teacher_model.base_model_prefix + "."
        head_missing = [k for k in missing if not k.startswith(prefix)]
        if head_missing:
            raise DomainBertError(
                f"the teacher {teacher} has no trained {task} head (missing: {', '.join(head_missing[:4])}): "
                "distil from a fine-tuned model, e.g. the hf/ export of a fine-tuning run"
            )
        self.tokenizer = load_tokenizer(self.teacher_path)
        self.multi_label = getattr(t_config, "problem_type", None) == "multi_label_classification"
        self.label_names = self._check_labels(t_config, num_labels, label_names) if task != "masked-lm" else None

        # -- student ---------------------------------------------------------------------------------
        given = [n for n, v in (("student", student), ("student_layers", student_layers)) if v is not None]
        given += ["student_config"] if student_config else []
        if len(given) != 1:
            raise DomainBertError(
                f"give exactly one of model.student (a checkpoint), model.student_layers (copy teacher layers) and "
                f"model.student_config (a smaller config); got {given or 'none'}"
            )
        default_map = None
        if student is not None:
            path = _resolve(student)
            self.model, s_missing = student_from_checkpoint(path, task, teacher_model.config)
            if s_missing:
                log.info("student weights initialised at random: %s", ", ".join(s_missing))
            try:
                s_tok = load_tokenizer(path)
            except DomainBertError:
                s_tok = None
                log.warning("%s has no tokenizer; its vocabulary size matches the teacher's, using the teacher's", path)
            if s_tok is not None:
                check_same_tokenizer(self.tokenizer, s_tok, teacher, student)
        elif student_layers is not None:
            self.model, selected = student_from_teacher(teacher_model, student_layers, layer_selection)
            default_map = copied_layer_map(selected)
            log.info("student: teacher layers %s copied", selected)
        else:
            self.model = student_from_config(teacher_model.config, student_config, task)
        check_tokenizer_fits(self.tokenizer, self.model, where="student")
        self.export_source = None

        teacher_model.eval()
        teacher_model.requires_grad_(False)
        self.teacher = teacher_model
        self.register_state_dict_post_hook(_drop_teacher_weights)

        # -- losses ----------------------------------------------------------------------------------
        s_layers, t_layers = num_layers(self.model.config), num_layers(teacher_model.config)
        if layer_map is not None:
            lmap = check_layer_map(layer_map, s_layers, t_layers)
        else:
            lmap = default_map or uniform_layer_map(s_layers, t_layers)
        self.layer_map = lmap
        terms: dict[str, nn.Module] = {}
        weights: dict[str, float] = {}
        if alpha > 0:
            terms["kl"], weights["kl"] = KLDivergenceLoss(temperature, multi_label=self.multi_label), alpha
        if beta > 0:
            terms["hard"], weights["hard"] = HardLabelLoss(), beta
        if gamma > 0:
            sw, tw = hidden_width(self.model.config), hidden_width(teacher_model.config)
            terms["hidden"] = HiddenStateLoss(hidden_loss, lmap, s_layers, t_layers, sw, tw)
            weights["hidden"] = gamma
        if delta > 0:
            terms["attention"], weights["attention"] = AttentionLoss(lmap, s_layers, t_layers), delta
        for spec in extra_losses or []:
            name, loss, w = build_loss(spec)
            while name in terms:
                name += "_"
            terms[name], weights[name] = loss, w
        if not any(w > 0 for w in weights.values()):
            raise DomainBertError("every loss weight is 0: set alpha, beta, gamma or delta above 0")
        self.losses = nn.ModuleDict(terms)
        self.loss_weights = weights
        self.need_hidden = any(getattr(t, "needs_hidden_states", False) for t in terms.values())
        self.need_attentions = any(getattr(t, "needs_attentions", False) for t in terms.values())
        self.need_teacher = any(getattr(t, "needs_teacher", True) for t in terms.values())
        if teacher_cache and any(getattr(t, "needs_attentions", False) for t in terms.values()):
            raise DomainBertError("teacher_cache cannot hold attention maps, which a loss term needs")
        if self.need_attentions:
            for m in (self.model, self.teacher):
                m.set_attn_implementation("eager")
        self.cache: TeacherCache | None = None
        self._cache_seen = (0, 0)

        # -- metrics ---------------------------------------------------------------------------------
        if task == "masked-lm":
            from domainbert.data.masking import Masker

            self.masker = Masker(self.tokenizer, probability=mlm_probability)
            self.val_metrics = MetricCollection({"acc": MeanMetric()})
        elif task == "token-classification":
            n = len(self.label_names)
            self.val_metrics = MetricCollection(
                {
                    "acc": MulticlassAccuracy(num_classes=n, average="micro", ignore_index=IGNORE),
                    "f1_macro": MulticlassF1Score(num_classes=n, average="macro", ignore_index=IGNORE),
                }
            )
        else:
            from domainbert.modules.metrics import classification_metrics

            self.val_metrics = classification_metrics(len(self.label_names), self.multi_label)
        self.test_metrics = self.val_metrics.clone()
        self._hard = HardLabelLoss()

    # -- set-up and checks ------------------------------------------------------------------------
    def _check_labels(self, t_config, num_labels: int | None, label_names: list[str] | None) -> list[str]:
        """The label set, checked against the teacher's head."""
        t_names = [str(t_config.id2label[i]) for i in range(t_config.num_labels)]
        if num_labels is not None and num_labels != t_config.num_labels:
            raise DomainBertError(
                f"the data has {num_labels} labels but the teacher's head has {t_config.num_labels}: distil on the "
                "data the teacher was fine-tuned on"
            )
        if label_names is None:
            return t_names
        label_names = [str(x) for x in label_names]
        if len(label_names) != t_config.num_labels:
            raise DomainBertError(
                f"{len(label_names)} label_names but the teacher's head has {t_config.num_labels} outputs"
            )
        if not _generic_labels(t_names) and label_names != t_names:
            raise DomainBertError(
                f"the data's labels {label_names} differ from the teacher's {t_names} (order matters: the teacher's "
                "output i is label i); give data.labels in the teacher's order"
            )
        return label_names

    def setup(self, stage: str) -> None:  # noqa: D102
        dm = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        if dm is None or self.label_names is None:
            return
        try:
            names = getattr(dm, "label_names", None)
        except DomainBertError:
            names = None
        if names is not None and list(names) != list(self.label_names):
            raise DomainBertError(
                f"the data's labels {list(names)} differ from the teacher's {self.label_names}; give data.labels "
                "in the teacher's order"
            )
        if hasattr(dm, "multi_label") and bool(dm.multi_label) != self.multi_label:
            raise DomainBertError(
                f"data.multi_label={dm.multi_label} but the teacher is "
                f"{'multi-label' if self.multi_label else 'single-label'}"
            )

    def train(self, mode: bool = True):
        """Switch the student (and loss modules) to ``mode``; the teacher always stays in eval mode."""
        super().train(mode)
        self.teacher.eval()
        return self

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """Leave the frozen teacher out of checkpoints: it is reloaded from ``teacher``.

        ``state_dict()`` already leaves it out (:func:`_drop_teacher_weights`), so a checkpoint holds exactly the
        weights the module reports as its own and ``validate/test --ckpt_path`` finds none missing.
        """
        state = checkpoint.get("state_dict", {})
        for key in [k for k in state if k.startswith("teacher.")]:
            del state[key]

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """Load a checkpoint saved without the teacher (its weights are the loaded teacher's)."""
        state_dict = dict(state_dict)
        for key, value in self.teacher.state_dict(prefix="teacher.").items():
            state_dict.setdefault(key, value)
        return super().load_state_dict(state_dict, strict=strict, assign=assign)

    # -- teacher cache ----------------------------------------------------------------------------
    def on_fit_start(self) -> None:
        """Open (or build once) the teacher-output cache of this teacher and training set."""
        root = self.hparams.teacher_cache
        if not root or not self.need_teacher:
            return
        dm = getattr(self.trainer, "datamodule", None)
        loader = dm.train_dataloader() if dm is not None else self.trainer.fit_loop._data_source.dataloader()
        layers = self.losses["hidden"].teacher_layers_used() if "hidden" in self.losses else []
        files = _data_files(dm)
        extra = {"task": self.task, "layers": layers, "data": type(dm).__name__ if dm is not None else None}
        if files is None:  # no file list: identify the data by the content of its examples
            keys = sorted(k for b in loader for k in content_keys(b["input_ids"], b["attention_mask"]))
            extra["content"] = hashlib.sha256(str(keys).encode()).hexdigest()
            files = []
        key = fingerprint(self.teacher_path, files, getattr(dm, "max_length", None), extra)
        cache = TeacherCache.open(root, key)
        if cache is None and self.trainer.is_global_zero:
            log.info("teacher cache: running the teacher once over the training data (%s)", key)
            cache = TeacherCache.build(
                root,
                key,
                self._cache_run,
                loader,
                layers=layers,
                description={"teacher": self.teacher_path, "data": files, "task": self.task},
            )
        self.trainer.strategy.barrier()
        self.cache = cache or TeacherCache.open(root, key)
        log.info("teacher cache: %d examples in %s", len(self.cache), self.cache.path)

    def _cache_run(self, batch: dict) -> tuple[torch.Tensor, tuple | None]:
        batch = {k: v.to(self.device) if torch.is_tensor(v) else v for k, v in batch.items()}
        out = self._teacher_forward(batch, batch["input_ids"], None, hidden=bool(self.need_hidden))
        return out.logits, out.hidden_states

    def on_train_epoch_end(self) -> None:  # noqa: D102
        if self.cache is None:
            return
        hits, misses = self.cache.hits - self._cache_seen[0], self.cache.misses - self._cache_seen[1]
        self._cache_seen = (self.cache.hits, self.cache.misses)
        if hits + misses:
            self.log("train/teacher_cache_hits", hits / (hits + misses))
            if misses:
                log.info("teacher cache: %d of %d batches ran the teacher", misses, hits + misses)

    # -- forward ----------------------------------------------------------------------------------
    def _inputs(self, model, batch: dict, input_ids: torch.Tensor) -> dict:
        accepted = _accepted(type(model))
        names = [k for k in self.tokenizer.model_input_names if k != "input_ids"]
        return {"input_ids": input_ids, **{k: batch[k] for k in names if k in batch and k in accepted}}

    def _run(self, model, batch: dict, input_ids, selected, hidden: bool, attentions: bool):
        """One model's outputs; masked-LM logits only at the ``selected`` (masked) positions."""
        kw = {}
        if hidden:
            kw["output_hidden_states"] = True
        if attentions:
            kw["output_attentions"] = True
        if self.task == "masked-lm":
            from domainbert.modules.mlm import MLM_HEADS

            enc = model.base_model(**self._inputs(model.base_model, batch, input_ids), return_dict=True, **kw)
            logits = MLM_HEADS[model.config.model_type](model, enc.last_hidden_state[selected])
            return MaskedLMOutput(logits=logits, hidden_states=enc.hidden_states, attentions=enc.attentions)
        return model(**self._inputs(model, batch, input_ids), return_dict=True, **kw)

    def _teacher_autocast(self):
        precision = str(getattr(self._trainer, "precision", "")) if self._trainer is not None else ""
        if "bf16" in precision:
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _teacher_forward(self, batch: dict, input_ids, selected, hidden: bool | None = None):
        hidden = self.need_hidden if hidden is None else hidden
        with torch.no_grad(), self._teacher_autocast():
            return self._run(self.teacher, batch, input_ids, selected, hidden, self.need_attentions)

    def prepare(self, batch: dict, salt: int) -> tuple[torch.Tensor, torch.Tensor | None, dict]:
        """``(input_ids, masked positions or None, the batch the losses see)``; masked-LM inputs get masked."""
        mask = batch.get("attention_mask")
        if mask is None:
            mask = torch.ones_like(batch["input_ids"])
        if self.task != "masked-lm":
            view = {"attention_mask": mask}
            if "labels" in batch:
                view["labels"] = batch["labels"]
            return batch["input_ids"], None, view
        if "labels" in batch:
            input_ids, labels = batch["input_ids"], batch["labels"]
        else:
            g = torch.Generator(device=self.device)
            g.manual_seed((self.hparams.seed * 1_000_003 + salt) % (2**63))
            input_ids, labels = self.masker(batch["input_ids"], mask, generator=g)
        selected = labels != IGNORE
        return input_ids, selected, {"attention_mask": mask, "labels": labels[selected]}

    def distill_loss(self, student_out, teacher_out, view: dict) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The weighted sum of the loss terms, and each term's unweighted value."""
        parts = {name: term(student_out, teacher_out, view) for name, term in self.losses.items()}
        total = sum(self.loss_weights[name] * value for name, value in parts.items())
        return total, parts

    def forward(self, batch: dict) -> torch.Tensor:
        """The student's logits for a batch (masked-LM: at the masked positions)."""
        input_ids, selected, _ = self.prepare(batch, salt=0)
        return self._run(self.model, batch, input_ids, selected, False, False).logits

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:  # noqa: D102
        input_ids, selected, view = self.prepare(batch, salt=self.global_step)
        student_out = self._run(self.model, batch, input_ids, selected, self.need_hidden, self.need_attentions)
        teacher_out = None
        if self.need_teacher:
            if self.cache is not None:
                teacher_out = self.cache.lookup(batch)
            if teacher_out is None:
                teacher_out = self._teacher_forward(batch, input_ids, selected)
        loss, parts = self.distill_loss(student_out, teacher_out, view)
        n = input_ids.shape[0]
        self.log("train/loss", loss, prog_bar=True, batch_size=n)
        for name, value in parts.items():
            self.log(f"train/loss_{name}", value, batch_size=n)
        return loss

    def _evaluate(self, batch: dict, batch_idx: int, stage: str, metrics: MetricCollection) -> None:
        input_ids, selected, view = self.prepare(batch, salt=-(batch_idx + 1))
        out = self._run(self.model, batch, input_ids, selected, False, False)
        logits = out.logits.float()
        n = input_ids.shape[0]
        if "labels" not in view:
            return
        labels = view["labels"]
        self.log(f"{stage}/loss", self._hard(out, None, view), batch_size=n, prog_bar=stage == "val")
        if self.task == "masked-lm":
            if labels.numel():
                metrics["acc"].update((logits.argmax(-1) == labels).float())
        elif self.task == "token-classification":
            metrics.update(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1).long())
        elif self.multi_label:
            metrics.update(torch.sigmoid(logits), labels.long())
        else:
            metrics.update(logits, labels.long())
        for name, metric in metrics.items():
            self.log(f"{stage}/{name}", metric, on_step=False, on_epoch=True, batch_size=n, prog_bar=stage == "val")

    def validation_step(self, batch: dict, batch_idx: int) -> None:  # noqa: D102
        self._evaluate(batch, batch_idx, "val", self.val_metrics)

    def test_step(self, batch: dict, batch_idx: int) -> None:  # noqa: D102
        self._evaluate(batch, batch_idx, "test", self.test_metrics)


def _drop_teacher_weights(module: nn.Module, state_dict: dict, prefix: str, local_metadata: dict) -> None:
    """``state_dict`` post-hook: the frozen teacher is not part of the module's saved state (see ``teacher``)."""
    for key in [k for k in state_dict if k.startswith(prefix + "teacher.")]:
        del state_dict[key]


@functools.cache
def _accepted(cls) -> frozenset[str]:
    """The keyword arguments a model class's ``forward`` takes (DistilBERT takes no ``token_type_ids``)."""
    return frozenset(inspect.signature(cls.forward).parameters)


def _data_files(dm) -> list[str] | None:
    """The training file spec(s) of a datamodule, if it says where its data comes from."""
    if dm is None:
        return None
    paths = getattr(dm, "paths", None)
    spec = paths.get("train") if isinstance(paths, dict) else None
    spec = spec or getattr(dm, "train", None) or getattr(getattr(dm, "hparams", {}), "get", lambda k: None)("train")
    if not spec:
        return None
    return [str(s) for s in spec] if isinstance(spec, (list, tuple)) else [str(spec)]
