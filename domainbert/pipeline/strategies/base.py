"""The pipeline's strategy interface: what a strategy declares, what it returns, and what it may read.

A **strategy** is one way to get a better model than the fine-tuned base model (the baseline). It has a ``name``
(its top-level key in a pipeline config), a ``kind``, what it ``needs``, the strategies it ``builds_on``, its own
settings dataclass with its defaults, a :meth:`Strategy.check` that refuses a combination that cannot work, and a
:meth:`Strategy.run` that returns :class:`Candidate` objects:

- ``start`` strategies produce a starting model before fine-tuning (curation, vocabulary, DAPT, TAPT, contrastive);
  every candidate they offer is fine-tuned over the seeds like the base model, and competes on validation;
- ``after`` strategies act on the fine-tuned runs (self-training, seed soups) and return candidates with runs.

After the choice, any strategy may say who teaches the small student instead of the chosen run
(:meth:`Strategy.teaches`, a :class:`Teaching`) and offer models that could serve as they are
(:meth:`Strategy.deployables`, each a :class:`Deployable`): the export measures them beside the chosen model and
the student, and the deployment choice may ship one (the larger teacher does both).

A candidate carries its name (the report's row), its starting model (or its runs) and the stages it ran: the report
adds up its minutes from those stages. Its records are typed: a :class:`Run` per fine-tuned (or evaluated) model,
a seed's, a seed soup's or the frozen probe's (its ``kind``), the probe gate's :class:`Gate` decision and the
:class:`Stop` of its seeds; each converts to and from the plain dict strategies wrote before (``to_dict``,
``from_dict``: a record whose ``seed`` is ``"soup"`` or ``"probe"`` reads as that kind).

Chains are declared: a strategy starts from the output of the first strategy in its ``builds_on`` that ran
(:meth:`Context.upstream`), and its candidate's name and stages extend that output's (``vocab+dapt``,
``knn-dapt+tapt``).

Built-in strategies live in :mod:`domainbert.pipeline.strategies`, one file each; other packages add theirs
through the ``domainbert.strategies`` entry-point group. This module imports nothing heavy: ``domainbert pipeline
--help`` lists the strategies without importing torch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING, Any, ClassVar, Literal, get_args

from domainbert.errors import DomainBertError

if TYPE_CHECKING:
    from domainbert.pipeline.runner import Runner
    from domainbert.pipeline.specs import DistillSpec, FinetuneSpec, TaskFiles

BASELINE = "baseline"
"""The fine-tuned base model's name: the row every other candidate is compared with."""
PROBE = "frozen probe"
"""The frozen-embedding probe's name among the candidates: it ships (as a classifier) when it validates best."""

#: What a strategy may need, and the one line that says so when the run lacks it (``{names}``: the strategies).
NEEDS = {
    "corpus": "pipeline: `corpus` is not set, and the enabled strategies {names} read the domain corpus: set `corpus`",
    "single_text": "pipeline: {names} works on single texts; it cannot serve a pair task (text_pair_column is set)",
}


Kind = Literal["seed", "soup", "probe"]
"""What a run is: a fine-tuning run with a seed, a seed soup's evaluation, or the frozen-embedding probe."""
KINDS: tuple[str, ...] = get_args(Kind)


def _refuse(what: str, key: str, value: Any, expected: str) -> DomainBertError:
    return DomainBertError(f"pipeline: {what} record: {key}={value!r}; expected {expected}")


@dataclass
class Run:
    """One fine-tuned (or evaluated) model of a candidate: its stage's record and which run it is."""

    stage: str | None = None
    """The stage that made it (``finetune-dapt-seed0``): its minutes and its record in ``state.json``."""
    seed: int | None = None
    """Its fine-tuning seed (None for a soup or the probe)."""
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
    hf_error: str | None = None
    """Why it has no export (the probe, when it could not be exported as a classifier)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """The stage record's other keys (``status``, ``seconds``, ``inputs``...), kept as they are."""

    def __post_init__(self) -> None:
        """Refuse a kind or a seed the pipeline cannot read."""
        if self.kind not in KINDS:
            raise _refuse("run", "kind", self.kind, f"one of {list(KINDS)}")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise _refuse("run", "seed", self.seed, "an integer seed (or none, for a soup or the probe)")

    @classmethod
    def of(cls, record: Mapping[str, Any], stage: str, seed: int | None = None, kind: Kind = "seed") -> Run:
        """The run a stage record (what :class:`~domainbert.pipeline.runner.Runner` returns) is.

        Args:
            record: the stage's record, as ``state.json`` keeps it.
            stage: the stage's name.
            seed: its fine-tuning seed (None for a soup or the probe).
            kind: which run it is.
        """
        return cls.from_dict({**record, "stage": stage, "seed": seed, "kind": kind})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Run:
        """The run a dict record holds (see :meth:`to_dict`); ``seed: "soup"`` or ``"probe"`` is that kind.

        Raises:
            DomainBertError: a record that is not a mapping, or whose ``metrics``, ``kind`` or ``seed`` the
                pipeline cannot read.
        """
        if isinstance(data, Run):
            return data
        if not isinstance(data, Mapping):
            raise _refuse("run", "record", data, "a Run or a dict with metrics, hf, seed, stage")
        values = dict(data)
        seed = values.pop("seed", None)
        kind = values.pop("kind", None)
        if seed in ("soup", "probe"):  # the record of a domainbert before runs had a kind
            kind, seed = kind or seed, None
        metrics = values.pop("metrics", None) or {}
        if not isinstance(metrics, Mapping):
            raise _refuse("run", "metrics", metrics, "a dict of metric values by name")
        own = {f.name for f in dataclasses.fields(cls)} - {"seed", "kind", "metrics", "extra"}
        known = {key: values.pop(key) for key in list(values) if key in own}
        return cls(seed=seed, kind=kind or "seed", metrics=dict(metrics), **known, extra=values)

    def to_dict(self) -> dict[str, Any]:
        """The run as a plain dict: the stage record's keys, ``metrics``, ``seed``, ``stage`` and ``kind``.

        Optional fields that are None (``hf_error``, ``run``...) are left out, as the stage record leaves them out.
        """
        record = dict(self.extra)
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "extra" or (value is None and f.name not in ("seed", "hf")):
                continue
            record[f.name] = dict(value) if f.name == "metrics" else value
        return record

    def __getitem__(self, key: str) -> Any:
        """``run["hf"]``: the value of :meth:`to_dict`'s ``key``, for strategies written for dict records."""
        return self.to_dict()[key]

    def metric(self, key: str) -> float | None:
        """Its metric ``key`` (``val/f1_macro``), None when it recorded none."""
        return self.metrics.get(key)


@dataclass
class Gate:
    """The probe gate's decision on a pretraining stage's model (:mod:`~domainbert.pipeline.strategies.pretrain`)."""

    open: bool = True
    """Whether the model is fine-tuned (a closed gate keeps it from fine-tuning)."""
    stage: str | None = None
    """The pretraining stage watched."""
    best: float | None = None
    """The stage's best probe score (None when the watch recorded none)."""
    base: float | None = None
    """The base model's probe score on the same protocol (None when there is none)."""
    base_from: str | None = None
    """Where the base model's score came from (``step 0 of dapt``, ``the probe stage``)."""
    margin: float | None = None
    """How much the best probe must beat the base's by to open the gate (``watch.margin``)."""
    summary: str | None = None
    """The watch's verdict, in words."""
    steps: list[int | None] | None = None
    """The steps the watch checked at."""
    why: str | None = None
    """Why the gate stayed open without comparing (the gate off, no base score, no probe score)."""
    skipped: str | None = None
    """Why the stage did not run at all (``dapt.enabled: auto`` on a model with no masked-LM head)."""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Gate:
        """The decision a dict holds (see :meth:`to_dict`).

        Raises:
            DomainBertError: a key that is no field of a gate decision.
        """
        return _from_dict(cls, "gate", data)

    def to_dict(self) -> dict[str, Any]:
        """The decision as a plain dict, its None fields left out."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


@dataclass
class Stop:
    """Why a candidate's remaining seeds were skipped: its first seed validated behind the baseline's seeds."""

    seed: int
    """The seed it ran."""
    score: float
    """That seed's validation score."""
    mean: float
    """The baseline seeds' mean validation score."""
    std: float
    """The baseline seeds' standard deviation."""
    skipped: list[int] = field(default_factory=list)
    """The seeds it did not run."""
    minutes_saved: float = 0.0
    """About how many minutes skipping them saved."""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Stop:
        """The stop a dict holds (see :meth:`to_dict`).

        Raises:
            DomainBertError: a key that is no field of a stop, or a missing one.
        """
        return _from_dict(cls, "stop", data)

    def to_dict(self) -> dict[str, Any]:
        """The stop as a plain dict."""
        return dataclasses.asdict(self)


def _from_dict(cls, what: str, data: Any):
    """``cls(**data)``, ``data`` itself when it is one already; a bad record named in one line."""
    if isinstance(data, cls):
        return data
    if not isinstance(data, Mapping):
        raise _refuse(what, "record", data, f"a {cls.__name__} or a dict of its fields")
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise _refuse(what, unknown[0], data[unknown[0]], f"only the fields {names}")
    try:
        return cls(**data)
    except TypeError as err:
        raise DomainBertError(f"pipeline: {what} record {dict(data)!r}: {err}; expected the fields {names}") from None


def stage_config(spec: Any, default: str) -> str:
    """The stage's config file: the one ``spec.config`` names, else the built-in ``stages/<default>.yaml``."""
    if getattr(spec, "config", None):
        return spec.config
    return str(resources.files("domainbert.pipeline") / "stages" / f"{default}.yaml")


def finetune_stage(name: str, seed: int | None, kind: Kind = "seed") -> str:
    """The stage name of candidate ``name``'s fine-tuning run with ``seed`` (kind ``soup``: its soup's evaluation)."""
    return f"finetune-{name.replace('+', '-')}-" + ("soup" if kind == "soup" else f"seed{seed}")


@dataclass
class Candidate:
    """One row of the report: a starting model to fine-tune over the seeds, or a strategy's finished runs."""

    name: str
    """The report's row, and the name the choice gives (``dapt``, ``vocab+dapt``, ``baseline soup``)."""
    source: str
    """The strategy that made it (``baseline`` and ``probe`` for the pipeline's own rows)."""
    model: str | None = None
    """The starting model's folder, fine-tuned over the seeds (None for an ``after`` strategy's candidate)."""
    stages: list[str] = field(default_factory=list)
    """The stages that made it, upstream ones included: its extra minutes in the report. Not its fine-tuning."""
    runs: list[Run] = field(default_factory=list)
    """Its fine-tuned (or evaluated) runs, one per seed (a soup's and the probe's: one); dicts become :class:`Run`."""
    offered: bool = True
    """False for an output that only later strategies use (a curated corpus, an extended vocabulary)."""
    data: dict = field(default_factory=dict)
    """What a later strategy may read besides the model (select: ``{"corpus": path, "column": "text"}``)."""
    adapted: bool = True
    """Whether it is an adaptation (False for the baseline and the baseline's soup): the report's verdict wording."""
    one_model: bool = False
    """One model made from several seeds' runs (a soup): no seed noise in its interval, not its best seed."""
    gate: Gate | None = None
    """The probe gate's decision (``open``, ``best``, ``base``...); a closed gate means it is not fine-tuned."""
    stopped: Stop | None = None
    """Set when its remaining seeds were skipped (behind the baseline after its first): the choice ignores it."""
    description: str | None = None
    """What it is, in the report's words (``the base model's size distilled from the larger teacher``); None: the
    report's wording by kind (adaptation, a seed soup, a strategy's model)."""

    def __post_init__(self) -> None:
        """Records given as dicts (a strategy written before the records had types) become their types."""
        self.runs = [Run.from_dict(run) for run in self.runs]
        if self.gate is not None:
            self.gate = Gate.from_dict(self.gate)
        if self.stopped is not None:
            self.stopped = Stop.from_dict(self.stopped)

    @property
    def gated(self) -> bool:
        """Whether the probe gate kept it from fine-tuning."""
        return self.gate is not None and not self.gate.open


@dataclass
class Teaching:
    """Who teaches the pipeline's small student when a strategy takes the chosen run's place.

    A strategy's answer to :meth:`Strategy.teaches`.
    """

    teachers: list[str]
    """The teachers' folders (several: their probabilities averaged)."""
    values: dict[str, Any] = field(default_factory=dict)
    """The distillation config values the teaching needs (``{"model": {"init_args": {"student": ...}}}``), before
    ``distill.args``."""
    why: str = ""
    """Why, in the report's words."""


@dataclass
class Deployable:
    """A model a strategy made that could serve as it is (see :meth:`Strategy.deployables`).

    The pipeline exports and measures it like the chosen model (its fp32, int8 and ONNX int8 rows, named by
    ``role``), and the deployment choice may ship it.
    """

    role: str
    """Its rows' name in the variants table (``larger teacher``: rows ``larger teacher``, ``larger teacher int8``)."""
    hf: str
    """Its Hugging Face folder."""
    predictions: str | None = None
    """Its test predictions (its row's test metric without a pass of its own), if any."""
    description: str = ""
    """What it is, in the report's words."""


class Strategy:
    """The interface every pipeline strategy implements; subclass it and set the class attributes.

    The class docstring's first line is the one-line description ``domainbert pipeline --help`` lists.

    Examples:
        A strategy declares its attributes in its class line; its settings dataclass's fields are the fields of its
        config key (``mask40_dapt: {enabled: true, mlm_probability: 0.3}``), and its defaults are what a config
        that leaves the key out gets. This one, DAPT on the domain corpus with 40% of the tokens masked (the
        ``mask40`` plugin of ``examples/plugin_strategy`` does the same on the task's text), reads the corpus, so
        it ``needs`` it: the pipeline refuses to run it without ``corpus``.

        >>> from dataclasses import dataclass
        >>> from domainbert.errors import DomainBertError
        >>> from domainbert.pipeline.strategies.base import Strategy
        >>> @dataclass
        ... class Mask40DaptSpec:
        ...     enabled: bool = False
        ...     mlm_probability: float = 0.4
        ...     max_steps: int = 2000
        ...     warmup_steps: int = 200
        >>> class Mask40Dapt(Strategy, name="mask40_dapt", kind="start", settings=Mask40DaptSpec, needs=("corpus",)):
        ...     '''Mask40 DAPT: masked-LM pretraining on the domain corpus with 40% of the tokens masked.
        ...
        ...     Off by default; enable it with `mask40_dapt: {enabled: true}`.
        ...     '''
        ...
        ...     def check(self, ctx, settings):
        ...         if settings.warmup_steps >= settings.max_steps:
        ...             raise DomainBertError(
        ...                 f"pipeline: mask40_dapt.warmup_steps={settings.warmup_steps} is not below "
        ...                 f"mask40_dapt.max_steps={settings.max_steps}; lower warmup_steps or raise max_steps"
        ...             )
        >>> strategy = Mask40Dapt()
        >>> strategy.name, strategy.kind, strategy.needs, strategy.builds_on
        ('mask40_dapt', 'start', ('corpus',), ())

        :meth:`default` is its settings when the config does not mention it, and :meth:`enabled` reads their
        ``enabled`` field:

        >>> strategy.default()
        Mask40DaptSpec(enabled=False, mlm_probability=0.4, max_steps=2000, warmup_steps=200)
        >>> strategy.enabled(strategy.default()), strategy.enabled(Mask40DaptSpec(enabled=True))
        (False, True)

        ``--help`` lists it by its docstring: the first line, then the rest as its option group's text (or
        ``help``, when the class sets it):

        >>> Mask40Dapt.summary()
        'Mask40 DAPT: masked-LM pretraining on the domain corpus with 40% of the tokens masked.'
        >>> Mask40Dapt.option_help()
        'Off by default; enable it with `mask40_dapt: {enabled: true}`.'

        The pipeline calls :meth:`check` of every enabled strategy with the run's :class:`Context` before any stage
        runs; this one reads only its settings, and refuses a warmup as long as the training:

        >>> strategy.check(None, Mask40DaptSpec(enabled=True))
        >>> strategy.check(None, Mask40DaptSpec(enabled=True, max_steps=100))
        Traceback (most recent call last):
        ...
        domainbert.errors.DomainBertError: pipeline: mask40_dapt.warmup_steps=200 is not below
        mask40_dapt.max_steps=100; lower warmup_steps or raise max_steps

        Its :meth:`run` (not shown) runs its stages and returns :class:`Candidate` objects: for a ``start``
        strategy, the starting models to fine-tune over the seeds. Registered under the ``domainbert.strategies``
        entry-point group, as ``examples/plugin_strategy/pyproject.toml`` does, it becomes one more key of pipeline
        configs.
    """

    name: ClassVar[str] = ""
    """The config's top-level key and the stage names' stem (``dapt``)."""
    kind: ClassVar[Literal["start", "after"]] = "start"
    """``start``: makes starting models before fine-tuning; ``after``: acts on the fine-tuned runs."""
    settings: ClassVar[type] = object
    """Its settings dataclass; its fields are the config key's fields (``dapt.args``, ``dapt.enabled``)."""
    needs: ClassVar[tuple[str, ...]] = ()
    """What it needs when enabled: keys of :data:`NEEDS` (``corpus``, ``single_text``)."""
    builds_on: ClassVar[tuple[str, ...]] = ()
    """Strategies whose output it starts from when they ran, nearest first (tapt: ``("dapt", "vocab")``)."""
    help: ClassVar[str] = ""
    """Its option group's text in ``--help`` (what it does, whether it runs by default); empty: the docstring's
    paragraphs after the first line."""
    order: ClassVar[int] = 50
    """Where it runs among the strategies of its kind: lower first (a chain's links follow what they build on)."""

    def __init_subclass__(cls, **declared: Any) -> None:
        """Let a subclass declare its attributes in its class line, ``class Dapt(Strategy, name="dapt", ...)``."""
        super().__init_subclass__()
        unknown = sorted(set(declared) - {"name", "kind", "order", "settings", "needs", "builds_on", "help"})
        if unknown:
            raise TypeError(f"{cls.__name__}: {unknown} are not Strategy attributes")
        for key, value in declared.items():
            setattr(cls, key, value)

    def default(self) -> Any:
        """Its settings when the config does not mention it."""
        return self.settings()

    def enabled(self, settings: Any) -> bool:
        """Whether it runs with ``settings`` (their ``enabled`` field; True when there is none)."""
        return bool(getattr(settings, "enabled", True))

    def check(self, ctx: Context, settings: Any) -> None:
        """Refuse, before any stage runs, settings or combinations that cannot work (one line each).

        Raises:
            DomainBertError: the problem, naming the field and what to write instead.
        """

    def run(self, ctx: Context, settings: Any) -> list[Candidate]:
        """Run its stages through ``ctx.runner``; its candidates (``start``: to fine-tune; ``after``: with runs)."""
        raise NotImplementedError

    def teaches(self, ctx: Context, settings: Any, chosen: Run) -> Teaching | None:
        """Who teaches the small student instead of ``chosen`` (the chosen candidate's best run); None: ``chosen``.

        Asked of every enabled strategy after the choice, in the registry's order; the first that answers teaches.
        """
        return None

    def untried(self, probe: float | None, metric: str) -> str | None:
        """One line for the report when it did not run: what it bought where it was measured, and how to run it.

        Args:
            probe: the frozen-embedding probe's validation ``metric`` on this task (None: no probe ran), which says
                how hard the task is for the base model.
            metric: the metric's name.

        Returns:
            The line, or None when there is nothing to say (the default).
        """
        return None

    def deployables(self, ctx: Context, settings: Any, chosen: str) -> list[Deployable]:
        """The models it made that could serve as they are, beside the chosen candidate (named ``chosen``).

        Each is exported and measured beside the chosen model and the student, and the deployment choice may ship it.
        """
        return []

    @classmethod
    def option_help(cls) -> str:
        """Its option group's text in ``--help``: ``help``, else its docstring after the first line."""
        return cls.help or " ".join((cls.__doc__ or "").strip().split("\n\n", 1)[1:]).strip()

    @classmethod
    def summary(cls) -> str:
        """The first line of its docstring."""
        return (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""


@dataclass
class Context:
    """What a strategy may read: the run's inputs, the runner, and what the strategies before it produced."""

    runner: Runner
    base_model: str
    task: TaskFiles
    corpus: str | None
    corpus_text_column: str
    seeds: list[int]
    metric: str
    finetune: FinetuneSpec
    strategies: dict[str, Strategy]
    """Every registered strategy, in the order they run."""
    settings: dict[str, Any]
    """Every registered strategy's settings, by name."""
    candidates: list[Candidate] = field(default_factory=list)
    """Every candidate so far, in the report's order (the baseline first)."""
    outputs: dict[str, list[Candidate]] = field(default_factory=dict)
    """What each strategy that ran returned, by its name."""
    cache: dict[str, Any] = field(default_factory=dict)
    """Values computed once per run and shared by strategies (the fine-tuning pooling)."""
    distill: DistillSpec | None = None
    """The distillation's settings (``distill.config``, ``distill.args``, ``distill.transfer``): a strategy that
    distils honours them too (None: the defaults)."""

    def enabled(self, name: str) -> bool:
        """Whether strategy ``name`` is registered and enabled (``enabled: auto`` without a corpus it needs: not)."""
        strategy = self.strategies.get(name)
        if strategy is None:
            return False
        settings = self.settings[name]
        if getattr(settings, "enabled", None) == "auto" and "corpus" in strategy.needs and not self.corpus:
            return False
        return strategy.enabled(settings)

    def built_on(self, name: str) -> bool:
        """Whether an enabled strategy builds on ``name``'s output."""
        return any(name in s.builds_on and self.enabled(n) for n, s in self.strategies.items())

    def output(self, name: str) -> Candidate | None:
        """The last candidate strategy ``name`` returned, if it ran."""
        made = self.outputs.get(name)
        return made[-1] if made else None

    @property
    def baseline(self) -> Candidate:
        """The base model's candidate."""
        return next(c for c in self.candidates if c.name == BASELINE)

    def upstream(self, names: tuple[str, ...]) -> Candidate:
        """The output a strategy starts from: the first of ``names`` that ran with a model, else the baseline."""
        for name in names:
            made = self.output(name)
            if made is not None and made.model:
                return made
        return self.baseline

    def add(self, name: str, made: list[Candidate]) -> None:
        """Record what strategy ``name`` returned."""
        if not isinstance(made, list) or not all(isinstance(c, Candidate) for c in made):
            raise DomainBertError(f"pipeline: strategy {name!r} returned {made!r}; expected a list of Candidate")
        taken = {c.name for c in self.candidates}
        for candidate in made:
            if candidate.name in taken:
                raise DomainBertError(f"pipeline: strategy {name!r} returned a second candidate {candidate.name!r}")
            taken.add(candidate.name)
        self.outputs[name] = made
        self.candidates += made

    def results(self) -> dict[str, list[Run]]:
        """``{name: runs}`` of every candidate with runs, in order: what the choice compares."""
        return {c.name: c.runs for c in self.candidates if c.runs}


def chained(upstream: Candidate, own: str) -> str:
    """A chained candidate's name: ``own`` from the base model, ``<upstream>+<own>`` from another output."""
    return own if upstream.name == BASELINE else f"{upstream.name}+{own}"
