"""The pipeline's records: what a stage made, what the choice rests on, what distillation left; typed, one form each.

A training stage's :class:`Run` and a tool stage's :class:`ToolResult` are what
:class:`~domainbert.pipeline.runner.Runner` returns (it reads them from ``state.json``, the one translation of its
dicts); the recipe's :class:`Probed`, :class:`ProbeClassifier`, :class:`Choice` and :class:`Distilled` are what its
steps hand each other and the report; :class:`Ship` is the run's one answer (a JSON object only in its
``report.json``). This module imports nothing of the pipeline's, so every part of it may import
these.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, get_args

from domainbert.errors import DomainBertError

Kind = Literal["seed", "soup", "probe"]
"""What a run is: a fine-tuning run with a seed, a seed soup's evaluation, or the frozen-embedding probe."""
KINDS: tuple[str, ...] = get_args(Kind)


def refusal(what: str, key: str, value: Any, expected: str) -> DomainBertError:
    """The one line that refuses field ``key`` of a ``what`` record: its value, and what was expected."""
    return DomainBertError(f"pipeline: {what} record: {key}={value!r}; expected {expected}")


@dataclass(frozen=True)
class Run:
    """One fine-tuned (or evaluated) model: what a training stage made, and which run of a candidate it is.

    :meth:`~domainbert.pipeline.runner.Runner.fit` and :meth:`~domainbert.pipeline.runner.Runner.evaluate` return
    one (its ``seed`` None); a candidate's run names its seed: ``dataclasses.replace(run, seed=seed)``.
    """

    stage: str | None = None
    """The stage that made it (``finetune-dapt-seed0``): its minutes and its record in ``state.json``."""
    seed: int | None = None
    """Its fine-tuning seed (None for a soup, the probe, or a stage's run before a candidate names it)."""
    kind: Kind = "seed"
    """``seed`` (a fine-tuning run), ``soup`` (a seed soup's evaluation) or ``probe`` (the frozen probe)."""
    metrics: dict[str, float] = field(default_factory=dict)
    """Its metrics by name: ``val/<metric>`` and, with a test split, ``test/<metric>``."""
    hf: str | None = None
    """Its exported model's folder (None when it exported none)."""
    predictions: str | None = None
    """The JSON file of its test rows' gold and predicted label ids (paired comparisons), if any."""
    run: str | None = None
    """Its run folder (``metrics.csv``), if any."""
    config: str | None = None
    """The resolved config its stage ran (``<out>/<stage>/config.yaml``), if any."""
    seconds: float | None = None
    """Its stage's wall-clock seconds, if known."""
    hf_error: str | None = None
    """Why it has no export (the probe, when it could not be exported as a classifier)."""

    def __post_init__(self) -> None:
        """Refuse a kind, a seed or metrics the pipeline cannot read."""
        if self.kind not in KINDS:
            raise refusal("run", "kind", self.kind, f"one of {list(KINDS)}")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise refusal("run", "seed", self.seed, "an integer seed (or none, for a soup or the probe)")
        if not isinstance(self.metrics, Mapping):
            raise refusal("run", "metrics", self.metrics, "a dict of metric values by name")

    def metric(self, key: str) -> float | None:
        """Its metric ``key`` (``val/f1_macro``), None when it recorded none."""
        return self.metrics.get(key)


@dataclass(frozen=True)
class ToolResult:
    """What a tool stage (:meth:`Runner.tool`) made: its result, and what the tool wrote of it."""

    stage: str
    """The stage's name."""
    result: str
    """Its result: the output folder or file the stage was given."""
    output: Mapping[str, Any] = field(default_factory=dict)
    """What the tool wrote in ``<result>/result.json`` (select: ``corpus``; pseudolabel: ``train``; probe: ``val``,
    ``test``, ``weights``...), as it wrote it."""
    seconds: float | None = None
    """The stage's wall-clock seconds, if known."""

    @classmethod
    def of(cls, stage: str, record: Mapping[str, Any]) -> ToolResult:
        """The result a tool stage's record (``state.json``'s) holds."""
        output = {k: v for k, v in record.items() if k not in _STAGE_KEYS}
        return cls(stage, str(record.get("result") or ""), output, record.get("seconds"))

    def value(self, key: str) -> Any:
        """The tool's ``key`` (``corpus``, ``train``...).

        Raises:
            DomainBertError: the tool recorded none (one line naming the stage and its result).
        """
        if self.output.get(key) is None:
            raise DomainBertError(
                f"stage {self.stage!r}: its result ({self.result}) records no {key!r}; expected the tool's "
                "result.json to name it (run the stage again: delete its folder)"
            )
        return self.output[key]


#: A stage record's own keys (the runner's, not the tool's output).
_STAGE_KEYS = frozenset({"result", "status", "seconds", "inputs", "finished", "parts", "fingerprint", "log"})


@dataclass(frozen=True)
class Probed:
    """The frozen-embedding probe stage's outcome (``domainbert probe``): a row of the report, and a candidate."""

    folder: str
    """Its folder (``<out>/probe``): ``result.json``, its weights, its log."""
    val: dict[str, float] = field(default_factory=dict)
    """Its validation metrics by name (``f1_macro``, ``acc``)."""
    test: dict[str, float] = field(default_factory=dict)
    """Its test metrics by name (empty without a test split)."""
    weights: str | None = None
    """Its logistic regression's weights (``probe.safetensors``; None: a probe that kept none)."""
    predictions: str | None = None
    """Its test rows' gold and predicted label ids, if any."""

    @classmethod
    def of(cls, made: ToolResult) -> Probed:
        """The probe's outcome as its stage recorded it (its ``result.json``).

        Raises:
            DomainBertError: its ``val`` or ``test`` is no object of metrics (one line naming the stage's result).
        """
        splits = {}
        for split in ("val", "test"):
            scores = made.output.get(split) or {}
            if not isinstance(scores, Mapping):
                raise DomainBertError(
                    f"{made.result}: the probe's {split}={scores!r}; expected an object of metrics by name (delete "
                    "the folder to run the probe again)"
                )
            splits[split] = dict(scores)
        output = made.output
        return cls(made.result, **splits, weights=output.get("weights"), predictions=output.get("predictions"))


@dataclass(frozen=True)
class ProbeClassifier:
    """The probe as a classifier (:func:`probe_export`): its folder, or why it could not be built."""

    hf: str | None = None
    """The classifier's folder (None: it could not be built)."""
    error: str | None = None
    """Why it could not be built (None when it was)."""


@dataclass(frozen=True)
class Choice:
    """The fine-tuned model (or the probe) to ship, chosen on validation, and what the choice rests on.

    The report says why in words (:func:`domainbert.pipeline.report.choice_why`) from these parts.
    """

    name: str
    """The chosen candidate (``frozen probe`` when the probe ships)."""
    run: Run
    """Its run that validated best (its seed, or its one run): it teaches the student."""
    metric: str
    """The metric compared, its short name (``f1_macro``)."""
    scores: dict[str, float | None]
    """Every fine-tuned candidate compared (the baseline first) and its mean validation score (None: not recorded);
    the probe and the candidates left out (stopped after their first seed) are not among them."""
    best: str
    """The fine-tuned candidate that validated best (the baseline on a tie); ``name`` unless the probe ships."""
    probe: float | None = None
    """The frozen probe's validation score (None: no probe ran)."""
    probe_error: str | None = None
    """Why the probe, which validated above every fine-tuned model, could not ship (None when it did not validate
    above them, or ships)."""
    gated: tuple[str, ...] = ()
    """The candidates the probe gate kept from fine-tuning."""

    @property
    def key(self) -> str:
        """The validation metric's name (``val/f1_macro``)."""
        return f"val/{self.metric}"


@dataclass(frozen=True)
class Distilled:
    """The distilled student (:func:`distill_and_export`), and its export or why there is none."""

    student: Run
    """The distillation stage's run: its ``hf``, ``metrics``, ``predictions``, ``config`` and ``seconds``."""
    export: str | None = None
    """The export's folder (its ``report.json``: the variants and the recommendation); None: not exported."""
    skipped: str | None = None
    """Why the export did not run (None when it ran)."""


@dataclass(frozen=True)
class Ship:
    """The one folder to ship, and why (:func:`~domainbert.pipeline.deployment.answer`).

    It is ``ship`` in the pipeline's ``report.json``, its report's first section and its last line.
    """

    folder: str | None
    """The folder to ship."""
    label: str
    """Its name: the variant's label (``student int8``) or the chosen candidate's."""
    why: str
    """Why it (a sentence)."""
    source: Literal["export", "choice"]
    """``export``: the export's recommendation; ``choice``: the fine-tuned model the choice made (no variant)."""
    score: float | None = None
    """Its score on ``split``: macro-F1 (``export``) or the choice's ``metric``."""
    split: str | None = None
    """The split of ``score``: ``validation`` or ``test``."""
    latency_ms_b32: float | None = None
    """Its ms/example at batch 32 (None: not measured)."""
    variant: str | None = None
    """The export's variant (None for the choice's model)."""
    metric: str | None = None
    """The choice's metric (``f1_macro``; None for an export's variant: macro-F1)."""
    rule: str | None = None
    """The export's rule in words (None for the choice's model)."""
    warning: str | None = None
    """The warning when it scores below the frozen-embedding probe, if any."""

    def to_json(self) -> dict[str, Any]:
        """Its JSON object (``ship`` in the pipeline's ``report.json``)."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any, where: str) -> Ship:
        """The answer ``data`` holds (read from ``where``).

        Raises:
            DomainBertError: a field missing or of another type (one line naming ``where`` and the field).
        """
        from domainbert.core.json_record import from_json

        return from_json(cls, data, where)
