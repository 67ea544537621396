"""Knowledge distillation: a frozen teacher trains a smaller, faster student.

The loss is the weighted sum of the terms listed in ``losses`` (:mod:`domainbert.distill.objective`; by default
``0.5·KL(student/T ‖ teacher/T)·T² + 0.5·hard-label loss`` at ``T = 2``). The teacher is any fine-tuned classifier,
tagger or QA model, or a masked-LM (:mod:`domainbert.distill.teacher`); it stays in eval mode, runs under
``no_grad`` (in bf16 autocast when the trainer's precision is bf16) and is left out of the Lightning checkpoints
(it is reloaded from ``teacher``). Its outputs can be cached on disk for later epochs and sweep trials
(``teacher_cache``, :mod:`domainbert.distill.teacher_cache`); the cache fills as training runs the teacher, so a
short run costs only the batches it trains on.

What differs between tasks (which outputs are distilled, the gold targets, the metrics) is one record per task
in :data:`domainbert.distill.task_table.DISTILL_TASKS`.

The teacher is one model or several (their probabilities averaged: the seeds' ensemble moved into one model), and
a teacher may tokenize differently from the student (a larger model of another family): it then reads the
student's tokens decoded to text, and only its logits are distilled (:mod:`domainbert.distill.teacher`).

The student is built in one of three ways (:mod:`domainbert.distill.student`): ``student`` (a smaller checkpoint,
optionally cut to ``student_layers`` of its own layers), ``student_layers`` (the teacher's embeddings, head and every
k-th layer, DistilBERT style) or ``student_config`` (the teacher's config with fewer layers or a smaller width,
random weights). The ``hf/`` export is the student with its tokenizer (the teacher's, unless a ``student``
checkpoint brings its own).

Training data may carry unlabelled rows (``data.transfer``, :mod:`domainbert.data.transfer`): the teacher labels
them, the soft-target and hidden-state terms read them, and the hard-label term skips them.
"""

from __future__ import annotations

import copy
import functools
import logging
from typing import Literal

import lightning.pytorch as L
import torch
from lightning.pytorch.cli import OptimizerCallable
from torch import nn

from domainbert.core.compat import attached_trainer
from domainbert.core.hf import load_tokenizer
from domainbert.core.models_local import resolve_local_alias
from domainbert.core.seeding import step_generator
from domainbert.data import contract
from domainbert.data.contract import check_agreement, model_labels
from domainbert.data.masking import IGNORE_INDEX, Masker
from domainbert.distill.chunks import auto_chunk_rows, check_chunk_rows, length_chunks, run_in_chunks
from domainbert.distill.losses import HardLabelLoss, HiddenStateLoss, LossTerm
from domainbert.distill.objective import build_losses, build_objective, loss_configs
from domainbert.distill.released import RELEASED, from_released
from domainbert.distill.student import build_student, tokenizer_difference
from domainbert.distill.task_table import Outputs, distill_task
from domainbert.distill.teacher import (
    Retokenized,
    TeacherEnsemble,
    drop_teacher_weights,
    is_multi_label,
    load_teacher,
    model_inputs,
    teacher_autocast,
    teacher_labels,
    teacher_max_length,
)
from domainbert.distill.teacher_cache import (
    CacheFill,
    TeacherCache,
    cached_rows,
    data_files,
    fingerprint,
    training_fingerprint,
)
from domainbert.errors import DomainBertError
from domainbert.modules.base import HFModule
from domainbert.modules.tasks import Task

log = logging.getLogger(__name__)


class DistillationModule(HFModule):
    """Distil a fine-tuned teacher into a smaller student (classification, tagging, QA or masked-LM).

    Logs ``train/loss`` and each weighted term's raw value (``train/loss_kl``, ``train/loss_hard``,
    ``train/loss_hidden``, ``train/loss_attention``, ...); ``val/loss`` (the student's hard-label loss),
    ``val/acc`` and ``val/f1_macro`` (masked-LM: ``val/acc`` is the masked-token accuracy; QA: ``val/em`` and
    ``val/f1`` instead), and the same under ``test/``.
    """

    serves_predictions = True

    def __init__(
        self,
        teacher: str | list[str],
        student: str | None = None,
        student_layers: int | list[int] | None = None,
        student_config: dict | None = None,
        layer_selection: Literal["every_k", "spread"] = "every_k",
        task: str = "classification",
        num_labels: int | None = None,
        label_names: list[str] | None = None,
        losses: list[LossTerm | dict] | None = None,
        teacher_cache: str | None = None,
        mlm_probability: float = 0.15,
        chunk_rows: int | Literal["auto"] | None = "auto",
        learning_rate: float = 5e-5,
        weight_decay: float = 0.01,
        warmup_ratio: float = 0.1,
        seed: int = 0,
        optimizer: OptimizerCallable | None = None,
    ) -> None:
        """Load the teacher, build the student and the loss terms.

        Args:
            teacher: the teacher: a Hugging Face folder of a fine-tuned model with the ``task`` head (for example
                a fine-tuning run's ``hf/`` export), or an installed model package's name; or a list of them with
                one label set (classification, tagging), whose probabilities are averaged (hidden states and
                attention maps come from the first).
            student: a smaller checkpoint (folder) to start the student from. For classification it may have a
                tokenizer of its own (a teacher of another family): each teacher that tokenizes differently then
                reads the student's tokens decoded to text, and only logits are distilled (no hidden-state or
                attention term, or a first teacher that shares the student's tokenizer). Other tasks need the
                teacher's tokenizer.
            student_layers: build the student from the teacher (or from ``student``, when given): its embeddings,
                its head and this many of its layers (chosen by ``layer_selection``), or the list of 0-based
                layers to copy. Give one of ``student`` and ``student_config`` at most, beside it.
            student_config: build a randomly initialised student from the teacher's config with these changes,
                e.g. ``{num_hidden_layers: 3, hidden_size: 256, num_attention_heads: 4, intermediate_size: 1024}``.
            layer_selection: which layers ``student_layers`` copies: ``every_k`` (the top of each block of
                teacher/student layers: 6 -> 3 copies 1, 3, 5) or ``spread`` (first to last, DistilBERT style).
            task: ``classification``, ``tagging``, ``qa`` or ``mlm`` (the older ``sequence-classification``,
                ``token-classification`` and ``masked-lm`` are accepted).
            num_labels: number of labels; linked from the data; must equal the teacher's.
            label_names: label names in id order; linked from the data; must equal the teacher's (unless the
                teacher only has generic ``LABEL_i`` names).
            losses: the loss terms, each a :class:`~domainbert.distill.losses.LossTerm` given by ``class_path`` and
                ``init_args`` (``weight``, default 1, and ``name`` among them), e.g. ``{class_path: KLDivergenceLoss,
                init_args: {weight: 0.5, temperature: 2.0}}``, ``{class_path: HardLabelLoss, init_args: {weight:
                0.5}}``, ``{class_path: HiddenStateLoss, init_args: {weight: 0.1, kind: cosine}}`` (its
                ``layer_map``, ``{student_layer: teacher_layer}`` with 0 the embeddings, defaults to the layers a
                copied student came from, else TinyBERT's uniform map) or ``AttentionLoss`` (both models then use
                eager attention); ``--model.losses.help <class>`` lists a term's arguments. Each is logged as
                ``train/loss_<name>`` (``kl``, ``hard``, ``hidden``, ``attention``, else the class name in lower
                case); a term of weight 0 is left out. None: soft targets at ``T = 2`` and hard labels, 0.5 each.
                A checkpoint saves them as ``{class_path, init_args}`` dicts, rebuilt only when ``class_path`` names
                a ``LossTerm`` subclass; a 0.1.0 checkpoint's or config's ``alpha``, ``beta``, ``gamma``,
                ``delta``, ``temperature``, ``hidden_loss``, ``layer_map`` and ``extra_losses`` are read as the
                terms they meant (:func:`~domainbert.distill.released.from_released`).
            teacher_cache: a folder where the teacher's training-set outputs are kept and reused by later epochs
                and runs (logits, plus the hidden states the hidden-state loss reads). It fills as training runs
                the teacher (written at each epoch's end): no separate pass over the data. Not for masked-LM
                (the masks change every step) nor with the attention loss.
            mlm_probability: masked-LM: share of tokens masked (when the data does not mask).
            chunk_rows: the teacher and the student run each training batch in chunks of this many rows,
                sorted by length and each padded only to its longest row, with the outputs put back in the
                batch's order (:mod:`domainbert.distill.chunks`): the same batch and losses with less padding.
                ``auto``: 8 on a CPU (among the fastest measured; docs/benchmarks/distillation.md), the whole
                batch on a CPU with AMX in bf16 and on other devices; None: the whole batch.
            learning_rate: peak learning rate of the student.
            weight_decay: AdamW weight decay (not on biases and LayerNorm).
            warmup_ratio: fraction of the steps with linear warm-up; then linear decay to 0.
            seed: seed of the masked-LM masks.
            optimizer: an optimizer class path and its arguments; AdamW by default.
        """
        super().__init__()
        task = Task.parse(task).value  # saved under its one name, whatever name it was given by
        self.save_hyperparameters(ignore=["optimizer"])
        self.optimizer = optimizer
        self._set_task(task, teacher_cache)
        check_chunk_rows(chunk_rows)
        terms = build_losses(losses)  # checked before any model loads
        members = self._load_teachers(teacher, num_labels, label_names)
        self.model, default_map, self.tokenizer = build_student(
            members[0],
            self.tokenizer,
            self.task,
            student,
            student_layers,
            student_config,
            layer_selection,
            self.teacher_names[0],
            own_tokenizer=self.task is Task.CLASSIFICATION,
        )
        self.export_source = None
        teacher_model = self._teacher_module(members)
        self.teacher = teacher_model
        self.register_state_dict_post_hook(drop_teacher_weights)
        objective = build_objective(
            terms, self.model.config, members[0].config, multi_label=self.multi_label, default_map=default_map
        )
        self._use_objective(objective, teacher_cache)
        self._save_loss_configs()
        self._check_retokenized()
        self.masker = Masker(self.tokenizer, probability=mlm_probability) if self.task_spec.masked else None
        self.val_metrics = self.task_spec.metrics(self.label_names, self.multi_label)
        self.test_metrics = self.task_spec.metrics(self.label_names, self.multi_label)
        self._scored = {"val": False, "test": False}
        self._hard = HardLabelLoss()

    @classmethod
    def released_overrides(cls, saved: dict, where: str, from_file: bool) -> dict:
        """:meth:`HFModule.released_overrides`, and a 0.1.0 checkpoint's loss options read as ``losses``.

        Its ``alpha``, ``beta``, ``gamma``, ``delta``, ``temperature``, ``hidden_loss``, ``layer_map`` and
        ``extra_losses`` (:func:`~domainbert.distill.released.from_released`) are given as ``losses``, unless an
        ``hparams_file`` is read instead (``from_file``); a ``losses`` the call gives wins.
        """
        out = super().released_overrides(saved, where, from_file)
        if not from_file and saved.keys() & RELEASED.keys():
            out["losses"] = from_released(saved, where)["losses"]
        return out

    # -- set-up and checks ------------------------------------------------------------------------
    def _save_loss_configs(self) -> None:
        """Keep ``losses`` in the hyper-parameters as ``{class_path, init_args}`` dicts, never as modules.

        Given as terms (from Python) they would be pickled into checkpoints, which ``--ckpt_path`` loads only as
        plain data. Not given, the default terms are written out: a checkpoint names every term it trained with.
        """
        configs = loss_configs(self.hparams.get("losses"))
        self.hparams["losses"] = configs
        if hasattr(self, "_hparams_initial"):
            self._hparams_initial["losses"] = copy.deepcopy(configs)

    def _set_task(self, task: str, teacher_cache: str | None) -> None:
        """Keep the task and its distillation record; a teacher cache only for a task that allows one."""
        self.task = Task(task)
        self.task_spec = distill_task(self.task)
        if teacher_cache and self.task_spec.no_cache:
            raise DomainBertError(f"teacher_cache does not apply to {self.task_spec.no_cache}")

    def _load_teachers(
        self, teacher: str | list[str], num_labels: int | None, label_names: list[str] | None
    ) -> list[nn.Module]:
        """Load the frozen teacher(s) and their tokenizers; take their label set, checked against the data's.

        The first teacher's tokenizer is the student's unless a ``student`` checkpoint brings its own.
        """
        names = [teacher] if isinstance(teacher, str) else list(teacher)
        if not names or not all(isinstance(n, str) and n for n in names):
            raise DomainBertError(f"model.teacher={teacher!r}: expected a model folder, or a list of them")
        if len(names) > 1 and self.task not in (Task.CLASSIFICATION, Task.TAGGING):
            raise DomainBertError(
                f"model.teacher: {len(names)} teachers average their class probabilities, which classification and "
                f"tagging have; {self.task.value} distils from one teacher"
            )
        self.teacher_names = names
        self.teacher_paths = [resolve_local_alias(n) for n in names]
        self.teacher_path = self.teacher_paths[0]
        models = [load_teacher(p, self.task, n) for p, n in zip(self.teacher_paths, names)]
        self.teacher_tokenizers = [load_tokenizer(p) for p in self.teacher_paths]
        self.tokenizer = self.teacher_tokenizers[0]
        self.multi_label = is_multi_label(models[0].config)
        self.label_names = None
        if self.task_spec.labelled:
            own = teacher_labels(models[0].config)
            for name, model in zip(names[1:], models[1:]):
                if teacher_labels(model.config) != own or is_multi_label(model.config) != self.multi_label:
                    raise DomainBertError(
                        f"model.teacher: {name} has the labels {teacher_labels(model.config)}, {names[0]} {own}: "
                        "teachers averaged together need one label set, in one order"
                    )
            self.label_names = model_labels(num_labels, label_names, own, source="the teacher", fixed=True)
        return models

    def _teacher_module(self, members: list[nn.Module]) -> nn.Module:
        """The teachers as one module: each that tokenizes differently from the student retokenized, then averaged."""
        wrapped = []
        for model, tok, name in zip(members, self.teacher_tokenizers, self.teacher_names):
            if tokenizer_difference(tok, self.tokenizer) is None:
                wrapped.append(model)
                continue
            wrapped.append(Retokenized(model, tok, self.tokenizer, teacher_max_length(tok, model)))
            log.info("teacher %s tokenizes differently from the student: it reads the student's tokens as text", name)
        return wrapped[0] if len(wrapped) == 1 else TeacherEnsemble(wrapped, multi_label=self.multi_label)

    def _check_retokenized(self) -> None:
        """Refuse token-level loss terms against a teacher that reads other tokens (see :class:`Retokenized`)."""
        first = self.teacher.members[0] if isinstance(self.teacher, TeacherEnsemble) else self.teacher
        if isinstance(first, Retokenized) and (self.need_hidden or self.need_attentions):
            raise DomainBertError(
                f"the teacher {self.teacher_names[0]} tokenizes differently from the student, so their hidden states "
                "and attention maps have no common token positions: drop HiddenStateLoss and AttentionLoss from "
                "model.losses (only logits are distilled), or list first a teacher that shares the student's tokenizer"
            )

    def _use_objective(self, objective, teacher_cache: str | None) -> None:
        """Keep the loss terms; ask the models only for the outputs the terms read."""
        self.losses = nn.ModuleDict(objective.terms)
        self.loss_weights = objective.weights
        self.need_hidden = objective.needs("needs_hidden_states")
        self.need_attentions = objective.needs("needs_attentions")
        self.need_teacher = objective.needs("needs_teacher", True)
        if teacher_cache and self.need_attentions:
            raise DomainBertError(
                "teacher_cache cannot hold attention maps, which a loss term needs: drop AttentionLoss (and other "
                "attention terms) from model.losses, or drop teacher_cache"
            )
        if self.need_attentions:
            for m in (self.model, self.teacher):
                m.set_attn_implementation("eager")
        self.cache: TeacherCache | None = None
        self._cache_seen = (0, 0)
        self._fill: CacheFill | None = None
        self._cache_key: str | None = None

    def setup(self, stage: str) -> None:
        dm = self.attached_datamodule()
        settings = {"multi_label": self.multi_label} if self.task_spec.labelled else {}
        check_agreement(dm, self.label_names, settings, owner="model.teacher")
        if contract.windows(dm) is not None:
            raise DomainBertError(
                "data.long_text=windows: distillation reads each text once, truncated at data.max_length; set "
                "data.long_text: truncate (the student still learns from a windowed teacher's truncated inputs)"
            )
        if contract.text_pair_column(dm) and self._retokenizes():
            raise DomainBertError(
                "data.text_pair_column: a teacher that tokenizes differently from the student reads single texts; "
                "distil text pairs from a teacher with the student's tokenizer"
            )
        if contract.soft_label_column(dm):
            raise DomainBertError(
                "distillation learns the teacher's probabilities already (the KL term); unset data.soft_label_column "
                "(the hard-label term would read the soft targets as multi-label targets)"
            )

    def _retokenizes(self) -> bool:
        """Whether some teacher reads the student's tokens as text (its tokenizer differs)."""
        members = self.teacher.members if isinstance(self.teacher, TeacherEnsemble) else [self.teacher]
        return any(isinstance(m, Retokenized) for m in members)

    def train(self, mode: bool = True):
        """Switch the student (and loss modules) to ``mode``; the teacher always stays in eval mode."""
        super().train(mode)
        self.teacher.eval()
        return self

    def on_fit_start(self) -> None:
        """The student trains with its dropout on; Lightning's warning about the frozen teacher's eval mode is hidden.

        A student loaded from a folder (``student=``) comes from ``from_pretrained`` in eval mode, and Lightning
        keeps a module's mode at the start of fit: without this it would train with dropout off.
        """
        super().on_fit_start()
        self.train()
        from domainbert.core.quiet import expect_frozen_modules

        expect_frozen_modules(self.teacher)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """Leave the frozen teacher out of checkpoints: it is reloaded from ``teacher``.

        ``state_dict()`` already leaves it out (:func:`~domainbert.distill.teacher.drop_teacher_weights`), so a
        checkpoint holds exactly the weights the module reports as its own and ``validate/test --ckpt_path`` finds
        none missing.
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
    def on_train_start(self) -> None:
        """Open the teacher-output cache of this teacher and training data, if one was written; else start empty.

        Nothing runs the teacher here: the cache fills as training does (:meth:`teacher_outputs` keeps what the
        teacher computes for a batch the cache lacks), so a short run (``max_steps``, ``limit_train_batches``)
        costs only the batches it trains on. What was kept is written at the end of each epoch and of the run.
        """
        root = self.hparams.teacher_cache
        loader = self.trainer.train_dataloader
        self.discard_cache_fill()
        self._cache_key = None
        if not root or not self.need_teacher or loader is None:
            return
        dm = self.attached_datamodule()
        hidden = [t for t in self.losses.values() if isinstance(t, HiddenStateLoss)]
        layers = sorted({n for term in hidden for n in term.teacher_layers_used()})
        what = {"task": self.task.value, "layers": layers, "student_tokenizer": self._student_tokenizer_key()}
        if len(self.teacher_paths) > 1:
            what["teachers"] = [fingerprint(p, [], None, {}) for p in self.teacher_paths[1:]]
        if contract.transfer(dm) is not None:
            what["transfer"] = repr(contract.transfer(dm))
        self._cache_key = training_fingerprint(self.teacher_path, dm, loader, what)
        self._cache_layers = layers
        self._cache_described = {"teacher": self.teacher_path, "data": data_files(dm), "task": self.task.value}
        self.cache = TeacherCache.open(root, self._cache_key)
        if self.cache is None:
            log.info(
                "teacher cache: none yet for this teacher and data (%s): the teacher's outputs are kept as training "
                "computes them, and written at the end of each epoch",
                self._cache_key,
            )
        else:
            log.info("teacher cache: %d examples in %s", len(self.cache), self.cache.path)

    def _student_tokenizer_key(self) -> str | None:
        """The student's tokenizer, for the cache's fingerprint, when a teacher reads its tokens as text."""
        if not self._retokenizes():
            return None
        from domainbert.data.token_cache import tokenizer_fingerprint

        return tokenizer_fingerprint(self.tokenizer)

    def teacher_outputs(self, batch: dict, input_ids: torch.Tensor, selected, chunks=None):
        """The teacher's outputs of a training batch: from the cache, else computed (and kept for the cache).

        ``chunks``: the batch's rows in length-sorted chunks to run the teacher on (:meth:`chunks`), or None.
        """
        if self.cache is not None and (cached := self.cache.lookup(batch)) is not None:
            return cached
        out = self._teacher_forward(batch, input_ids, selected, chunks=chunks)
        if self._cache_key is not None and self.trainer.is_global_zero:
            if self._fill is None:
                root, key, layers = self.hparams.teacher_cache, self._cache_key, self._cache_layers
                self._fill = CacheFill(root, key, layers, base=self.cache, description=self._cache_described)
            self._fill.add(batch, out.logits, out.hidden_states)
        return out

    def _commit_cache(self) -> None:
        """Write the teacher outputs kept so far into the cache (rank 0), and let every rank read it."""
        if self._cache_key is None:
            return
        if self._fill is not None:
            fill, self._fill = self._fill, None
            if fill.rows:
                fill.commit()
            else:
                fill.discard()
        self.trainer.strategy.barrier()
        rows = cached_rows(self.hparams.teacher_cache, self._cache_key)
        if rows is not None and (self.cache is None or rows != len(self.cache)):  # rows only grow
            self.cache, self._cache_seen = TeacherCache.open(self.hparams.teacher_cache, self._cache_key), (0, 0)

    def discard_cache_fill(self) -> None:
        """Drop the teacher outputs not written yet (an interrupted run): the cache on disk stays as it was."""
        fill, self._fill = self._fill, None
        if fill is not None:
            fill.discard()
            log.info("teacher cache: run interrupted; %d unwritten examples dropped", fill.rows)

    def configure_callbacks(self) -> list[L.Callback]:
        """The callback that drops an unwritten cache fill when ``fit`` stops on an error, SIGTERM or Ctrl-C.

        None when the trainer has it already (a ``test`` after ``fit`` on the same trainer): Lightning would print
        that the module's callback overrides the trainer's.
        """
        trainer = attached_trainer(self)
        if trainer is not None and any(isinstance(c, _DropCacheFillOnError) for c in trainer.callbacks):
            return []
        return [_DropCacheFillOnError()]

    def on_train_epoch_end(self) -> None:
        if self.cache is not None:
            hits, misses = self.cache.hits - self._cache_seen[0], self.cache.misses - self._cache_seen[1]
            self._cache_seen = (self.cache.hits, self.cache.misses)
            if hits + misses:
                self.log("train/teacher_cache_hits", hits / (hits + misses))
                if misses:
                    log.info("teacher cache: %d of %d batches ran the teacher", misses, hits + misses)
        self._commit_cache()

    def on_train_end(self) -> None:
        self._commit_cache()

    # -- forward ----------------------------------------------------------------------------------
    def _inputs(self, model, batch: dict, input_ids: torch.Tensor) -> dict:
        names = [k for k in self.tokenizer.model_input_names if k != "input_ids"]
        return model_inputs(model, {"input_ids": input_ids, **{k: batch[k] for k in names if k in batch}})

    def _run(self, model, batch: dict, input_ids, selected, hidden: bool, attentions: bool, chunks=None):
        """One model's outputs (see :class:`~domainbert.distill.task_table.DistillTask`'s ``run``).

        Over the whole batch, or given ``chunks``, chunk by chunk (:func:`~domainbert.distill.chunks.run_in_chunks`).
        """
        kw = {}
        if hidden:
            kw["output_hidden_states"] = True
        if attentions:
            kw["output_attentions"] = True
        run = functools.partial(self.task_spec.run, model, **kw)
        inputs = self._inputs(model, batch, input_ids)
        if chunks is None:
            return run(inputs, selected)
        return run_in_chunks(run, inputs, selected, chunks, self.task_spec.layout)

    def _teacher_forward(self, batch: dict, input_ids, selected, hidden: bool | None = None, chunks=None):
        hidden = self.need_hidden if hidden is None else hidden
        with torch.no_grad(), teacher_autocast(attached_trainer(self), self.device):
            return self._run(self.teacher, batch, input_ids, selected, hidden, self.need_attentions, chunks)

    def chunks(self, attention_mask: torch.Tensor) -> list[torch.Tensor] | None:
        """The training batch's rows in the length-sorted chunks ``chunk_rows`` asks for; None: the whole batch."""
        rows = self.hparams.chunk_rows
        if rows == "auto":
            trainer = attached_trainer(self)
            rows = auto_chunk_rows(self.device, str(getattr(trainer, "precision", "")) if trainer else "")
        return length_chunks(attention_mask, rows)

    def prepare(self, batch: dict, salt: int) -> tuple[torch.Tensor, torch.Tensor | None, dict]:
        """``(input_ids, masked positions or None, the batch the losses see)``; masked-LM inputs get masked."""
        mask = batch.get("attention_mask")
        if mask is None:
            mask = torch.ones_like(batch["input_ids"])
        if not self.task_spec.masked:
            view = {"attention_mask": mask}
            targets = self.task_spec.targets(batch)
            if targets is not None:
                view["labels"] = targets
            return batch["input_ids"], None, view
        if "labels" in batch:
            input_ids, labels = batch["input_ids"], batch["labels"]
        else:
            generator = step_generator(self.hparams.seed, salt, self.device)
            input_ids, labels = self.masker(batch["input_ids"], mask, generator=generator)
        selected = labels != IGNORE_INDEX
        return input_ids, selected, {"attention_mask": mask, "labels": labels[selected]}

    def _for_losses(self, out, view: dict) -> Outputs:
        """A model's outputs with the logits laid out as the loss terms read them (QA: per start and end)."""
        logits = self.task_spec.loss_logits(out.logits, view["attention_mask"])
        return Outputs(logits, getattr(out, "hidden_states", None), getattr(out, "attentions", None))

    def distill_loss(self, student_out, teacher_out, view: dict) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The weighted sum of the loss terms, and each term's unweighted value."""
        student_out = self._for_losses(student_out, view)
        teacher_out = self._for_losses(teacher_out, view) if teacher_out is not None else None
        parts = {name: term(student_out, teacher_out, view) for name, term in self.losses.items()}
        total = sum(self.loss_weights[name] * value for name, value in parts.items())
        return total, parts

    def forward(self, batch: dict) -> torch.Tensor:
        """The student's logits for a batch (masked-LM: at the masked positions; QA: start and end per token)."""
        input_ids, selected, _ = self.prepare(batch, salt=0)
        return self._run(self.model, batch, input_ids, selected, False, False).logits

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        input_ids, selected, view = self.prepare(batch, salt=self.global_step)
        chunks = self.chunks(view["attention_mask"])
        student_out = self._run(self.model, batch, input_ids, selected, self.need_hidden, self.need_attentions, chunks)
        teacher_out = None
        if self.need_teacher:
            teacher_out = self.teacher_outputs(batch, input_ids, selected, chunks)
        loss, parts = self.distill_loss(student_out, teacher_out, view)
        n = input_ids.shape[0]
        self.log("train/loss", loss, prog_bar=True, batch_size=n)
        for name, value in parts.items():
            self.log(f"train/loss_{name}", value, batch_size=n)
        return loss

    # -- evaluation -------------------------------------------------------------------------------
    def _evaluate(self, batch: dict, batch_idx: int, stage: str) -> None:
        input_ids, selected, view = self.prepare(batch, salt=-(batch_idx + 1))
        out = self._run(self.model, batch, input_ids, selected, False, False)
        if "labels" not in view:
            return
        n = input_ids.shape[0]
        self.log(
            f"{stage}/loss", self._hard(self._for_losses(out, view), None, view), batch_size=n, prog_bar=stage == "val"
        )
        metrics = self.val_metrics if stage == "val" else self.test_metrics
        self.task_spec.update(metrics, out.logits.float(), view["labels"], batch, self.multi_label)
        self._scored[stage] = True

    def end_evaluation(self, stage: str) -> None:
        """Log the epoch's metrics as ``<stage>/<name>`` and reset them."""
        metrics = self.val_metrics if stage == "val" else self.test_metrics
        if self._scored[stage]:
            scores = metrics.compute()
            self.log_dict({f"{stage}/{name}": value for name, value in scores.items()}, prog_bar=stage == "val")
        metrics.reset()
        self._scored[stage] = False

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self._evaluate(batch, batch_idx, "val")

    def test_step(self, batch: dict, batch_idx: int) -> None:
        self._evaluate(batch, batch_idx, "test")


class _DropCacheFillOnError(L.Callback):
    """Drops the module's unwritten teacher-cache fill when ``fit`` stops on an exception (SIGTERM, Ctrl-C)."""

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        if isinstance(pl_module, DistillationModule):
            pl_module.discard_cache_fill()
