"""The benchmarks under examples/benchmarks run (``--quick``, tiny model) and end with their key=value line.

Speed is not asserted: only that each script works end to end, names the CPU flags on its first line and
reports every figure a script may read; and that the matmul probe behind the MFU figures is quick and sane.
"""

from __future__ import annotations

import importlib.util
import math
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "examples" / "benchmarks"

#: The sides of inference_latency.py besides the pipeline: its own, and every variant of the tiny export it makes.
SERVING_SIDES = ["domainbert", "domainbert_sorted", "export_student", "export_int8", "export_bf16"] + (
    ["export_onnx", "export_onnx_int8"] if importlib.util.find_spec("onnxruntime") else []
)

#: script -> the keys its last line must carry; the first ones are measurements that must be positive numbers.
CASES = {
    "mlm_throughput.py": (
        ["tokens_per_s", "hf_tokens_per_s", "ratio", "peak_rss_mb", "mfu", "hf_mfu", "mfu_ref"],
        ["ratio_fp32", "ratio_bf16", "hf_bf16_tokens_per_s", "precision", "native_bf16", "hf_mfu_ref"]
        + ["ratio_dropout0", "mfu_dropout0"],
    ),
    "finetune_throughput.py": (
        ["examples_per_s", "hf_examples_per_s", "ratio", "peak_rss_mb", "mfu", "hf_mfu", "mfu_ref"],
        ["precision", "group_by_length", "hf_mfu_ref"],
    ),
    "inference_latency.py": (
        ["latency_b1_ms", "hf_latency_b1_ms", "ratio_b1", "latency_b8_ms", "hf_latency_b8_ms", "peak_rss_mb"]
        + ["mfu", "hf_mfu", "mfu_b1", "hf_mfu_b1", "mfu_ref"]
        + [f"speedup_{b}_{side}" for side in SERVING_SIDES for b in ("b1", "b32")],
        ["precision", "f1_hf", "fastest_within_f1", "fastest_within_f1_speedup_b32"]
        + [f"{key}_{side}" for side in SERVING_SIDES for key in ("f1", "f1_drop_points")],
    ),
    "eval_memory.py": (["mlm_peak_rss_1x_mb", "mlm_peak_rss_4x_mb", "peak_rss_mb"], ["flat", "mlm_growth_mb"]),
    "data_cache.py": (["first_setup_s", "second_setup_s", "ratio"], ["train_blocks"]),
    "time_to_accuracy.py": (
        ["domainbert_total_s", "hf_total_s", "domainbert_time_to_target_s", "hf_time_to_target_s", "ratio"],
        ["target", "domainbert_f1_step0", "domainbert_best_f1", "domainbert_final_f1", "hf_f1_step0", "hf_best_f1"]
        + ["hf_final_f1", "domainbert_steps_to_target", "ratio_is_lower_bound", "eval_every", "precision"],
    ),
    "startup.py": (
        ["python_s", "import_torch_s", "help_s", "fit_help_s", "pipeline_help_s", "first_step_s"],
        ["first_step_beyond_torch_s", "libraries_beyond_torch_s", "first_step_beyond_libraries_s", "repeats"],
    ),
}

#: The scripts that probe the machine's matmul peak in their own precision (``peak_tflops_<precision>``).
PROBED = ("mlm_throughput.py", "finetune_throughput.py", "inference_latency.py")


def load_common():
    """``examples/benchmarks/common.py`` as a module (not as ``common`` on ``sys.path``)."""
    spec = importlib.util.spec_from_file_location("benchmarks_common", BENCH / "common.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("script", sorted(CASES))
def test_quick_run_prints_figures(script, tiny_bert, tmp_path):
    cmd = [sys.executable, str(BENCH / script), "--quick", "--model", str(tiny_bert), "--threads", "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    lines = proc.stdout.strip().splitlines()
    assert any(re.fullmatch(r"-{3,}( +-{3,})+", line) for line in lines), "no side-by-side table printed"
    figures = dict(item.split("=", 1) for item in lines[-1].split())
    positive, present = CASES[script]
    if script in PROBED:
        positive = [*positive, f"peak_tflops_{figures['precision']}"]
        present = [*present, f"peak_shape_{figures['precision']}"]
    for key in positive:
        value = float(figures[key])
        assert math.isfinite(value) and value > 0, f"{key}={figures[key]}"
    for key in present:
        assert key in figures
    assert lines[0].startswith("# machine: flags "), lines[0]
    assert f"flags {figures['isa']}" in lines[0]


def test_every_mlm_side_runs_and_reports_its_warm_up(tiny_bert, tmp_path):
    """The optional MLM sides (dense logits, fused AdamW, compiled encoder, no dropout) each train and are timed."""
    spec = importlib.util.spec_from_file_location("mlm_throughput", BENCH / "mlm_throughput.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sides = [s for s in module.SIDES if s.startswith("domainbert") and s not in ("domainbert_bf16",)]
    cmd = [sys.executable, str(BENCH / "mlm_throughput.py"), "--quick", "--model", str(tiny_bert), "--threads", "1"]
    proc = subprocess.run([*cmd, "--sides", ",".join(sides)], capture_output=True, text=True, cwd=tmp_path, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    for side in sides:
        rate = re.search(rf"^# {side}: ([0-9.]+) tokens/s", proc.stdout, re.M)
        assert rate and float(rate.group(1)) > 0, side
    header = next(line for line in proc.stdout.splitlines() if line.lstrip().startswith("side"))
    assert "warm-up s" in header


def test_distill_benchmark_names_the_flags_its_mfu_and_its_speedups(tiny_bert, tmp_path):
    cmd = [sys.executable, str(BENCH / "distill_benchmark.py"), "--quick", "--model", str(tiny_bert)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    lines = proc.stdout.strip().splitlines()
    figures = dict(item.split("=", 1) for item in lines[-1].split())
    assert lines[0].startswith(f"# machine: flags {figures['isa']}"), lines[0]
    for key in ("teacher_mfu_b32", "student_mfu_b32", "bf16_mfu_b32", "peak_tflops_fp32", "peak_tflops_bf16"):
        assert math.isfinite(float(figures[key])) and float(figures[key]) > 0, f"{key}={figures[key]}"
    assert "int8_mfu_b32" not in figures  # no int8 peak is probed: no int8 MFU
    assert any(line.startswith("----") for line in lines)
    for key in ("student_f1_ratio", "student_speedup_b32", "int8_speedup_b32", "bf16_speedup_b32"):
        assert float(figures[key]) > 0, key
    assert figures["faster_b32"] in ("int8", "bf16")


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_probe_peak_is_quick_and_reports_every_shape(precision):
    import torch

    common = load_common()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        start = time.perf_counter()
        peak = common.probe_peak(precision, common.probe_shapes(quick=True), seconds=0.1)
        took = time.perf_counter() - start
    finally:
        torch.set_num_threads(threads)
    assert took < 1.0
    assert list(peak["by_shape"]) == [f"{common.QUICK_ROWS}x384x1536"]
    assert peak["tflops"] == max(peak["by_shape"].values()) > 0
    assert (peak["precision"], peak["threads"]) == (precision, 1)
    assert common.mfu(peak["tflops"] * 1e12 / 2, peak) == pytest.approx(0.5)
    assert math.isnan(common.mfu(1e9, None))


def test_probe_shapes_are_the_reference_and_the_model_ones():
    from transformers import BertConfig

    common = load_common()
    minilm = BertConfig(hidden_size=384, intermediate_size=1536)
    # the reference (all-MiniLM-L6-v2's FFN at batch 32 x 128 tokens) is one of the model's: listed once
    assert common.probe_shapes(minilm, 32 * 128) == [(4096, 384, 1536), (4096, 384, 384), (4096, 1536, 384)]
    assert common.probe_shapes(None) == [common.REFERENCE_SHAPE]
    assert common.probe_shapes(BertConfig(hidden_size=32, intermediate_size=64), 512, quick=True) == [
        (common.QUICK_ROWS, 384, 1536),
        (512, 32, 32),
        (512, 32, 64),
        (512, 64, 32),
    ]


def test_the_flags_are_detected_not_assumed(monkeypatch):
    common = load_common()
    monkeypatch.setattr(common, "cpu_flags", lambda: {"avx2", "fma", "sse4_2"})
    assert common.isa_summary() == "avx2+fma"
    assert common.describe_machine(1).startswith("flags avx2+fma (no amx_bf16 amx_tile avx512_bf16 avx512f); ")
    monkeypatch.setattr(common, "cpu_flags", lambda: {"amx_bf16", "amx_tile", "avx512_bf16", "avx512f", "avx2"})
    assert common.isa_summary() == "amx_bf16+amx_tile+avx512_bf16+avx512f+avx2"
    monkeypatch.setattr(common, "cpu_flags", set)  # no /proc/cpuinfo: torch's own checks
    assert set(common.cpu_isa()) == set(common.ISA_FLAGS)


def test_step_clock_times_the_warm_up_apart_from_the_timed_steps():
    common = load_common()
    clock = common.StepClock(warmup=2)
    clock.start = 10.0
    clock.times, clock.cpu, clock.counts = [11.0, 15.0, 16.0, 18.0], [0.0, 1.0, 2.0, 3.0], [8, 8, 8, 8]
    assert clock.warmup_seconds() == 5.0  # creation to the end of the second (last warm-up) step
    assert clock.seconds() == 3.0 and clock.rate() == 16 / 3.0
    assert math.isnan(common.StepClock(warmup=3).warmup_seconds())  # the warm-up never ended
    assert common.StepClock(warmup=0).warmup_seconds() == 0.0
