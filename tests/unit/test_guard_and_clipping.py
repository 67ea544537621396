"""The guard's check of the gradients, and gradient clipping with the fused AdamW.

Covers ``TrainingGuard.on_before_optimizer_step`` (whether every gradient is finite: through their sums on a CPU,
confirmed element by element when a sum overflows) and, in :class:`~domainbert.modules.base.HFModule`,
``configure_optimizers`` (no fused AdamW under a gradient scaler with clipping on) and
``configure_gradient_clipping`` (clips a fused optimizer's gradients itself where nothing is scaled; else
Lightning's own clipping).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import lightning.pytorch as L
import pytest
import torch
from lightning.pytorch.plugins.precision import MixedPrecision, Precision
from lightning.pytorch.utilities import GradClipAlgorithmType

from domainbert.core.callbacks import TrainingGuard
from domainbert.errors import DomainBertError
from domainbert.modules.classification import SequenceClassificationModule

LABELS = ["api", "graphics", "network"]

# -- TrainingGuard: the check of the gradients ------------------------------------------------------------


class _Logged:
    """A stand-in LightningModule that records what it logs."""

    def __init__(self) -> None:
        self.logged: list[tuple[str, float]] = []

    def log(self, name: str, value: float) -> None:
        self.logged.append((name, value))


def _optimizer(**grads: torch.Tensor) -> torch.optim.Optimizer:
    """An SGD over one parameter per gradient in ``grads`` (a None gradient: a parameter without one)."""
    params = []
    for g in grads.values():
        p = torch.nn.Parameter(torch.zeros(g.shape, dtype=g.dtype))
        p.grad = g.clone()
        params.append(p)
    params.append(torch.nn.Parameter(torch.zeros(3)))  # no gradient: frozen, or unused this step
    return torch.optim.SGD([{"params": params[:1]}, {"params": params[1:]}], lr=0.1)


def _grads(optimizer) -> list[torch.Tensor | None]:
    return [p.grad for g in optimizer.param_groups for p in g["params"]]


def _step(guard: TrainingGuard, optimizer) -> _Logged:
    module = _Logged()
    guard.on_before_optimizer_step(SimpleNamespace(global_step=7, checkpoint_callbacks=[]), module, optimizer)
    return module


def _healthy() -> dict[str, torch.Tensor]:
    """Finite gradients of several sizes and dtypes, some very large, one of them zero-dimensional."""
    gen = torch.Generator().manual_seed(0)
    return {
        "big": torch.randn(10_001, generator=gen) * 1e30,
        "matrix": torch.randn(33, 17, generator=gen),
        "half": torch.randn(5, generator=gen).to(torch.bfloat16),
        "scalar": torch.tensor(-3.0),
    }


def _poisoned(where: str, value: float) -> dict[str, torch.Tensor]:
    grads = _healthy()
    bad = grads[where].clone()
    bad.view(-1)[bad.numel() // 2] = value  # one element, in the middle of the tensor
    grads[where] = bad
    return grads


@pytest.mark.parametrize("nonfinite", ["stop", "skip"])
def test_finite_gradients_pass_the_guard_untouched(nonfinite):
    opt = _optimizer(**_healthy())
    before = [None if g is None else g.clone() for g in _grads(opt)]
    guard = TrainingGuard(nonfinite=nonfinite, release_memory=False)
    module = _step(guard, opt)
    for got, want in zip(_grads(opt), before, strict=True):
        assert (got is None) == (want is None)
        if want is not None:
            assert torch.equal(got, want)
    assert guard.skipped == 0 and module.logged == []


def test_a_gradient_with_no_elements_is_left_out_of_the_check():
    opt = _optimizer(empty=torch.zeros(0), matrix=torch.ones(2, 2))
    guard = TrainingGuard(nonfinite="stop", release_memory=False)
    assert _step(guard, opt).logged == [] and guard.skipped == 0  # an empty gradient is left out of the check
    poisoned = _optimizer(empty=torch.zeros(0), matrix=torch.tensor([[1.0, math.nan]]))
    with pytest.raises(DomainBertError, match="non-finite"):
        _step(guard, poisoned)


BAD = [(where, value) for where in ("big", "matrix", "half", "scalar") for value in (math.nan, math.inf, -math.inf)]


@pytest.mark.parametrize(("where", "value"), BAD, ids=[f"{w}-{v}" for w, v in BAD])
def test_one_non_finite_gradient_skips_the_step_with_skip(where, value):
    opt = _optimizer(**_poisoned(where, value))
    guard = TrainingGuard(nonfinite="skip", release_memory=False)
    module = _step(guard, opt)
    assert _grads(opt) == [None] * len(_grads(opt))
    assert guard.skipped == 1 and module.logged == [("train/skipped_steps", 1.0)]
    opt2 = _optimizer(**_poisoned("matrix", math.nan))
    _step(guard, opt2)
    assert guard.skipped == 2


@pytest.mark.parametrize(("where", "value"), BAD, ids=[f"{w}-{v}" for w, v in BAD])
def test_one_non_finite_gradient_stops_training_with_stop(where, value):
    opt = _optimizer(**_poisoned(where, value))
    with pytest.raises(DomainBertError, match=r"non-finite loss or gradients at step 7; last good checkpoint: none"):
        _step(TrainingGuard(nonfinite="stop", release_memory=False), opt)


def test_ignore_leaves_non_finite_gradients_alone():
    opt = _optimizer(**_poisoned("matrix", math.nan))
    guard = TrainingGuard(nonfinite="ignore", release_memory=False)
    _step(guard, opt)
    assert torch.isnan(_grads(opt)[1]).any() and guard.skipped == 0


# -- HFModule: the optimizer and gradient clipping ------------------------------------------------------------


@pytest.fixture(scope="module")
def module(tiny_bert):
    torch.manual_seed(0)
    return SequenceClassificationModule(str(tiny_bert), label_names=LABELS)


def _attach(module, plugin, clip=None, algorithm=None, steps=10) -> None:
    module._trainer = SimpleNamespace(
        estimated_stepping_batches=steps,
        gradient_clip_val=clip,
        gradient_clip_algorithm=algorithm,
        precision_plugin=plugin,
    )


def _sixteen() -> MixedPrecision:
    return MixedPrecision("16-mixed", "cpu")


PLUGINS = {"32-true": Precision, "bf16-mixed": lambda: MixedPrecision("bf16-mixed", "cpu"), "16-mixed": _sixteen}


@pytest.mark.parametrize(
    ("precision", "clip", "fused"),
    [
        ("16-mixed", 1.0, False),  # Lightning unscales only unfused gradients before clipping and the guard
        ("16-mixed", None, False),
        ("16-mixed", 0, False),
        ("bf16-mixed", 1.0, True),
        ("32-true", 1.0, True),
        ("32-true", None, True),
    ],
)
def test_the_default_adamw_is_fused_unless_gradients_are_scaled(module, precision, clip, fused):
    plugin = PLUGINS[precision]()
    assert (getattr(plugin, "scaler", None) is not None) == (precision == "16-mixed")
    _attach(module, plugin, clip=clip)
    try:
        opt = module.configure_optimizers()["optimizer"]
    finally:
        module._trainer = None
    assert isinstance(opt, torch.optim.AdamW)
    assert bool(opt.defaults["fused"]) is fused
    assert bool(getattr(opt, "_step_supports_amp_scaling", False)) is fused


def _fill_grads(module, scale: float = 10.0) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(1)
    params = [p for p in module.parameters() if p.requires_grad]
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen) * scale
    return params


def _adamw(module, fused: bool) -> torch.optim.AdamW:
    return torch.optim.AdamW([p for p in module.parameters() if p.requires_grad], lr=1e-3, fused=fused or None)


def _clip_fused(module, precision: str, clip: float, algorithm) -> None:
    """Clip ``module``'s gradients through its own hook, with a fused AdamW and a trainer of ``precision``."""
    opt = _adamw(module, fused=True)
    _attach(module, PLUGINS[precision](), clip=clip, algorithm=algorithm)
    try:
        module.configure_gradient_clipping(opt, clip, algorithm)
    finally:
        module._trainer = None


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_a_fused_optimizers_gradients_are_clipped_to_the_norm(module, precision):
    params = _fill_grads(module)
    before = [p.grad.clone() for p in params]
    norm = float(torch.nn.utils.get_total_norm(before))
    assert norm > 1.0
    _clip_fused(module, precision, 1.0, GradClipAlgorithmType.NORM)
    assert float(torch.nn.utils.get_total_norm([p.grad for p in params])) == pytest.approx(1.0, rel=1e-4)
    for p, g in zip(params, before, strict=True):  # scaled as one, the direction kept
        torch.testing.assert_close(p.grad, g / norm, rtol=1e-4, atol=1e-9)


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_a_fused_optimizers_gradients_are_clipped_by_value(module, precision):
    params = _fill_grads(module)
    before = [p.grad.clone() for p in params]
    assert max(float(g.abs().max()) for g in before) > 0.5
    _clip_fused(module, precision, 0.5, GradClipAlgorithmType.VALUE)
    for p, g in zip(params, before, strict=True):
        torch.testing.assert_close(p.grad, g.clamp(-0.5, 0.5))


def test_lightning_alone_refuses_to_clip_for_a_fused_optimizer_under_bf16(module):
    """Why the override exists: Lightning's mixed-precision plugin raises even where no gradient is scaled."""
    _fill_grads(module)
    _attach(module, PLUGINS["bf16-mixed"](), clip=1.0, algorithm=GradClipAlgorithmType.NORM)
    try:
        with pytest.raises(RuntimeError, match="does not allow for gradient clipping"):
            L.LightningModule.configure_gradient_clipping(module, _adamw(module, fused=True), 1.0, "norm")
    finally:
        module._trainer = None


@pytest.mark.parametrize(
    ("fused", "precision", "clip"),
    [
        (False, "32-true", 1.0),  # a plain AdamW: Lightning clips
        (False, "bf16-mixed", 1.0),
        (False, "16-mixed", 1.0),
        (True, "16-mixed", 1.0),  # a scaler: Lightning's (which refuses); configure_optimizers avoids this pair
        (True, "32-true", None),  # no clipping asked for
        (True, "32-true", 0.0),
    ],
)
def test_other_cases_defer_to_lightnings_clipping(module, monkeypatch, fused, precision, clip):
    calls = []
    monkeypatch.setattr(L.LightningModule, "configure_gradient_clipping", lambda self, *a: calls.append(a))
    params = _fill_grads(module)
    before = [p.grad.clone() for p in params]
    opt = _adamw(module, fused=fused)
    _attach(module, PLUGINS[precision](), clip=clip, algorithm=GradClipAlgorithmType.NORM)
    try:
        module.configure_gradient_clipping(opt, clip, GradClipAlgorithmType.NORM)
    finally:
        module._trainer = None
    assert calls == [(opt, clip, GradClipAlgorithmType.NORM)]
    assert all(torch.equal(p.grad, g) for p, g in zip(params, before, strict=True))  # nothing clipped here


def test_lightnings_clipping_of_a_plain_adamw_still_clips(module):
    params = _fill_grads(module)
    _attach(module, PLUGINS["bf16-mixed"](), clip=1.0, algorithm=GradClipAlgorithmType.NORM)
    try:
        module.configure_gradient_clipping(_adamw(module, fused=False), 1.0, GradClipAlgorithmType.NORM)
    finally:
        module._trainer = None
    assert float(torch.nn.utils.get_total_norm([p.grad for p in params])) == pytest.approx(1.0, rel=1e-4)


def test_a_finite_gradient_whose_sum_overflows_passes_the_guard():
    opt = _optimizer(huge=torch.full((4,), 3e38), matrix=torch.ones(2, 2))  # float32 sum: inf
    guard = TrainingGuard(nonfinite="skip", release_memory=False)
    assert _step(guard, opt).logged == [] and guard.skipped == 0
    assert all(g is None or torch.isfinite(g).all() for g in _grads(opt))


# -- divergence ---------------------------------------------------------------------------------------------


def _guarded_fit(losses: list[float], nonfinite: str = "ignore") -> tuple[TrainingGuard, SimpleNamespace]:
    """A guard that saw these training losses, one a step, and the end of training (no model)."""
    guard = TrainingGuard(nonfinite=nonfinite, reseed_every_step=False, release_memory=False)
    trainer = SimpleNamespace(global_step=0, is_global_zero=True, checkpoint_callbacks=[])
    guard.on_fit_start(trainer, None)
    for loss in losses:
        trainer.global_step += 1
        guard.on_train_batch_end(trainer, None, {"loss": torch.tensor(loss)}, None, 0)
    guard.on_train_end(trainer, None)
    return guard, trainer


def test_a_loss_that_rose_by_orders_of_magnitude_is_a_divergence_said_after_the_fit(capsys):
    guard, trainer = _guarded_fit([1.1, 4.0, 3.0e5, 1.2e8])
    assert guard.divergence == "the training loss rose from 1.1 at step 1 to 1.2e+08 at step 4 (1.09e+08 times)"
    guard.on_fit_end(trainer, None)
    said = capsys.readouterr().out.strip()
    assert said.startswith(f"Training diverged: {guard.divergence}. ") and "--model.learning_rate" in said
    assert "\n" not in said


def test_a_non_finite_last_loss_is_a_divergence_when_the_guard_lets_it_through():
    guard, _ = _guarded_fit([0.7, float("inf")])
    assert guard.divergence == "the training loss is inf at step 2 (it was 0.7 at step 1)"


@pytest.mark.parametrize(
    "losses",
    [[1.1, 0.4, 0.02], [1.1, 2.5, 90.0], [0.001, 0.5], [0.0, 0.3]],
    ids=["falling", "rising-under-100x", "small-but-100x", "from-zero"],
)
def test_a_loss_that_fell_or_rose_less_is_no_divergence(losses, capsys):
    guard, trainer = _guarded_fit(losses)
    guard.on_fit_end(trainer, None)
    assert guard.divergence is None and capsys.readouterr().out == ""
