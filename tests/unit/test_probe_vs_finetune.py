"""The pure parts of examples/benchmarks/probe_vs_finetune.py: ranks, Spearman's rho, the table, the commands."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "examples" / "benchmarks"


@pytest.fixture(scope="module")
def pvf():
    """The script as a module (its folder on the path, as when it runs)."""
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location("probe_vs_finetune", BENCH / "probe_vs_finetune.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(BENCH))


def scores(probe, val, test, minutes=1.0):
    return {"probe": probe, "val": val, "test": test, "minutes": minutes}


def test_ranks_average_ties(pvf):
    assert pvf.ranks([0.3, 0.1, 0.3, 0.2]) == [3.5, 1.0, 3.5, 2.0]


def test_spearman_by_hand(pvf):
    # ranks x: 1 2 3 4 5, ranks y: 2 1 4 3 5; d^2 = 1+1+1+1+0 = 4; rho = 1 - 6*4 / (5*24) = 0.8
    rho, p = pvf.spearman([0.1, 0.2, 0.3, 0.4, 0.5], [0.02, 0.01, 0.04, 0.03, 0.05])
    assert rho == pytest.approx(0.8)
    assert 0 < p < 1
    assert pvf.spearman([1.0, 2.0, 3.0], [3.0, 2.0, 1.0])[0] == pytest.approx(-1.0)
    assert math.isnan(pvf.spearman([1.0, 2.0], [1.0, 2.0])[0])


def test_spearman_without_scipy_matches(pvf, monkeypatch):
    monkeypatch.setitem(sys.modules, "scipy.stats", None)  # the import fails: the script's own ranks
    rho, p = pvf.spearman([0.1, 0.2, 0.3, 0.4, 0.5], [0.02, 0.01, 0.04, 0.03, 0.05])
    assert rho == pytest.approx(0.8) and math.isnan(p)
    rho, _ = pvf.spearman([1.0, 2.0, 2.0, 3.0], [1.0, 3.0, 2.0, 4.0])  # ties in x: Pearson of the ranks
    assert rho == pytest.approx(0.9486833, abs=1e-6)


def test_table_rows_and_summary(pvf):
    base = scores(0.80, 0.85, 0.84)
    adapted = [("mlm", 150, scores(0.82, 0.86, 0.83)), ("tsdae", 25, scores(0.78, 0.84, 0.85, 2.5))]
    adapted.append(("lora", 250, scores(0.81, 0.83, 0.84)))
    rows = pvf.table_rows(base, adapted)
    assert [r["arm"] for r in rows] == ["base", "mlm", "tsdae", "lora"]
    assert rows[0]["probe Δ"] == 0 and rows[0]["Δ val"] == 0
    assert rows[1]["probe Δ"] == pytest.approx(0.02) and rows[1]["Δ val"] == pytest.approx(0.01)
    assert rows[1]["Δ test"] == pytest.approx(-0.01) and rows[2]["minutes"] == 2.5
    stats = pvf.summary(rows)
    # probe Δ 0.02, -0.02, 0.01 -> ranks 3 1 2; val Δ 0.01, -0.01, -0.02 -> ranks 3 2 1; d^2 = 0+1+1; rho = 0.5
    assert stats["rho"] == pytest.approx(0.5) and stats["n"] == 3
    assert stats["sign_agree"] == 2  # mlm both up, tsdae both down, lora up against down
    text = pvf.markdown(rows)
    lines = text.splitlines()
    assert lines[0].startswith("| arm | step | probe val | probe Δ")
    assert lines[2] == "| base | 0 | 0.8000 | +0.0000 | 0.8500 | +0.0000 | 0.8400 | +0.0000 | 1.0 |"
    assert "| mlm | 150 | 0.8200 | +0.0200 | 0.8600 | +0.0100 | 0.8300 | -0.0100 | 1.0 |" in lines
    figures = pvf.figures(rows, stats, {"mlm": 10.0, "tsdae": float("nan")})
    assert figures["mlm150_val_delta"] == pytest.approx(0.01) and figures["base_val"] == 0.85
    assert figures["minutes"] == pytest.approx(5.5 + 10.0)  # a nan (reused) pretraining is left out


def test_read_scores(pvf):
    state = {
        "probe": {"status": "done", "seconds": 30, "val": {"f1_macro": 0.7, "acc": 0.8}},
        "finetune-baseline-seed0": {
            "status": "done",
            "seconds": 90,
            "metrics": {"val/f1_macro": 0.81, "test/f1_macro": 0.79},
        },
    }
    assert pvf.read_scores(state) == {"probe": 0.7, "val": 0.81, "test": 0.79, "minutes": 2.0}
    state["finetune-baseline-seed0"]["status"] = "failed"
    assert pvf.read_scores(state) is None


def test_scaled_steps(pvf):
    assert pvf.scaled_steps((150, 250, 400), 1.0) == [150, 250, 400]
    assert pvf.scaled_steps((150, 250, 400), 0.01) == [2, 4]  # 1.5 and 2.5 both round to 2
    assert pvf.scaled_steps((25,), 0.001) == [1]


def test_arm_config(pvf, tmp_path):
    config = {
        "trainer": {
            "max_steps": 300,
            "val_check_interval": 100,
            "callbacks": [
                {"class_path": "domainbert.adapt.watch.ProbeWatch", "init_args": {"patience": 3, "every_n_steps": 50}},
                {"class_path": "lightning.pytorch.callbacks.LearningRateMonitor"},
            ],
        },
        "model": {"class_path": "M", "init_args": {"init_from": "pkg:x", "head_warmup_steps": 100}},
    }
    cfg = pvf.arm_config(config, [150, 250], tmp_path)
    assert cfg["trainer"]["max_steps"] == 250 and cfg["trainer"]["val_check_interval"] == 100
    watch = cfg["trainer"]["callbacks"][0]["init_args"]
    assert watch == {"patience": None, "every_n_steps": 50, "restore_best": False}
    exports = cfg["trainer"]["callbacks"][-1]
    assert exports == {
        "class_path": "probe_vs_finetune_exports.StepExports",
        "init_args": {"steps": [150, 250], "folder": str(tmp_path)},
    }
    assert config["trainer"]["max_steps"] == 300 and len(config["trainer"]["callbacks"]) == 2  # not changed
    small = pvf.arm_config(config, [1, 2], tmp_path, scale=0.01, model="/tiny")
    assert small["model"]["init_args"] == {"init_from": "/tiny", "head_warmup_steps": 1}
    assert small["trainer"]["val_check_interval"] == 2


def test_commands(pvf, tmp_path):
    cmd = pvf.pipeline_command("/exports/step150", tmp_path / "p", ["--isolate", "none"])
    assert cmd[1:4] == ["-m", "domainbert", "pipeline"]
    assert cmd[cmd.index("--base_model") + 1] == "/exports/step150"
    assert "--task_val=examples/data/python-docs/validation.jsonl" in cmd
    assert cmd[cmd.index("--seeds") + 1] == "[0]"
    for stage in ("dapt", "tapt", "soup", "distill", "export"):
        assert f"--{stage}.enabled=false" in cmd
    assert cmd[cmd.index("--out") + 1] == str(tmp_path / "p") and cmd[-2:] == ["--isolate", "none"]
    fit = pvf.fit_command(tmp_path / "config.yaml", tmp_path)
    assert fit[3:6] == ["fit", "--config", str(tmp_path / "config.yaml")]
    assert fit[fit.index("--trainer.default_root_dir") + 1] == str(tmp_path / "fit")


def test_parse_rejects_unknown_arm(pvf):
    with pytest.raises(SystemExit):
        pvf.parse(["--arms", "mlm,bogus"])
    args = pvf.parse(["--arms", "tsdae", "--out", "x", "--", "--isolate", "none"])
    assert args.arms == ["tsdae"] and args.extra == ["--isolate", "none"] and args.out.is_absolute()
