"""The sweep file: its errors name the key at fault, shipped spaces resolve, and sampling is seeded per trial."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from domainbert.errors import DomainBertError
from domainbert.sweep.space import PerTrialSeedSampler, format_value, load_spec, overrides, parse_spec, resolve_paths
from domainbert.sweep.trial import parse_fit

ROOT = Path(__file__).resolve().parents[2]
FLOAT = {"type": "float", "low": 0, "high": 1}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"metric": None}, "metric"),
        ({"direction": "up"}, "direction"),
        ({"params": {"a": {**FLOAT, "low": 1}}}, "low < high"),
        ({"params": {"a": {**FLOAT, "log": True}}}, "low > 0"),
        ({"params": {"a": {"type": "categorical", "choices": []}}}, "choices"),
        ({"params": {"a": {**FLOAT, "type": "uniform"}}}, "params.a"),
        ({"params": {"a": {**FLOAT, "lo": 0}}}, "unknown key"),
        ({"pruner": "asha"}, "pruner"),
        ({"metrics": "m"}, "unknown key"),
    ],
)
def test_sweep_file_errors_name_the_key(change, message):
    raw = {"metric": "m", "direction": "maximize", "params": {"a": FLOAT}, **change}
    with pytest.raises(DomainBertError, match=message):
        parse_spec({k: v for k, v in raw.items() if v is not None}, source="s.yaml")


def test_shipped_spaces_resolve_against_the_pretraining_config():
    _, cfg = parse_fit(["--config", str(ROOT / "configs/pretrain/tiny_debug.yaml")])
    for name in ("lr_warmup", "lr_warmup_dropout"):
        spec = load_spec(ROOT / f"configs/sweep/{name}.yaml")
        resolve_paths(spec.params, cfg.keys())
        assert {p.target for p in spec.params} >= {"model.init_args.learning_rate", "model.init_args.warmup_ratio"}
    assert spec.params[-1].target == "model.init_args.hidden_dropout"


def test_paths_may_leave_out_init_args_and_a_typo_names_the_nearest_path():
    spec = parse_spec({"metric": "m", "direction": "minimize", "params": {"model.lr": FLOAT}})
    keys = ["model.class_path", "model.init_args.lr", "trainer.max_steps"]
    resolve_paths(spec.params, keys)
    assert spec.params[0].target == "model.init_args.lr"
    assert overrides({"model.lr": 0.5, "other": 1}, spec.params) == ["--model.init_args.lr=0.5"]
    typo = parse_spec({"metric": "m", "direction": "minimize", "params": {"model.lf": FLOAT}}, source="s.yaml")
    with pytest.raises(DomainBertError, match=r"s\.yaml: .*'model\.lf'.*did you mean model\.lr"):
        resolve_paths(typo.params, keys, source="s.yaml")


@pytest.mark.parametrize(("value", "text"), [(1e-05, "1.0e-05"), (0.5, "0.5"), (3, "3"), (True, "true"), ("w", "w")])
def test_values_are_written_as_the_config_parser_reads_them(value, text):
    assert format_value(value) == text


def _draws(seed: int, n: int) -> list[dict]:
    study = optuna.create_study(sampler=PerTrialSeedSampler({"type": "random", "seed": seed}))
    space = {"x": optuna.distributions.FloatDistribution(0, 1)}
    return [study.ask(space).params for _ in range(n)]


def test_each_trial_draws_from_its_own_seed():
    """Trial n draws the same in any study of the same seed: a resumed or parallel study repeats nothing."""
    first = _draws(0, 4)
    assert _draws(0, 4) == first
    assert len({d["x"] for d in first}) == 4
    assert _draws(1, 4) != first
