"""The benchmarks under examples/benchmarks run (``--quick``, tiny model) and end with their key=value line.

Speed is not asserted: only that each script works end to end and reports every figure a script may read.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "examples" / "benchmarks"

#: script -> the keys its last line must carry; the first ones are measurements that must be positive numbers.
CASES = {
    "mlm_throughput.py": (
        ["tokens_per_s", "hf_tokens_per_s", "ratio", "peak_rss_mb", "mfu"],
        ["ratio_fp32", "ratio_bf16", "hf_bf16_tokens_per_s", "precision", "native_bf16"],
    ),
    "finetune_throughput.py": (
        ["examples_per_s", "hf_examples_per_s", "ratio", "peak_rss_mb", "mfu"],
        ["precision", "group_by_length"],
    ),
    "inference_latency.py": (
        ["latency_b1_ms", "hf_latency_b1_ms", "ratio_b1", "latency_b8_ms", "hf_latency_b8_ms", "peak_rss_mb"],
        ["precision"],
    ),
    "eval_memory.py": (["mlm_peak_rss_1x_mb", "mlm_peak_rss_4x_mb", "peak_rss_mb"], ["flat", "mlm_growth_mb"]),
    "data_cache.py": (["first_setup_s", "second_setup_s", "ratio"], ["train_blocks"]),
}


@pytest.mark.parametrize("script", sorted(CASES))
def test_quick_run_prints_figures(script, tiny_bert, tmp_path):
    cmd = [sys.executable, str(BENCH / script), "--quick", "--model", str(tiny_bert), "--threads", "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    lines = proc.stdout.strip().splitlines()
    assert any(re.fullmatch(r"-{3,}( +-{3,})+", line) for line in lines), "no side-by-side table printed"
    figures = dict(item.split("=", 1) for item in lines[-1].split())
    positive, present = CASES[script]
    for key in positive:
        value = float(figures[key])
        assert math.isfinite(value) and value > 0, f"{key}={figures[key]}"
    for key in present:
        assert key in figures
