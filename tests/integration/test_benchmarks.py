"""The benchmarks under examples/benchmarks run (``--quick``, tiny model) and end with their key=value line.

Speed is not asserted: only that each script works end to end, names the CPU flags on its first line and
reports every figure a script may read; and that the matmul probe behind the MFU figures is sane.

Each script's ``main(argv)`` runs in this process (a fresh interpreter per script would pay the imports of torch,
Lightning and transformers every time), with the global state it changes put back afterwards (``isolated``); one
script runs as a subprocess, so that the command-line entry point is checked too.
"""

from __future__ import annotations

import gc
import importlib.util
import itertools
import logging
import math
import os
import random
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from domainbert.errors import DomainBertError
from domainbert.pipeline.timing import PARTS

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
    "distill_chunks.py": (
        ["s_per_step_whole", "s_per_step_8", "teacher_s_per_step_whole", "teacher_s_per_step_8", "speedup_8"]
        + ["real_share", "tokens_per_step"],
        ["s_per_step_16", "s_per_step_4", "precision"],
    ),
    "pipeline_time.py": (
        [f"{config}_{key}" for config in ("demo", "paths_only") for key in ("minutes", "stage_minutes")],
        [f"{config}_{part}_minutes" for config in ("demo", "paths_only") for part in PARTS],
    ),
    "probe_vs_finetune.py": (
        ["n", "minutes", "mlm_pretrain_minutes", "lora_pretrain_minutes"],
        ["rho", "rho_p", "rho_test", "rho_test_p", "sign_agree", "base_probe", "base_val", "base_test"]
        + [f"{m}_{key}" for m in ("mlm2", "mlm4", "lora2") for key in ("probe", "probe_delta", "val_delta")]
        + ["seeds"]
        + [f"{m}_test_{end}" for m in ("mlm2", "mlm4", "lora2") for end in ("low", "high")],
    ),
    "serving_profile.py": (["examples", "classify_ms"], ["isa", "threads"]),
    "startup.py": (
        ["python_s", "import_torch_s", "help_s", "fit_help_s", "pipeline_help_s", "first_step_s"],
        ["first_step_beyond_torch_s", "libraries_beyond_torch_s", "first_step_beyond_libraries_s", "repeats"],
    ),
}

#: The scripts that probe the machine's matmul peak in their own precision (``peak_tflops_<precision>``).
PROBED = ("mlm_throughput.py", "finetune_throughput.py", "inference_latency.py")

#: The script run as a subprocess (its own measurements are subprocesses anyway: the in-process run saves little).
CLI_SCRIPT = "data_cache.py"


def load_common():
    """``examples/benchmarks/common.py`` as a module (not as ``common`` on ``sys.path``)."""
    spec = importlib.util.spec_from_file_location("benchmarks_common", BENCH / "common.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_script(script: str):
    """A benchmark script as a fresh module; it puts its folder on ``sys.path`` for its own ``import common``.

    Use it under ``isolated``, which takes the module, ``common`` and that ``sys.path`` entry away again.
    """
    name = f"benchmark_{Path(script).stem}"
    spec = importlib.util.spec_from_file_location(name, BENCH / script)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class GlobalState:
    """What an in-process benchmark changes for the whole process, saved to be put back.

    The environment (``common.quiet`` sets variables, Lightning's seeding ``PL_GLOBAL_SEED``), torch's threads,
    random generators, grad mode and matmul precision, every logger's level, the progress bars of transformers
    and datasets, the warning filters, the HF Trainer's accelerate singletons, torch.compile's caches, and the
    modules loaded from the benchmark folder (``common``, ``startup_mark``, the scripts).
    """

    def __init__(self) -> None:
        # the libraries the scripts import set their loggers' levels on import: import them first, so that those
        # levels are the ones saved (a logger made later, under a script's run, is put back to no level of its own)
        import datasets  # noqa: F401
        import lightning.pytorch  # noqa: F401
        import numpy as np
        import torch
        import transformers  # noqa: F401

        self.environ = dict(os.environ)
        self.threads = torch.get_num_threads()
        self.matmul = torch.get_float32_matmul_precision()
        self.grad = torch.is_grad_enabled()
        self.rng = (torch.get_rng_state(), random.getstate(), np.random.get_state())
        self.loggers = {name: logger.level for name, logger in self.loggers_now().items()}
        self.root_level = logging.getLogger().level
        self.filters = list(warnings.filters)
        self.bars = self.progress_bars()
        self.accelerate = {borg: dict(borg._shared_state) for borg in self.accelerate_states()}
        self.modules = set(sys.modules)

    @staticmethod
    def loggers_now() -> dict[str, logging.Logger]:
        return {n: lg for n, lg in logging.root.manager.loggerDict.items() if isinstance(lg, logging.Logger)}

    @staticmethod
    def accelerate_states() -> list[type]:
        """accelerate's shared-state classes, once something has imported them."""
        if "accelerate.state" not in sys.modules:
            return []
        from accelerate.state import AcceleratorState, GradientState, PartialState

        return [PartialState, AcceleratorState, GradientState]

    @staticmethod
    def progress_bars() -> tuple[bool, bool]:
        import datasets
        import transformers

        return datasets.is_progress_bar_enabled(), transformers.utils.logging.is_progress_bar_enabled()

    def restore(self) -> None:
        import datasets
        import numpy as np
        import torch
        import transformers

        os.environ.clear()
        os.environ.update(self.environ)
        torch.set_num_threads(self.threads)
        torch.set_float32_matmul_precision(self.matmul)
        torch.set_grad_enabled(self.grad)
        torch.set_rng_state(self.rng[0])
        random.setstate(self.rng[1])
        np.random.set_state(self.rng[2])
        for name, logger in self.loggers_now().items():  # a logger made meanwhile had no level of its own
            logger.setLevel(self.loggers.get(name, logging.NOTSET))
        logging.getLogger().setLevel(self.root_level)
        warnings.filters[:] = self.filters
        datasets_bar, transformers_bar = self.bars
        (datasets.enable_progress_bars if datasets_bar else datasets.disable_progress_bars)()
        hf_logging = transformers.utils.logging
        (hf_logging.enable_progress_bar if transformers_bar else hf_logging.disable_progress_bar)()
        for borg in self.accelerate_states():  # the HF Trainer's singletons (use_cpu=True)
            borg._shared_state.clear()
            borg._shared_state.update(self.accelerate.get(borg, {}))
        if "torch._dynamo" in sys.modules:  # the compiled MLM side
            torch._dynamo.reset()
        for name in set(sys.modules) - self.modules:
            if str(getattr(sys.modules[name], "__file__", None) or "").startswith(str(BENCH)):
                del sys.modules[name]


@pytest.fixture
def isolated(monkeypatch, tmp_path):
    """Run in ``tmp_path``, and put back afterwards the global state a benchmark's ``main`` changes.

    The objects alive before are frozen meanwhile (``gc.freeze``): the scripts call ``gc.collect()`` between their
    sides, which in this process would otherwise walk every object of the test session each time. Where the module's
    objects are frozen already (tests/conftest.py), the earlier tests' garbage is collected first and they stay
    frozen afterwards.
    """
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the scripts add their folder to it
    state = GlobalState()
    frozen = gc.get_freeze_count()
    if frozen:
        gc.collect()  # walks only what the module's freeze left in view
    gc.freeze()
    try:
        yield
    finally:
        if not frozen:
            gc.unfreeze()
        state.restore()


def run_main(module, capsys, *argv: str) -> tuple[dict, list[str]]:
    """``module.main(argv)`` in this process: the figures it returns and the lines it prints."""
    capsys.readouterr()
    returned = module.main(list(argv))
    return returned, capsys.readouterr().out.strip().splitlines()


def check_figures(script: str, lines: list[str], returned: dict | None = None) -> dict[str, str]:
    """What every quick run of ``script`` must print: the machine line with the CPU flags first, a side-by-side
    table, and a last key=value line with every key of :data:`CASES` (the measurements finite and positive),
    holding the figures ``main`` returned. Returns that line's figures."""
    table = r"-{3,}( +-{3,})+|\|(-{3,}:?\|)+"  # common.table's rule, or a Markdown table's
    assert any(re.fullmatch(table, line) for line in lines), "no side-by-side table printed"
    figures = dict(item.split("=", 1) for item in lines[-1].split())
    if returned is not None:
        assert set(returned) == set(figures)
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
    return figures


#: The scripts whose quick run is checked in-process by :func:`test_quick_run_prints_figures` (below: MLM with every
#: side, the pipeline's time with options for its pipelines; :data:`CLI_SCRIPT` as a subprocess).
IN_PROCESS = sorted(set(CASES) - {"mlm_throughput.py", "pipeline_time.py", CLI_SCRIPT})


@pytest.mark.parametrize("script", IN_PROCESS)
def test_quick_run_prints_figures(script, tiny_bert, isolated, capsys):
    module = load_script(script)
    returned, lines = run_main(module, capsys, "--quick", "--model", str(tiny_bert), "--threads", "1")
    check_figures(script, lines, returned)


def test_serving_profile_times_the_compiled_model_beside_classify(tiny_bert, isolated, capsys):
    module = load_script("serving_profile.py")
    returned, lines = run_main(module, capsys, "--quick", "--model", str(tiny_bert), "--threads", "1", "--compile")
    figures = check_figures("serving_profile.py", lines, returned)
    assert float(figures["compiled_ms"]) > 0 and float(figures["compile_s"]) > 0
    assert float(figures["compiled_speedup"]) > 0
    assert int(figures["compiled_agree"]) == int(figures["examples"]) == 16  # float32: the same labels
    assert any(key.startswith("share_aten_") for key in figures)  # the profile's operators


@pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None, reason="needs onnxruntime")
def test_serving_profile_reads_an_onnx_folders_operators_from_onnxruntime(tiny_bert, isolated, capsys):
    module = load_script("serving_profile.py")
    returned, lines = run_main(module, capsys, "--quick", "--onnx", "--threads", "1")
    figures = check_figures("serving_profile.py", lines, returned)
    assert figures["attention"] == "onnxruntime"
    shares = {key.removeprefix("share_"): float(value) for key, value in figures.items() if key.startswith("share_")}
    assert shares and not any(op.startswith("aten_") for op in shares)  # onnxruntime's op types, not PyTorch's
    assert {"MultiHeadAttention", "SkipLayerNormalization"} & set(shares)  # the export's fused kernels
    assert 0 < sum(shares.values()) <= 1.0001
    with pytest.raises(DomainBertError, match="onnx_int8: an ONNX graph; --compile and --attention are for PyTorch"):
        module.main(["--quick", "--onnx", "--threads", "1", "--compile"])


def test_a_script_runs_from_the_command_line(tiny_bert, tmp_path):
    cmd = [sys.executable, str(BENCH / CLI_SCRIPT), "--quick", "--model", str(tiny_bert), "--threads", "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    check_figures(CLI_SCRIPT, proc.stdout.strip().splitlines())


def stage_tables(lines: list[str]) -> dict[str, list[str]]:
    """pipeline_time.py's stage tables in its printed ``lines``: config name -> the stages in its table's rows."""
    tables: dict[str, list[str]] = {}
    name = None
    for line in lines:
        heading = re.match(r"# (\S+): [0-9.]+ min wall clock", line)
        if heading:
            name = heading.group(1)
            tables[name] = []
        elif name and re.match(r"(probe|dapt|finetune|soup|distill|export)\S* ", line):
            tables[name].append(line.split()[0])
    return tables


def test_pipeline_time_runs_both_configs_with_the_options_given_after_the_dashes(tiny_bert, isolated, capsys):
    """The quick run times both configs, each a ``domainbert pipeline`` process, and prints every figure; what follows
    ``--`` reaches each of them (no probe stage in either: ``--probe.enabled false``)."""
    module = load_script("pipeline_time.py")
    argv = ["--quick", "--model", str(tiny_bert), "--threads", "1", "--", "--probe.enabled", "false"]
    returned, lines = run_main(module, capsys, *argv)
    check_figures("pipeline_time.py", lines, returned)
    tables = stage_tables(lines)
    assert tables["demo"] == ["finetune-baseline-seed0", "distill", "export"], tables
    paths_only = set(tables["paths-only"])  # DAPT on: the tiny model has its masked-LM head
    assert {"dapt", "finetune-baseline-seed0", "distill", "export"} <= paths_only, tables
    assert not any(stage.startswith("probe") for stage in paths_only), tables
    for config in ("demo", "paths_only"):
        assert float(returned[f"{config}_minutes"]) >= float(returned[f"{config}_stage_minutes"]) > 0


def test_pipeline_time_runs_only_the_config_named(tiny_bert, isolated, capsys, monkeypatch):
    """``--only demo``: the demo config alone is run, and only its figures are printed (the runs are stood in for:
    the quick run above runs the pipelines)."""
    module = load_script("pipeline_time.py")
    ran = []

    def run_config(args, name, out):
        ran.append((name, args.extra))
        state = {"finetune-baseline-seed0": {"status": "done", "seconds": 30.0, "parts": {p: 1.0 for p in PARTS}}}
        return {"minutes": 1.0, "state": state, "folder": out / name}

    monkeypatch.setattr(module, "run_config", run_config)
    argv = ["--quick", "--model", str(tiny_bert), "--only", "demo", "--", "--seeds", "[0, 1]"]
    returned, lines = run_main(module, capsys, *argv)
    assert [name for name, _ in ran] == ["demo"]
    assert ran[0][1][-2:] == ["--seeds", "[0, 1]"]  # after the quick options: the pipeline's last word
    assert set(returned) == {"isa", "demo_minutes", "demo_stage_minutes"} | {f"demo_{p}_minutes" for p in PARTS}
    assert float(returned["demo_stage_minutes"]) == pytest.approx(0.5)
    assert stage_tables(lines) == {"demo": ["finetune-baseline-seed0"]}


def test_every_mlm_side_runs_and_reports_its_warm_up(tiny_bert, isolated, capsys):
    """The default sides and the optional ones (dense logits, fused AdamW, compiled encoder, no dropout) each
    train and are timed, in one run that prints every figure."""
    module = load_script("mlm_throughput.py")
    extra = [s for s in module.SIDES if s.startswith("domainbert_") and s != "domainbert_bf16"]
    sides = module.default_sides("auto") + extra
    argv = ["--quick", "--model", str(tiny_bert), "--threads", "1", "--sides", ",".join(sides)]
    returned, lines = run_main(module, capsys, *argv)
    check_figures("mlm_throughput.py", lines, returned)
    stdout = "\n".join(lines)
    for side in sides:
        rate = re.search(rf"^# {side}: ([0-9.]+) tokens/s", stdout, re.M)
        assert rate and float(rate.group(1)) > 0, side
    assert "DOMAINBERT_CPU_DROPOUT" not in os.environ  # domainbert_sdpa's setting is put back after its run
    header = next(line for line in lines if line.lstrip().startswith("side"))
    assert "warm-up s" in header


def test_mlm_runs_the_hf_bf16_side_by_default_only_where_bf16_is_native(isolated, monkeypatch):
    module = load_script("mlm_throughput.py")
    monkeypatch.setattr(module.common, "native_bf16", lambda: False)
    assert module.default_sides("auto") == ["domainbert", "hf"]
    assert module.default_sides("fp32") == ["domainbert", "hf", "hf_bf16"]  # asked for a precision: every side
    monkeypatch.setattr(module.common, "native_bf16", lambda: True)
    assert module.default_sides("auto") == ["domainbert", "hf", "hf_bf16"]


def test_distill_benchmark_names_the_flags_its_mfu_and_its_speedups(tiny_bert, isolated, capsys):
    returned, lines = run_main(load_script("distill_benchmark.py"), capsys, "--quick", "--model", str(tiny_bert))
    figures = dict(item.split("=", 1) for item in lines[-1].split())
    assert set(returned) == set(figures)
    assert lines[0].startswith(f"# machine: flags {figures['isa']}"), lines[0]
    for key in ("teacher_mfu_b32", "student_mfu_b32", "bf16_mfu_b32", "peak_tflops_fp32", "peak_tflops_bf16"):
        assert math.isfinite(float(figures[key])) and float(figures[key]) > 0, f"{key}={figures[key]}"
    assert "int8_mfu_b32" not in figures  # no int8 peak is probed: no int8 MFU
    assert any(line.startswith("----") for line in lines)
    for key in ("student_f1_ratio", "student_speedup_b32", "int8_speedup_b32", "bf16_speedup_b32"):
        assert float(figures[key]) > 0, key
    assert figures["faster_b32"] in ("int8", "bf16")


def test_in_process_runs_leave_the_global_state_as_they_found_it(isolated):
    """What ``isolated`` puts back: what a script's ``quiet`` and thread count change, and its modules."""
    import datasets
    import torch

    logging.getLogger("lightning.pytorch").setLevel(logging.INFO)  # (isolated puts these back as well)
    datasets.enable_progress_bars()
    before = GlobalState()
    module = load_script("common.py")
    module.quiet()
    module.set_threads(before.threads + 1)
    os.environ["PL_GLOBAL_SEED"] = "0"
    assert logging.getLogger("lightning.pytorch").level == logging.ERROR
    assert not datasets.is_progress_bar_enabled()
    before.restore()
    assert torch.get_num_threads() == before.threads
    assert dict(os.environ) == before.environ
    assert logging.getLogger("lightning.pytorch").level == logging.INFO
    assert GlobalState.progress_bars() == before.bars
    assert "benchmark_common" not in sys.modules


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_probe_peak_reports_every_shape(precision):
    import torch

    common = load_common()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        peak = common.probe_peak(precision, common.probe_shapes(quick=True), seconds=0.1)
    finally:
        torch.set_num_threads(threads)
    assert math.isfinite(peak["seconds"]) and peak["seconds"] > 0
    assert list(peak["by_shape"]) == [f"{common.QUICK_ROWS}x384x1536"]
    assert peak["tflops"] == max(peak["by_shape"].values()) > 0
    assert (peak["precision"], peak["threads"]) == (precision, 1)
    assert common.mfu(peak["tflops"] * 1e12 / 2, peak) == pytest.approx(0.5)
    assert math.isnan(common.mfu(1e9, None))


class FakeMatmuls:
    """Stands in for ``common._matmul_seconds`` and ``common.time``: each repetition takes ``cost`` seconds of a
    clock that only these matmuls move; ``calls`` holds each call's repetitions."""

    def __init__(self, cost: float) -> None:
        self.cost, self.now, self.calls = cost, 0.0, []

    def perf_counter(self) -> float:
        return self.now

    def __call__(self, a, b, out, reps: int) -> float:
        self.calls.append(reps)
        self.now += self.cost * reps
        return self.cost * reps


def test_probe_peak_keeps_to_its_budget_with_at_least_two_calls_a_shape(monkeypatch):
    common = load_common()
    shapes = [(8, 4, 4), (4, 4, 4)]
    fake = FakeMatmuls(cost=1e-3)
    monkeypatch.setattr(common, "_matmul_seconds", fake)
    monkeypatch.setattr(common, "time", fake)
    peak = common.probe_peak("fp32", shapes, seconds=1.0, trials=3)
    reps = int(1.0 / len(shapes) / 3 / 1e-3)  # a trial's share of the shape's share of the budget
    # per shape: an untimed call, one timed call, then the other trials while they fit in the shape's 0.5 s
    assert fake.calls == [1, 1, reps, reps] * 2
    assert peak["seconds"] == pytest.approx(fake.now) and peak["seconds"] <= 1.0
    assert peak["by_shape"] == {"8x4x4": pytest.approx(256 / 1e-3 / 1e12), "4x4x4": pytest.approx(128 / 1e-3 / 1e12)}
    assert (peak["shape"], peak["tflops"]) == ("8x4x4", peak["by_shape"]["8x4x4"])

    slow = FakeMatmuls(cost=10.0)  # one call is far over the budget: each shape still gets its two calls, no more
    monkeypatch.setattr(common, "_matmul_seconds", slow)
    monkeypatch.setattr(common, "time", slow)
    common.probe_peak("fp32", shapes, seconds=0.5, trials=5)
    assert slow.calls == [1, 1] * 2


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


def test_finetune_profile_prints_each_sides_operators_over_its_timed_window(tiny_bert, isolated, capsys):
    """``--profile N``: each side's N costliest operators over its timed window, its matrix products among them;
    domainbert's dropout masks (``random_``) are there, and gone from the side without dropout."""
    module = load_script("finetune_throughput.py")
    args = ["--quick", "--model", str(tiny_bert), "--threads", "1", "--sides", "domainbert,domainbert_dropout0,hf"]
    args += ["--profile", "60"]
    returned, lines = run_main(module, capsys, *args)
    check_figures("finetune_throughput.py", lines, returned)
    ops = {}
    for side in ("domainbert", "domainbert_dropout0", "hf"):
        at = lines.index(f"# {side}: operators over the timed window (profiled: its rate is not the benchmark's)")
        assert lines[at + 1].split() == ["operator", "calls", "self", "ms", "share"]
        body = itertools.takewhile(lambda line: re.fullmatch(r"\S.* +\d+ +[\d.]+ +[\d.]+", line), lines[at + 3 :])
        rows = [line.rsplit(None, 3) for line in body]
        names, shares = [row[0] for row in rows], [float(row[-1]) for row in rows]
        assert {"aten::mm", "aten::addmm"} <= set(names), names
        assert shares == sorted(shares, reverse=True) and 0 < sum(shares) <= 1.001, shares
        ops[side] = names
    assert "aten::random_" in ops["domainbert"] and "aten::random_" not in ops["domainbert_dropout0"]


def test_window_profile_covers_the_steps_after_the_warm_up_only():
    import torch

    common = load_common()
    window = common.WindowProfile(warmup=2, steps=1)
    x = torch.ones(64, 64)
    for op in (torch.tanh, torch.sigmoid, torch.exp, torch.neg):  # warm-up, warm-up, the window, after it
        op(x)
        window.tick()
    assert [row["operator"] for row in window.table(10)] == ["aten::exp"]
    assert common.WindowProfile(warmup=1, enabled=False).table(5) == []


def test_step_clock_times_the_warm_up_apart_from_the_timed_steps():
    common = load_common()
    clock = common.StepClock(warmup=2)
    clock.start = 10.0
    clock.times, clock.cpu, clock.counts = [11.0, 15.0, 16.0, 18.0], [0.0, 1.0, 2.0, 3.0], [8, 8, 8, 8]
    assert clock.warmup_seconds() == 5.0  # creation to the end of the second (last warm-up) step
    assert clock.seconds() == 3.0 and clock.rate() == 16 / 3.0
    assert math.isnan(common.StepClock(warmup=3).warmup_seconds())  # the warm-up never ended
    assert common.StepClock(warmup=0).warmup_seconds() == 0.0


def sentence_embedder(tiny_bert: Path, out: Path) -> Path:
    """``tiny_bert`` as a sentence-transformers folder with mean pooling, as all-MiniLM-L6-v2 (the default) is."""
    out.mkdir()
    for f in tiny_bert.iterdir():
        if f.is_file():
            (out / f.name).write_bytes(f.read_bytes())
    (out / "1_Pooling").mkdir()
    (out / "modules.json").write_text(
        '[{"idx": 1, "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]'
    )
    (out / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}')
    return out


def test_serving_runs_on_a_mean_pooling_teacher_without_remote_code(tiny_bert, tmp_path, isolated, capsys, monkeypatch):
    """The default model is a sentence embedder: its seeded teacher and every variant are mean-pooling exports,
    whose config plain transformers loads only with ``trust_remote_code`` (it would ask on stdin). The script loads
    them as domainbert does, so it never asks."""
    model = sentence_embedder(tiny_bert, tmp_path / "st")
    monkeypatch.setattr("sys.stdin", None)  # any prompt for trust_remote_code fails instead of waiting
    asked: list[str] = []
    monkeypatch.setattr("builtins.input", lambda prompt="": asked.append(prompt) or "")  # transformers' prompt
    module = load_script("inference_latency.py")
    returned, lines = run_main(module, capsys, "--quick", "--model", str(model), "--threads", "1")
    check_figures("inference_latency.py", lines, returned)
    assert asked == []
    assert any("has no head over the" in line for line in lines)  # the seeded mean-pooling teacher was built
