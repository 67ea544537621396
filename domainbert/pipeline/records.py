"""The pipeline's records of a candidate: its runs, the probe gate's decision, and the stop of its seeds.

A :class:`Run` is one fine-tuned (or evaluated) model of a candidate: the stage record the runner keeps in
``state.json`` (``metrics``, ``hf``, ``predictions``, ``run``...) plus which run it is: a seed's (``kind``
``seed``, ``seed`` its number), a seed soup's (``soup``) or the frozen probe's (``probe``). A :class:`Gate` is
what the probe gate decided of a pretraining stage's model, a :class:`Stop` why a candidate's remaining seeds were
skipped.

Each converts to and from the plain dict the pipeline used before it had these types (:meth:`Run.to_dict`,
:meth:`Run.from_dict`...): a strategy that returns dict records still works, and a record with the older
``seed: "soup"`` or ``seed: "probe"`` reads as that kind.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from domainbert.errors import DomainBertError

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
    """The probe gate's decision on a pretraining stage's model (:func:`~.strategies.pretrain.gate`)."""

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
