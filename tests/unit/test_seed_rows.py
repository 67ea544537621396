"""examples/benchmarks/seed_rows.py on small pipeline folders written here in the pipeline's own format: the mean ± std
over seeds, the paired bootstrap against the base folder, and the errors for a missing seed or other gold labels."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from domainbert.errors import DomainBertError
from tests.helpers.scripts import BENCH, script_module

GOLD = [0, 1, 0, 1, 2, 2]
LABELS = ["api", "graphics", "network"]


@pytest.fixture(scope="module")
def rows_mod():
    """The script as a module (its folder on the path, as when it runs)."""
    with script_module(BENCH / "seed_rows.py") as module:
        yield module


def pipeline_folder(folder: Path, runs: dict[int, tuple[float, float, list[int]]], gold=GOLD, status="done") -> Path:
    """A pipeline ``--out`` with a probe and one fine-tuning stage per seed: ``seed -> (val F1, test F1, preds)``.

    As the pipeline writes it: the stage records in ``state.json`` (status, metrics, seconds, the predictions' path),
    and ``<stage>/result.json`` and ``<stage>/test_predictions.json`` (gold, pred, labels).
    """
    state = {"probe": {"status": "done", "seconds": 3.0, "val": {"f1_macro": 0.5}}}
    for seed, (val, test, pred) in runs.items():
        stage = folder / f"finetune-baseline-seed{seed}"
        stage.mkdir(parents=True)
        (stage / "test_predictions.json").write_text(json.dumps({"gold": gold, "pred": pred, "labels": LABELS}))
        metrics = {"val/f1_macro": val, "val/acc": val, "test/f1_macro": test, "test/acc": test}
        record = {"run": str(stage / "run"), "metrics": metrics, "predictions": str(stage / "test_predictions.json")}
        (stage / "result.json").write_text(json.dumps(record))
        state[stage.name] = {"status": status, "seconds": 10.0, **record}
    (folder / "state.json").write_text(json.dumps(state))
    return folder


@pytest.fixture
def folders(tmp_path):
    """A base folder and an adapted one, three seeds each."""
    base = pipeline_folder(
        tmp_path / "base",
        {0: (0.80, 0.70, [0, 0, 0, 1, 2, 2]), 1: (0.82, 0.74, GOLD), 2: (0.84, 0.72, [0, 1, 1, 1, 2, 2])},
    )
    model = pipeline_folder(
        tmp_path / "mlm",
        {0: (0.85, 0.80, GOLD), 1: (0.85, 0.78, GOLD), 2: (0.88, 0.79, [0, 1, 0, 1, 2, 0])},
    )
    return base, model


def test_mean_and_std_over_seeds_by_hand(rows_mod, folders):
    base, model = folders
    rows = rows_mod.strategy_rows(base, [("mlm", model)])
    assert [r["model"] for r in rows] == ["base", "mlm"] and rows[0]["seeds"] == [0, 1, 2]
    # base val 0.80 0.82 0.84: mean 0.82, sample std sqrt((0.02² + 0 + 0.02²) / 2) = 0.02
    assert rows[0]["val"] == pytest.approx((0.82, 0.02))
    assert rows[0]["test"] == pytest.approx((0.72, 0.02))  # 0.70 0.74 0.72
    # model val 0.85 0.85 0.88: mean 0.86, std sqrt((0.01² + 0.01² + 0.02²) / 2) = sqrt(0.0003)
    assert rows[1]["val"] == pytest.approx((0.86, math.sqrt(0.0003)))
    assert rows[1]["val_delta"] == pytest.approx(0.04)
    ci = rows[1]["ci"]
    assert ci.low <= ci.diff <= ci.high and ci.seeds_covered


def test_the_bootstrap_difference_is_the_macro_f1_difference_by_hand(rows_mod, tmp_path):
    gold = [0, 1, 0, 1]
    base = pipeline_folder(tmp_path / "base", {0: (0.7, 0.7, [0, 0, 0, 1])}, gold=gold)
    model = pipeline_folder(tmp_path / "model", {0: (0.9, 1.0, gold)}, gold=gold)
    # base: class 0 P 2/3 R 1 F1 0.8; class 1 P 1 R 1/2 F1 2/3 -> macro 11/15; the model is right everywhere: 1
    ci = rows_mod.compare(rows_mod.read_runs(base, [0]), rows_mod.read_runs(model, [0]))
    assert ci.diff == pytest.approx(1 - 11 / 15)
    assert not ci.seeds_covered  # one seed: the interval holds the rows' noise only


def test_a_model_against_itself_differs_by_zero(rows_mod, tmp_path, folders):
    one = pipeline_folder(tmp_path / "one", {0: (0.8, 0.7, [0, 0, 0, 1, 2, 2])})
    runs = rows_mod.read_runs(one, [0])
    ci = rows_mod.compare(runs, runs)
    assert (ci.diff, ci.low, ci.high) == (0.0, 0.0, 0.0)
    # several seeds that disagree: the difference is still 0, but the seeds are resampled on each side, so the
    # interval holds their run-to-run noise around it
    runs = rows_mod.read_runs(folders[0], [0, 1, 2])
    ci = rows_mod.compare(runs, runs)
    assert ci.diff == 0.0 and ci.low < 0 < ci.high


def test_default_seeds_are_the_base_folders_finished_stages(rows_mod, tmp_path, folders):
    base, _ = folders
    state = json.loads((base / "state.json").read_text())
    state["finetune-baseline-seed7"] = {"status": "failed", "seconds": 1.0}
    state["finetune-other-seed3"] = {"status": "done"}
    (base / "state.json").write_text(json.dumps(state))
    assert rows_mod.done_seeds(base) == [0, 1, 2]


def test_a_missing_or_unfinished_seed_names_the_folder_and_the_seed(rows_mod, tmp_path, folders):
    base, _ = folders
    short = pipeline_folder(tmp_path / "short", {0: (0.8, 0.7, GOLD), 1: (0.8, 0.7, GOLD)})
    with pytest.raises(DomainBertError, match=r"short: seed 2 is not fine-tuned.*no such stage"):
        rows_mod.strategy_rows(base, [("short", short)])
    failed = pipeline_folder(tmp_path / "failed", {0: (0.8, 0.7, GOLD)}, status="failed")
    with pytest.raises(DomainBertError, match=r"failed: seed 0 is not fine-tuned.*'failed'"):
        rows_mod.read_runs(failed, [0])
    with pytest.raises(DomainBertError, match=r"nowhere.*state.json: no such file"):
        rows_mod.read_runs(tmp_path / "nowhere", [0])


def test_other_gold_labels_name_both_files(rows_mod, tmp_path, folders):
    base, _ = folders
    other = pipeline_folder(tmp_path / "other", {s: (0.8, 0.7, GOLD) for s in (0, 1, 2)}, gold=[0, 1, 0, 1, 2, 1])
    with pytest.raises(DomainBertError) as err:
        rows_mod.strategy_rows(base, [("other", other)])
    message = str(err.value)
    assert str(other / "finetune-baseline-seed0" / "test_predictions.json") in message
    assert str(base / "finetune-baseline-seed0" / "test_predictions.json") in message
    assert "row 5: label id 1 against 2" in message


def test_a_missing_predictions_file_is_named(rows_mod, folders):
    base, model = folders
    missing = model / "finetune-baseline-seed1" / "test_predictions.json"
    missing.unlink()
    with pytest.raises(DomainBertError, match=str(missing)):
        rows_mod.strategy_rows(base, [("mlm", model)])


def test_table_and_key_value_line_from_the_command_line(rows_mod, folders, capsys):
    base, model = folders
    figures = rows_mod.main(["--base", str(base), f"mlm={model}", "--seeds", "0,1,2"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "| model | seeds | val f1_macro | test f1_macro | Δ val | Δ test [95% CI] |"
    assert lines[2] == "| base | 0,1,2 | 0.8200 ± 0.0200 | 0.7200 ± 0.0200 | – | – |"
    assert lines[3].startswith("| mlm | 0,1,2 | 0.8600 ± 0.0173 | 0.7900 ± 0.0100 | +0.0400 | ")
    kv = dict(item.split("=", 1) for item in lines[-1].split())
    assert kv["seeds"] == "0,1,2" and float(kv["mlm_val_delta"]) == pytest.approx(0.04)
    assert float(kv["mlm_test_low"]) <= float(kv["mlm_test_delta"]) <= float(kv["mlm_test_high"])
    assert figures["base_val"] == pytest.approx(0.82) and set(figures) == set(kv)


def test_the_command_line_refuses_bad_input(rows_mod, folders, capsys):
    base, model = folders
    with pytest.raises(SystemExit, match=r"seed_rows: .*base: seed 5 is not fine-tuned"):
        rows_mod.main(["--base", str(base), f"mlm={model}", "--seeds", "0,5"])
    for argv in ([f"mlm={model}", "--seeds", "0,x"], [str(model)], [f"base={model}"], [f"a={model}", f"a={model}"]):
        with pytest.raises(SystemExit) as exit_:
            rows_mod.main(["--base", str(base), *argv])
        assert exit_.value.code == 2  # argparse's usage error


def test_parse_seeds(rows_mod):
    assert rows_mod.parse_seeds("0, 1,2") == [0, 1, 2]
    for bad in ("", "0,-1", "a", "1,1"):
        with pytest.raises(ValueError, match="seeds"):
            rows_mod.parse_seeds(bad)
