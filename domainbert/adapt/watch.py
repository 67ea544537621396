"""Watch the task while adapting: a frozen-embedding probe scored every N pretraining steps, the best encoder kept.

Continued pretraining (masked LM, contrastive) optimises a proxy; whether it helps the task shows only on the
task. :class:`ProbeWatch` embeds the task's training and validation texts with the current encoder (mean pooling,
as the fine-tuning head and ``domainbert probe`` use), fits the logistic-regression probe and logs its validation
score as ``probe/val_<metric>``, at step 0 (the base model, before any update) and every ``every_n_steps`` steps.
It keeps the best-probing weights in memory (on the CPU), stops the fit after ``patience`` checks without
improvement, and at the end restores those weights, so the export is the checkpoint best for the task: the base
model itself when no adapted step beat it. Step 0's embeddings and probe are those of ``domainbert probe`` on the
same files, read from the embedding cache when a stage computed them (:mod:`domainbert.core.embed_cache`;
``DOMAINBERT_EMBEDDING_CACHE=off`` turns it off).

Wire it into any pretraining config (``configs/pretrain/*.yaml``)::

    trainer:
      callbacks:
        - class_path: domainbert.adapt.watch.ProbeWatch
          init_args:
            train: examples/data/debian-packages/train.jsonl
            val: examples/data/debian-packages/validation.jsonl
            every_n_steps: 100
            patience: 3
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import lightning.pytorch as L
import torch

from domainbert.core.compat import attached_trainer
from domainbert.errors import DomainBertError

log = logging.getLogger(__name__)


class ProbeWatch(L.Callback):
    """Score a probe on the task's frozen embeddings while pretraining; keep the best step (0 included); stop early.

    The probe's inverse L2 strength ``C`` is chosen once, at the first check, on the validation split (the grid of
    :func:`domainbert.core.probe.select_probe`) and then held fixed, so later scores differ only by the encoder.
    While a pretraining module trains its head alone (``head_warmup_steps`` of the masked-LM and TSDAE modules,
    encoder frozen) the encoder is the base model, so no check runs then. The best weights travel in the callback's
    checkpoint state (a resumed fit keeps them), which makes a checkpoint about one model copy larger.

    After ``fit``, :attr:`summary` says whether adaptation improved the probe, :attr:`history` holds every check
    (``{"step", "score"}``), and ``<run dir>/probe_watch.json`` records both.
    """

    def __init__(
        self,
        train: str,
        val: str,
        every_n_steps: int = 100,
        patience: int | None = 3,
        metric: str = "f1_macro",
        min_delta: float = 0.0,
        text_column: str = "text",
        text_pair_column: str | None = None,
        label_column: str = "label",
        max_length: int = 128,
        batch_size: int = 64,
        restore_best: bool = True,
        check_at_end: bool = True,
    ) -> None:
        """Configure the watch.

        Args:
            train: the task's training rows (any file ``domainbert probe`` reads); the probe is fitted on them.
            val: the task's validation rows; the probe is scored on them.
            every_n_steps: optimizer steps between checks (step 0 is always checked).
            patience: checks without improvement after which the fit stops; None: never stop early.
            metric: ``f1_macro`` or ``acc``; logged as ``probe/val_<metric>``.
            min_delta: a check improves on the best only when it beats it by more than this.
            text_column: the text column of both files.
            text_pair_column: the second text of pair tasks; None for single texts.
            label_column: the label column.
            max_length: truncation length in tokens when embedding.
            batch_size: texts per forward pass when embedding.
            restore_best: at the end, load the best-probing weights (the base model's when step 0 was best), so
                the export is that step; the export then skips its own best-checkpoint restore.
            check_at_end: check the final weights too when the last step is not a multiple of ``every_n_steps``.
        """
        from domainbert.core.stats import METRICS

        super().__init__()
        if not isinstance(every_n_steps, int) or every_n_steps < 1:
            raise DomainBertError(f"ProbeWatch every_n_steps={every_n_steps!r}: expected a whole number of steps >= 1")
        if patience is not None and (not isinstance(patience, int) or patience < 1):
            raise DomainBertError(f"ProbeWatch patience={patience!r}: expected a whole number >= 1, or null")
        if metric not in METRICS:
            raise DomainBertError(f"ProbeWatch metric={metric!r}: expected one of {sorted(METRICS)}")
        if min_delta < 0:
            raise DomainBertError(f"ProbeWatch min_delta={min_delta}: expected 0 or more")
        self.paths = {"train": train, "val": val}
        self.columns = (text_column, text_pair_column, label_column)
        self.every_n_steps, self.patience, self.metric, self.min_delta = every_n_steps, patience, metric, min_delta
        self.max_length, self.batch_size = max_length, batch_size
        self.restore_best, self.check_at_end = restore_best, check_at_end
        self.name = f"probe/val_{metric}"
        self._data: dict | None = None
        self.c: float | None = None
        self.history: list[dict] = []
        self.best_score: float | None = None
        self.best_step: int | None = None
        self.bad_checks = 0
        self.best_state: dict[str, torch.Tensor] | None = None
        self.summary: str | None = None
        self._keys: dict[str, str | None] | None = None

    # -- data -------------------------------------------------------------------------------------
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """Read the task's rows once, before fitting; unreadable files or an unknown label are errors."""
        if stage != "fit" or self._data is not None:
            return
        from domainbert.adapt.probe_cmd import read_split

        text, pair, label = self.columns
        texts, names = read_split(self.paths["train"], text, pair, label, None)
        labels = sorted(set(names))
        if len(labels) < 2:
            raise DomainBertError(f"ProbeWatch train={self.paths['train']!r}: a single label {labels}; need two")
        val_texts, val_names = read_split(self.paths["val"], text, pair, label, labels)
        ids = {n: i for i, n in enumerate(labels)}
        self._data = {
            "labels": labels,
            "train": (texts, torch.tensor([ids[n] for n in names])),
            "val": (val_texts, torch.tensor([ids[n] for n in val_names])),
        }

    # -- checks -----------------------------------------------------------------------------------
    def embed(self, pl_module: L.LightningModule) -> dict[str, torch.Tensor]:
        """Mean-pooled embeddings of the train and val texts by the module's current encoder (its mode kept).

        The first check of a fit from step 0 embeds the base model as loaded: through the embedding cache
        (:mod:`domainbert.core.embed_cache`), which ``domainbert probe`` on the same files fills, with one
        ``[cache]`` line per split. Later checks embed the adapted encoder, uncached.
        """
        from domainbert.core.embed import embed_texts, modes_kept

        model = pl_module.model
        encoder = getattr(model, "base_model", model)
        texts = {split: self._data[split][0] for split in ("train", "val")}
        self._keys = None
        with modes_kept(encoder):
            if self._at_base(pl_module):
                return self._embed_base(pl_module, encoder, texts)
            return {
                s: embed_texts(encoder, pl_module.tokenizer, t, self.batch_size, self.max_length)
                for s, t in texts.items()
            }

    def _at_base(self, pl_module: L.LightningModule) -> bool:
        """Whether the encoder is the base model as loaded: the first check, at step 0 of a fit not resumed."""
        trainer = attached_trainer(pl_module)
        return not self.history and self.c is None and trainer is not None and trainer.global_step == 0

    def _embed_base(self, pl_module: L.LightningModule, encoder, texts: dict) -> dict[str, torch.Tensor]:
        """The base model's embeddings through the cache; keeps their keys for the probe's cache (:meth:`score`)."""
        from domainbert.core.embed_cache import Embedder

        source = getattr(encoder.config, "name_or_path", "") or ""  # the folder from_pretrained read
        embedder = Embedder(source, pl_module.tokenizer, encoder, self.max_length, self.batch_size)
        x, keys = {}, {}
        for split, rows in texts.items():
            x[split], keys[split] = embedder.embed(rows, Path(self.paths[split]).name)
        self._keys = keys
        return x

    def score(self, x: dict[str, torch.Tensor]) -> float:
        """Fit the probe on ``x['train']`` (choosing ``C`` on validation the first time) and score ``x['val']``."""
        from domainbert.core.embed_cache import cached_probe
        from domainbert.core.probe import fit_logreg, select_probe
        from domainbert.core.stats import METRICS

        y_train, y_val = self._data["train"][1], self._data["val"][1]
        n = len(self._data["labels"])
        if self.c is None:
            keys = self._keys or {"train": None}

            def fit():
                return select_probe(x["train"], y_train, x["val"], y_val, n)

            ys = {"train": y_train, "val": y_val}
            probe = cached_probe(keys, ys, self._data["labels"], fit, Path(self.paths["train"]).name)
            self.c = probe.c
        else:
            probe = fit_logreg(x["train"], y_train, n, self.c)
        pred = probe.logits(x["val"]).argmax(-1)
        return METRICS[self.metric](y_val.numpy(), pred.numpy(), n)

    def check(self, trainer: L.Trainer, pl_module: L.LightningModule, step: int) -> None:
        """Score the probe at ``step``, log it, keep the weights if best, and stop after ``patience`` bad checks."""
        value = self.score(self.embed(pl_module))
        self.history.append({"step": step, "score": value})
        trainer.callback_metrics[self.name] = torch.tensor(value)
        for logger in trainer.loggers:
            logger.log_metrics({self.name: value}, step=step)
        if self.best_score is None or value > self.best_score + self.min_delta:
            self.best_score, self.best_step, self.bad_checks = value, step, 0
            self.best_state = {k: v.detach().to("cpu", copy=True) for k, v in pl_module.state_dict().items()}
            log.info("step %d: %s %.4f (best so far)", step, self.name, value)
            return
        self.bad_checks += 1
        log.info("step %d: %s %.4f (best %.4f at step %d)", step, self.name, value, self.best_score, self.best_step)
        if step > 0 and self.patience is not None and self.bad_checks >= self.patience:
            stop = trainer.strategy.reduce_boolean_decision(True, all=False)
            if stop:
                trainer.should_stop = True
                log.warning(
                    "ProbeWatch: %d checks without improving %s (best %.4f at step %d); stopping at step %d",
                    self.bad_checks, self.name, self.best_score, self.best_step, step,
                )  # fmt: skip

    def _due(self, pl_module: L.LightningModule, step: int) -> bool:
        """Whether ``step`` has not been checked yet and the encoder has moved (not in a head-only warm-up)."""
        if self.history and step <= self.history[-1]["step"]:
            return False
        from domainbert.modules.head_warmup import HeadWarmup

        return step > (pl_module.head_warmup_steps if isinstance(pl_module, HeadWarmup) else 0)

    # -- hooks ------------------------------------------------------------------------------------
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._data is None:
            self.setup(trainer, pl_module, "fit")
        if not self.history:  # not resumed: the base model, before any update
            if trainer.global_step > 0:
                log.warning("ProbeWatch: first check at step %d; the base model is not scored", trainer.global_step)
            self.check(trainer, pl_module, trainer.global_step)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if step % self.every_n_steps == 0 and self._due(pl_module, step):
            self.check(trainer, pl_module, step)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        step = trainer.global_step
        if self.check_at_end and self._due(pl_module, step):  # a step this watch stopped at is checked already
            self.check(trainer, pl_module, step)
        if not self.history:
            return
        self.summary = self.verdict()
        log.info("ProbeWatch: %s", self.summary)
        if trainer.is_global_zero:
            print(f"ProbeWatch: {self.summary}")
        if self.restore_best and self.best_state is not None:
            from domainbert.core.callbacks import HFExport

            pl_module.load_state_dict(self.best_state)
            for cb in trainer.callbacks:
                if isinstance(cb, HFExport):  # export this step, not the checkpoint that val/loss chose
                    cb.restore_best = False
            log.info("ProbeWatch: restored the weights of step %d", self.best_step)
        self._write(trainer)

    def verdict(self) -> str:
        """One line saying whether an adapted step beat step 0's probe, with both scores."""
        first, later = self.history[0], self.history[1:]
        best_later = max((h["score"] for h in later), default=None)
        shown = "none checked" if best_later is None else f"{best_later:.4f}"
        if self.best_step == first["step"]:
            return (
                f"adaptation did not improve the task's probe: step {first['step']} probe {first['score']:.4f}, "
                f"best later {shown}"
            )
        return (
            f"adaptation improved the task's probe: step {first['step']} probe {first['score']:.4f}, "
            f"best {self.best_score:.4f} at step {self.best_step}"
        )

    def _write(self, trainer: L.Trainer) -> None:
        """``<run dir>/probe_watch.json``: every check, the chosen ``C``, the best step and the verdict (rank 0)."""
        if not trainer.is_global_zero:
            return
        from domainbert.core.files import atomic_write_text

        record = {
            "metric": self.name,
            "c": self.c,
            "history": self.history,
            "best_step": self.best_step,
            "best_score": self.best_score,
            "restored": bool(self.restore_best and self.best_state is not None),
            "summary": self.summary,
        }
        folder = Path(trainer.log_dir or trainer.default_root_dir)
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write_text(folder / "probe_watch.json", json.dumps(record, indent=2) + "\n")

    # -- checkpoint state -------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {
            "c": self.c,
            "history": self.history,
            "best_score": self.best_score,
            "best_step": self.best_step,
            "bad_checks": self.bad_checks,
            "best_state": self.best_state,
        }

    def load_state_dict(self, state_dict: dict) -> None:
        for k, v in state_dict.items():
            setattr(self, k, v)
