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
adds up its minutes from those stages. Its records are typed, and only typed: a :class:`Run` per fine-tuned (or
evaluated) model, a seed's, a seed soup's or the frozen probe's (its ``kind``), as the runner returns it; the probe
gate's :class:`Gate` decision and the :class:`Stop` of its seeds. A strategy's checks read the run's
:class:`Plan`; its stages run in the :class:`Context`, the plan with its runner.

Chains are declared: a strategy starts from the output of the first strategy in its ``builds_on`` that ran
(:meth:`Context.upstream`), and its candidate's name and stages extend that output's (``vocab+dapt``,
``knn-dapt+tapt``).

Built-in strategies live in :mod:`domainbert.pipeline.strategies`, one file each; other packages add theirs
through the ``domainbert.strategies`` entry-point group. This module imports nothing heavy: ``domainbert pipeline
--help`` lists the strategies without importing torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from domainbert.errors import DomainBertError
from domainbert.pipeline.records import KINDS, Kind, Run, refusal

__all__ = ["BASELINE", "KINDS", "PROBE", "Candidate", "Context", "Deployable", "Gate", "Kind", "Plan", "Run", "Stop"]
__all__ += ["Strategy", "Teaching", "chained", "finetune_stage", "stage_config"]

if TYPE_CHECKING:
    from domainbert.pipeline.runner import Runner
    from domainbert.pipeline.specs import DistillSpec, FinetuneSpec, StageSpec, TaskFiles

BASELINE = "baseline"
"""The fine-tuned base model's name: the row every other candidate is compared with."""
PROBE = "frozen probe"
"""The frozen-embedding probe's name among the candidates: it ships (as a classifier) when it validates best."""

#: What a strategy may need, and the one line that says so when the run lacks it (``{names}``: the strategies).
NEEDS = {
    "corpus": "pipeline: `corpus` is not set, and the enabled strategies {names} read the domain corpus: set `corpus`",
    "single_text": "pipeline: {names} works on single texts; it cannot serve a pair task (text_pair_column is set)",
}


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


@dataclass(frozen=True)
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


def stage_config(spec: StageSpec | FinetuneSpec, default: str) -> str:
    """The stage's config file: the one ``spec.config`` names, else the built-in ``stages/<default>.yaml``."""
    if spec.config:
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
    """Its fine-tuned (or evaluated) runs, one per seed (a soup's and the probe's: one)."""
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
    teacher: Run | None = None
    """The run that taught it, for a candidate distilled from another model (the larger teacher's fine-tuned run)."""

    def __post_init__(self) -> None:
        """Refuse records of another type (a dict for a run, say): one line naming the candidate and the field."""
        typed = (("gate", self.gate, Gate), ("stopped", self.stopped, Stop), ("teacher", self.teacher, Run))
        for key, value, cls in typed:
            if value is not None and not isinstance(value, cls):
                raise refusal(f"candidate {self.name!r}", key, value, f"a {cls.__name__} (or None)")
        for run in self.runs:
            if not isinstance(run, Run):
                raise refusal(f"candidate {self.name!r}", "runs", run, "a list of Run (see Runner.fit)")

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

    The pipeline exports and measures it like the chosen model (its fp32 row and the conversions ``export.args``
    asks for, named by ``role``), and the deployment choice may ship it.
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

    def switch(self, settings: Any) -> bool | str:
        """Its settings' ``enabled`` field as given (``True``, ``False``, ``"auto"``); True when they have none."""
        return getattr(settings, "enabled", True)

    def enabled(self, settings: Any) -> bool:
        """Whether it runs with ``settings`` (their ``enabled`` field: :meth:`switch`)."""
        return bool(self.switch(settings))

    def check(self, ctx: Plan, settings: Any) -> None:
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
class Plan:
    """What the run is, before any stage runs: its inputs and every strategy with its settings.

    What :meth:`Strategy.check` reads; the :class:`Context` a strategy runs in is a plan with its runner and what
    the strategies before it produced.
    """

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
    distill: DistillSpec | None = None
    """The distillation's settings (``distill.config``, ``distill.args``, ``distill.transfer``): a strategy that
    distils honours them too (None: the defaults)."""

    def enabled(self, name: str) -> bool:
        """Whether strategy ``name`` is registered and enabled (``enabled: auto`` without a corpus it needs: not)."""
        strategy = self.strategies.get(name)
        if strategy is None:
            return False
        settings = self.settings[name]
        if strategy.switch(settings) == "auto" and "corpus" in strategy.needs and not self.corpus:
            return False
        return strategy.enabled(settings)

    def built_on(self, name: str) -> bool:
        """Whether an enabled strategy builds on ``name``'s output."""
        return any(name in s.builds_on and self.enabled(n) for n, s in self.strategies.items())


@dataclass(kw_only=True)
class Context(Plan):
    """What a strategy may read: the run's plan, the runner, and what the strategies before it produced."""

    runner: Runner
    """The runner every stage runs through (it holds the pipeline's folder, ``out``)."""
    candidates: list[Candidate] = field(default_factory=list)
    """Every candidate so far, in the report's order (the baseline first)."""
    outputs: dict[str, list[Candidate]] = field(default_factory=dict)
    """What each strategy that ran returned, by its name."""
    pooling: str | None = None
    """The pooling of every fine-tuning run (``mean`` or ``cls``), decided once from the base model (None: not yet;
    :func:`~domainbert.pipeline.recipe.pooling`)."""
    base_probe: tuple[float | None, str | None] | None = None
    """The base model's probe score and where it came from (step 0 of a pretraining stage that started from the
    base model), once such a stage ran: what the probe gate of a stage started elsewhere compares with."""

    @classmethod
    def start(cls, plan: Plan, runner: Runner) -> Context:
        """The context of ``plan``, checked, once its runner holds the pipeline's folder."""
        return cls(**vars(plan), runner=runner)

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
