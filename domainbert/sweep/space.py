"""The sweep YAML: search space keyed by fit-config paths, the metric and its direction, the sampler and the pruner.

Example (``configs/sweep/lr_warmup.yaml``)::

    metric: val/f1_macro
    direction: maximize
    sampler: {type: tpe, seed: 0}
    pruner: {type: median, n_startup_trials: 3, n_warmup_steps: 0}
    params:
      model.learning_rate: {type: float, low: 1.0e-6, high: 1.0e-4, log: true}
      model.warmup_ratio: {type: float, low: 0.0, high: 0.2}

A path may leave out ``init_args`` (``model.learning_rate`` means ``model.init_args.learning_rate``).
"""

from __future__ import annotations

import difflib
import json
import math
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
import yaml

from domainbert.errors import DomainBertError

SAMPLERS = {
    "tpe": "TPESampler",
    "random": "RandomSampler",
    "gp": "GPSampler",
    "cmaes": "CmaEsSampler",
    "qmc": "QMCSampler",
}
PRUNERS = {
    "median": "MedianPruner",
    "percentile": "PercentilePruner",
    "hyperband": "HyperbandPruner",
    "successive_halving": "SuccessiveHalvingPruner",
    "threshold": "ThresholdPruner",
    "none": "NopPruner",
}
TOP_KEYS = {"metric", "direction", "sampler", "pruner", "params", "study_name"}
PARAM_KEYS = {
    "float": {"low", "high", "log", "step"},
    "int": {"low", "high", "log", "step"},
    "categorical": {"choices"},
}


@dataclass
class Param:
    """One dimension of the search space.

    Attributes:
        path: the config path as written in the sweep file (also the Optuna parameter name).
        type: ``float``, ``int`` or ``categorical``.
        low: lower bound (float/int).
        high: upper bound (float/int).
        log: sample on a log scale.
        step: discretisation step (float/int), or None.
        choices: the values of a categorical parameter.
        target: the canonical config path it overrides (filled by :func:`resolve_paths`).
    """

    path: str
    type: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = None
    choices: list[Any] = field(default_factory=list)
    target: str = ""

    def suggest(self, trial: optuna.Trial) -> Any:
        """Draw this parameter's value for ``trial``."""
        if self.type == "float":
            return trial.suggest_float(self.path, self.low, self.high, log=self.log, step=self.step)
        if self.type == "int":
            return trial.suggest_int(self.path, int(self.low), int(self.high), log=self.log, step=int(self.step or 1))
        return trial.suggest_categorical(self.path, self.choices)

    def examples(self) -> list[Any]:
        """Values that exercise the config's type check: both bounds, or every choice."""
        if self.type == "categorical":
            return list(self.choices)
        cast = int if self.type == "int" else float
        return [cast(self.low), cast(self.high)]


@dataclass
class SweepSpec:
    """A parsed sweep file.

    Attributes:
        metric: the logged metric to optimise (e.g. ``val/f1_macro``).
        direction: ``maximize`` or ``minimize``.
        sampler: ``{"type": ..., "seed": ..., **kwargs}`` for the Optuna sampler.
        pruner: ``{"type": ..., **kwargs}`` for the Optuna pruner.
        params: the search space.
        study_name: default study name, if the file gives one.
        source: the file it came from.
    """

    metric: str
    direction: str
    sampler: dict[str, Any]
    pruner: dict[str, Any]
    params: list[Param]
    study_name: str | None = None
    source: str = ""

    @property
    def maximize(self) -> bool:
        """True when larger metric values are better."""
        return self.direction == "maximize"


def load_spec(path: str | Path) -> SweepSpec:
    """Read and validate a sweep YAML file.

    Raises:
        DomainBertError: naming the file and the key at fault.
    """
    path = Path(path)
    if not path.is_file():
        raise DomainBertError(f"sweep file {path} does not exist")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise DomainBertError(f"{path}: not valid YAML: {err}") from err
    return parse_spec(raw, source=str(path))


def parse_spec(raw: Any, source: str = "<sweep>") -> SweepSpec:
    """Validate the sweep mapping ``raw`` (already loaded from YAML)."""
    if not isinstance(raw, dict):
        raise DomainBertError(f"{source}: expected a mapping with metric, direction and params")
    unknown = set(raw) - TOP_KEYS
    if unknown:
        raise DomainBertError(f"{source}: unknown key(s) {sorted(unknown)}; allowed: {sorted(TOP_KEYS)}")
    metric = raw.get("metric")
    if not isinstance(metric, str) or not metric:
        raise DomainBertError(f"{source}: 'metric' must name a logged metric, e.g. val/f1_macro")
    direction = str(raw.get("direction", "")).lower()
    if direction not in ("maximize", "minimize"):
        raise DomainBertError(f"{source}: 'direction' must be maximize or minimize, got {raw.get('direction')!r}")
    sampler = _typed(raw.get("sampler") or {"type": "tpe", "seed": 0}, SAMPLERS, "sampler", source)
    pruner = _typed(raw.get("pruner") or {"type": "median"}, PRUNERS, "pruner", source)
    params_raw = raw.get("params")
    if not isinstance(params_raw, dict) or not params_raw:
        raise DomainBertError(f"{source}: 'params' must map config paths to distributions")
    params = [_param(str(k), v, source) for k, v in params_raw.items()]
    name = raw.get("study_name")
    return SweepSpec(metric, direction, sampler, pruner, params, str(name) if name else None, source)


def _typed(value: Any, table: dict[str, str], what: str, source: str) -> dict[str, Any]:
    if isinstance(value, str):
        value = {"type": value}
    if not isinstance(value, dict) or str(value.get("type", "")).lower() not in table:
        raise DomainBertError(f"{source}: '{what}' needs a type among {sorted(table)}, got {value!r}")
    return {**value, "type": str(value["type"]).lower()}


def _param(path: str, spec: Any, source: str) -> Param:
    where = f"{source}: params.{path}"
    if not isinstance(spec, dict) or spec.get("type") not in PARAM_KEYS:
        raise DomainBertError(f"{where}: needs type float, int or categorical, got {spec!r}")
    kind = spec["type"]
    unknown = set(spec) - PARAM_KEYS[kind] - {"type"}
    if unknown:
        raise DomainBertError(f"{where}: unknown key(s) {sorted(unknown)} for type {kind}")
    if kind == "categorical":
        choices = spec.get("choices")
        if not isinstance(choices, list) or not choices:
            raise DomainBertError(f"{where}: 'choices' must be a non-empty list")
        if not all(c is None or isinstance(c, (bool, int, float, str)) for c in choices):
            raise DomainBertError(f"{where}: choices must be numbers, strings, booleans or null")
        return Param(path, kind, choices=choices)
    try:
        low, high = float(spec["low"]), float(spec["high"])
    except (KeyError, TypeError, ValueError) as err:
        raise DomainBertError(f"{where}: 'low' and 'high' must be numbers") from err
    log = bool(spec.get("log", False))
    step = spec.get("step")
    if not low < high or not (math.isfinite(low) and math.isfinite(high)):
        raise DomainBertError(f"{where}: needs low < high, got low={low} high={high}")
    if log and low <= 0:
        raise DomainBertError(f"{where}: a log scale needs low > 0, got {low}")
    if log and step is not None and kind == "float":
        raise DomainBertError(f"{where}: 'step' and 'log' cannot be combined")
    if kind == "int" and (low != int(low) or high != int(high)):
        raise DomainBertError(f"{where}: int bounds must be whole numbers")
    return Param(path, kind, low, high, log, float(step) if step is not None else None)


def resolve_paths(params: Iterable[Param], keys: Iterable[str], source: str = "<sweep>") -> None:
    """Fill each ``param.target`` with the canonical config path, inserting ``init_args`` where needed.

    Args:
        params: the search space.
        keys: every dotted key of the parsed fit config (``Namespace.keys()``).
        source: the sweep file, for messages.

    Raises:
        DomainBertError: for a path the fit config does not have, with the nearest existing paths.
    """
    keys = set(keys)
    for p in params:
        target = _resolve(p.path, keys)
        if target is None:
            short = {_short(k) for k in keys}
            near = difflib.get_close_matches(p.path, sorted(short | keys), n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(near)}?" if near else ""
            roots = sorted({k.split(".")[0] for k in keys})
            raise DomainBertError(
                f"{source}: the parameter path '{p.path}' is not in the fit config{hint} "
                f"(top-level sections: {', '.join(roots)}; 'init_args' may be left out)"
            )
        p.target = target


def _resolve(path: str, keys: set[str]) -> str | None:
    if path in keys:
        return path
    parts = path.split(".")
    for i in range(1, len(parts)):
        prefix = ".".join(parts[:i])
        if parts[i] != "init_args" and f"{prefix}.class_path" in keys:
            found = _resolve(".".join([*parts[:i], "init_args", *parts[i:]]), keys)
            if found:
                return found
    return None


def _short(key: str) -> str:
    return key.replace(".init_args.", ".")


def format_value(value: Any) -> str:
    """A value as a command-line string jsonargparse parses back to the same value."""
    if isinstance(value, float):
        text = repr(value)
        return text if ("." in text or "inf" in text or "nan" in text) else text.replace("e", ".0e", 1)
    if isinstance(value, str):
        return value
    return json.dumps(value)


def overrides(values: dict[str, Any], params: Iterable[Param]) -> list[str]:
    """``--target=value`` arguments for the parameter values of one trial (keyed by ``param.path``)."""
    return [f"--{p.target}={format_value(values[p.path])}" for p in params if p.path in values]


class PerTrialSeedSampler(optuna.samplers.BaseSampler):
    """Wraps a sampler, re-seeding it for each trial with ``seed + trial.number``.

    Trial numbers are unique within a study, so parallel workers and machines never draw the same
    random start points, and a resumed study draws what an uninterrupted one would have drawn.
    """

    def __init__(self, spec: dict[str, Any]) -> None:
        """Build the sampler of ``spec`` (``{"type": "tpe", "seed": 0, **kwargs}``)."""
        self._spec = dict(spec)
        self._seed = int(self._spec.pop("seed", 0) or 0)
        self._type = self._spec.pop("type")
        self._inner = self._make(self._seed)

    def _make(self, seed: int) -> optuna.samplers.BaseSampler:
        cls = getattr(optuna.samplers, SAMPLERS[self._type])
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return cls(seed=seed, **self._spec)
        except (TypeError, ValueError, ImportError) as err:
            raise DomainBertError(f"sampler {self._type}: {err}") from err

    def before_trial(self, study, trial) -> None:
        self._inner = self._make(self._seed + trial.number)
        self._inner.before_trial(study, trial)

    def infer_relative_search_space(self, study, trial):
        return self._inner.infer_relative_search_space(study, trial)

    def sample_relative(self, study, trial, search_space):
        return self._inner.sample_relative(study, trial, search_space)

    def sample_independent(self, study, trial, param_name, param_distribution):
        return self._inner.sample_independent(study, trial, param_name, param_distribution)

    def after_trial(self, study, trial, state, values) -> None:
        self._inner.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self._inner.reseed_rng()


def make_pruner(spec: dict[str, Any]) -> optuna.pruners.BasePruner:
    """The Optuna pruner of ``spec`` (``{"type": "median", **kwargs}``)."""
    kwargs = {k: v for k, v in spec.items() if k != "type"}
    cls = getattr(optuna.pruners, PRUNERS[spec["type"]])
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as err:
        raise DomainBertError(f"pruner {spec['type']}: {err}") from err
