"""The pipeline's settings: the task's files, and one small dataclass per stage."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from domainbert.core.settings import finite, whole_number
from domainbert.errors import DomainBertError


@dataclass
class StageSpec:
    """One training stage: a fit config and its overrides."""

    config: str | None = None
    """The stage's fit config; None: the built-in one for this stage (``domainbert/pipeline/stages/``)."""
    args: list[str] | dict[str, Any] = field(default_factory=list)
    """Overrides of the stage's config, applied last: a config dict (``{trainer: {max_steps: 200}}``) or
    command-line options (``["--trainer.max_steps=200"]``), which jsonargparse parses as ``domainbert fit`` does."""
    enabled: bool = True
    """Run this stage."""


@dataclass
class WatchSpec:
    """The task watched while a pretraining stage trains (``ProbeWatch``), and the gate on fine-tuning its model.

    Every ``every_n_steps`` steps (and at step 0, the starting model) the watch embeds the task's training and
    validation texts with the current encoder, fits the frozen-embedding probe and scores validation; the stage
    exports the best-probing step (step 0 included) and stops after ``patience`` checks without improvement. The
    gate then fine-tunes the stage's model only when its best probe beats the base model's by more than ``margin``.
    """

    enabled: bool = True
    """Watch the task while pretraining (and gate on it)."""
    every_n_steps: int | None = None
    """Steps between checks; None: the stage's ``max_steps`` // 16 (at least 1; 100 for a fit without max_steps),
    so that with ``patience: 3`` a stage that does not help stops within a quarter of its steps."""
    patience: int | None = 3
    """Checks without improvement after which the stage stops; None: never early."""
    gate: bool = True
    """Fine-tune the stage's model only when its best probe beats the base model's by more than ``margin``."""
    margin: float = 0.0
    """How much the best probe must beat the base model's by (a negative margin opens the gate always)."""

    def __post_init__(self) -> None:
        """Refuse values the watch or the gate cannot use (a pipeline names them as ``<stage>.watch.<field>``).

        Raises:
            SettingError: ``every_n_steps`` or ``patience`` below 1, or a ``margin`` that is not a finite number.
        """
        whole_number(self.every_n_steps, "watch.every_n_steps", 1, none="from the stage's max_steps")
        whole_number(self.patience, "watch.patience", 1, none="never stop early")
        finite(self.margin, "watch.margin")


@dataclass
class PretrainSpec(StageSpec):
    """A pretraining stage (DAPT, TAPT, contrastive): a fit config, its overrides, and the task watched meanwhile."""

    watch: WatchSpec = field(default_factory=WatchSpec)
    """The task's probe watched while it trains, and the gate on fine-tuning its model."""


@dataclass
class DaptSpec(PretrainSpec):
    """DAPT: a pretraining stage whose default, ``auto``, runs it only where masked-LM adaptation can pay."""

    enabled: bool | Literal["auto"] = "auto"
    """Run DAPT: true, false, or auto: when the base model ships a trained masked-LM head, or when select or vocab
    (enabled) feed it. A sentence embedder without that head (all-MiniLM-L6-v2) is skipped under auto: its head
    would start untrained, and masked-LM adaptation never improved such a model measurably
    (docs/benchmarks/adaptation.md: it hurt on Debian and made no difference on python-docs)."""


@dataclass
class FinetuneSpec:
    """The fine-tuning stage: a fit config and its overrides. It always runs: every starting model is fine-tuned.

    There is no ``enabled``: the fine-tuned base model (the baseline) is what every other model is compared with.
    To run the baseline alone, turn the adaptation stages off (``dapt: {enabled: false}``; tapt, select, vocab and
    self_train are off unless enabled).
    """

    config: str | None = None
    """The stage's fit config; None: the built-in one (``domainbert/pipeline/stages/finetune.yaml``)."""
    args: list[str] | dict[str, Any] = field(default_factory=list)
    """Overrides of the stage's config, applied last: a config dict (``{trainer: {max_epochs: 2}}``) or
    command-line options (``["--trainer.max_epochs=2"]``)."""
    all_seeds: bool = False
    """Fine-tune every starting model on every seed. False: a starting model whose first seed validates behind the
    baseline's mean by more than the baseline seeds' std (two or more seeds) skips its other seeds."""


@dataclass
class VocabSpec:
    """Domain vocabulary extension before DAPT."""

    enabled: bool = False
    """Extend the tokenizer with frequent domain words before DAPT."""
    top_k: int = 500
    """Number of words to add."""
    min_freq: int = 20
    """Minimum corpus count of an added word."""


@dataclass
class SelectSpec:
    """Curated DAPT data (kNN-TAPT, Gururangan et al. 2020 §5): the corpus documents nearest the task's texts."""

    enabled: bool = False
    """Pretrain on the selected documents instead of the whole corpus."""
    k: int = 20
    """Nearest corpus documents taken per training text (the union is kept, nearest first)."""
    max_documents: int | None = None
    """Read at most this many corpus documents (None: all)."""


@dataclass
class SelfTrainSpec:
    """Self-training on the domain corpus (Du et al. 2021): the baseline labels corpus documents, a fresh model learns.

    The fine-tuned baselines label a sample of the corpus (``domainbert pseudolabel``): by default each seed's own
    baseline, or all the seeds' baselines together, their probabilities averaged (``teachers: ensemble``). For each
    seed a model is then fine-tuned from the base model, with the same fine-tuning config, on the task's rows plus
    the documents labelled most confidently, and (with ``then_task``) fine-tuned once more on the task's rows
    alone, so that the gold labels have the last word. It
    competes with the other starting models on validation.
    """

    enabled: bool = False
    """Run self-training (needs ``corpus``)."""
    teachers: Literal["seed", "ensemble"] = "seed"
    """Who labels the corpus: ``seed`` (each seed's own baseline labels its own sample) or ``ensemble`` (every
    seed's baseline, their probabilities averaged; labelled once)."""
    ratio: float = 2.0
    """Pseudo-labelled rows per class, as a multiple of that class's training rows."""
    max_documents: int | None = 20000
    """Label a seeded sample of at most this many corpus documents (None: all)."""
    then_task: bool = True
    """After the run on task + pseudo-labelled rows, fine-tune its export on the task's rows alone."""
    soft: bool = False
    """Keep the teachers' class probabilities as soft targets (distillation with the corpus as transfer set):
    ``ratio`` × the task's rows documents are labelled and all are kept (``pseudolabel --soft``), and the model
    learns their probabilities (``data.soft_label_column``)."""
    start: Literal["base", "baseline"] = "base"
    """What the self-trained model starts from: the base model, or the seed's own fine-tuned baseline."""
    args: list[str] | dict[str, Any] = field(default_factory=list)
    """Overrides of the run on task + pseudo-labelled rows (after the fine-tuning stage's own): a config dict
    (``{trainer: {max_epochs: 1}}``) or command-line options (``["--trainer.max_epochs=1"]``)."""


@dataclass
class SoupSpec:
    """Seed soups (Wortsman et al. 2022): the uniform weight average of a starting model's fine-tuned seed runs.

    For every starting model fine-tuned with two or more seeds, ``domainbert soup`` averages the seeds' weights
    into one model, which is validated and tested as it is (no training) and competes on validation as
    ``<name> soup``. It costs seconds and ships at the inference cost of one model.
    """

    enabled: bool = True
    """Make and evaluate a soup of every starting model with at least two seeds."""


@dataclass
class TransferSpec:
    """The domain corpus as distillation's transfer set (:mod:`domainbert.data.transfer`).

    A seeded sample of corpus documents joins the task's training rows; the teacher labels them, and the student
    learns the teacher's probabilities there (the task's rows keep their gold labels too). Task texts are left out
    of the sample.
    """

    enabled: bool | Literal["auto"] = "auto"
    """Add corpus documents to the distillation's training rows: true, false, or auto (when ``corpus`` is given)."""
    documents: int | None = 8000
    """How many corpus documents; None: all of them."""
    epochs: int = 2
    """Distillation epochs with the transfer set (its rows outnumber the task's; the stage's own epochs are for the
    task's rows alone). ``distill.args`` still win."""
    source: Literal["sample", "nearest"] = "sample"
    """Which documents: ``sample`` (a seeded random sample of the corpus) or ``nearest`` (those nearest the task's
    training texts by the base model's embeddings, ``domainbert select``, about ``documents`` of them: the same
    number of neighbours per text)."""

    def __post_init__(self) -> None:
        from domainbert.errors import DomainBertError

        bad = isinstance(self.documents, bool) or not isinstance(self.documents, (int, type(None)))
        if bad or (self.documents is not None and self.documents < 1):
            raise DomainBertError(
                f"pipeline: distill.transfer.documents={self.documents!r}: expected a positive number, or null for "
                "the whole corpus"
            )
        if isinstance(self.epochs, bool) or not isinstance(self.epochs, int) or self.epochs < 1:
            raise DomainBertError(f"pipeline: distill.transfer.epochs={self.epochs!r}: expected a positive number")


@dataclass
class DistillSpec(StageSpec):
    """Distillation of the chosen model into a smaller student, and what teaches it."""

    teacher: Literal["chosen", "ensemble"] = "chosen"
    """The teacher: ``chosen`` (the shipped model's best seed run) or ``ensemble`` (every seed run of the chosen
    starting model, their probabilities averaged: the seeds' ensemble moved into one student; the chosen run alone
    when there is one seed, or when a soup or the probe was chosen)."""
    transfer: TransferSpec = field(default_factory=TransferSpec)
    """The corpus documents the teacher labels for the student, beside the task's rows."""


@dataclass
class ProbeSpec:
    """Logistic regression on the starting model's frozen mean-pooled embeddings: the cheapest alternative."""

    enabled: bool = True
    """Report it as a row of its own."""
    max_length: int = 128
    """Truncation length in tokens."""


@dataclass
class ExportSpec:
    """Deployment variants of the student."""

    enabled: bool = True
    """Run the export stage."""
    args: list[str] = field(default_factory=lambda: ["--int8", "true", "--bf16", "auto"])
    """Options of ``domainbert export`` (``--help`` lists them): by default the int8 variants, and the bf16 ones
    where this CPU multiplies bf16 natively."""


@dataclass
class DeploySpec:
    """The deployment choice among the export's variants: the fastest within a macro-F1 drop (or a latency limit).

    The export measures the student's variants, the teacher with its own int8 and ONNX int8 (and bf16, where the CPU
    multiplies bf16 natively), and the frozen-embedding probe; the report names, among those at most ``max_ms``
    ms/example, the fastest at batch 32 whose macro-F1 is shown to be at most ``max_drop`` points below the best's
    (95% paired bootstrap on validation, with ``validation``; else the test split's point estimates), and says which.
    A conversion (int8, ONNX, bf16) no faster than the model it was made from is left out first.
    """

    max_drop: float | None = 1.0
    """Macro-F1 points below the best variant's that a faster one may be, shown on the validation rows (its paired
    bootstrap interval lies at or above ``-max_drop``); null: no limit."""
    max_ms: float | None = None
    """Milliseconds per example at batch 32 that the recommended variant may take; null: no limit."""
    validation: bool = True
    """Measure every variant on the task's validation rows too (when given) and choose on them, not on test."""
    probe: bool = True
    """Measure the frozen-embedding probe classifier beside the variants (the floor they are checked against)."""

    def __post_init__(self) -> None:
        from domainbert.deploy.recommend import check_rule

        try:
            check_rule(self.max_drop, self.max_ms)
        except DomainBertError as err:
            raise DomainBertError(f"pipeline: deploy.{err}") from None


@dataclass
class TaskFiles:
    """The labelled task's files and columns, passed to every stage that reads them."""

    train: str
    """Training rows (JSONL, CSV, Parquet...): fine-tuning, the probe, TAPT's text and the kNN selection."""
    val: str | None = None
    """Validation rows: early stopping, the probe's L2 strength, and the choice of the shipped model."""
    test: str | None = None
    """Test rows: read once, for the report."""
    text_column: str = "text"
    """The text column."""
    text_pair_column: str | None = None
    """The second text of pair tasks."""
    label_column: str = "label"
    """The label column."""

    def values(self) -> dict[str, Any]:
        """The data module's arguments for these files and columns (``{"data": {"init_args": ...}}``)."""
        from domainbert.pipeline.stage import data

        files = {"train": self.train, "val": self.val, "test": self.test, "predict": self.test}
        columns = {"text_column": self.text_column, "label_column": self.label_column}
        return data(**files, **columns, text_pair_column=self.text_pair_column)
