"""Fast CPU dropout (domainbert.core.cpu_dropout) and the fused default AdamW (domainbert.core.optim)."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from transformers import AutoModelForMaskedLM, AutoTokenizer
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from domainbert.core import cpu_dropout as cd
from domainbert.core.cpu_dropout import ATTENTION, CpuDropout, attention, cpu_dropout, keep_mask, use_cpu_dropout
from domainbert.core.optim import build_optimizer, fused_ok
from domainbert.modules.base import HFModule
from tests.helpers.tiny import FAMILIES

P = 0.1
#: ALBERT's defaults drop nothing; it gets dropout here so that its train-mode forward takes the fast path
DROPOUT = {"albert": {"hidden_dropout_prob": P, "attention_probs_dropout_prob": P}}


def _seeded(fn, seed=0):
    torch.manual_seed(seed)
    return fn()


# -- keep_mask ------------------------------------------------------------------------------------------------------


def test_keep_mask_keeps_one_minus_p_in_every_field_of_a_word():
    torch.manual_seed(0)  # the bounds are over five standard deviations wide; seeded all the same
    assert abs(keep_mask((1_000_000,), P).float().mean().item() - (1 - P)) < 0.002
    half = keep_mask((1_000_000,), 0.5).float()
    for field in range(4):  # each 16-bit field of a 64-bit random word is uniform, not only the low ones
        assert abs(half[field::4].mean().item() - 0.5) < 0.005
    assert abs((half[0::2] * half[1::2]).mean().item() - 0.25) < 0.004  # neighbours are independent


def test_keep_mask_shape_dtype_extremes_and_seeds():
    mask = keep_mask((3, 5, 7), P)  # 105 elements: not a multiple of four
    assert mask.shape == (3, 5, 7) and mask.dtype == torch.bool
    assert keep_mask((1000,), 0.0).all() and not keep_mask((1000,), 0.99999).all()
    assert torch.equal(_seeded(lambda: keep_mask((4096,), P)), _seeded(lambda: keep_mask((4096,), P)))
    assert not torch.equal(_seeded(lambda: keep_mask((4096,), P)), _seeded(lambda: keep_mask((4096,), P), 1))


def test_keep_mask_at_one_keeps_nothing():
    assert not keep_mask((1000,), 1.0).any()


# -- cpu_dropout and CpuDropout -------------------------------------------------------------------------------------


def test_cpu_dropout_off_in_eval_and_at_zero():
    x = torch.randn(8, 16)
    assert torch.equal(cpu_dropout(x, P, training=False), x)
    assert torch.equal(cpu_dropout(x, 0.0, training=True), x)
    assert torch.equal(cpu_dropout(x, 1.0), torch.zeros_like(x))


def test_cpu_dropout_is_x_times_keep_mask_over_one_minus_p_and_keeps_the_mean():
    x = torch.randn(64, 33)
    expected = x * _seeded(lambda: keep_mask(x.shape, P)) / (1 - P)
    assert torch.allclose(_seeded(lambda: cpu_dropout(x, P)), expected, atol=0, rtol=1e-6)
    assert abs(_seeded(lambda: cpu_dropout(torch.ones(1_000_000), P)).mean().item() - 1.0) < 0.003


def test_cpu_dropout_gradient_is_the_scaled_mask():
    x = torch.randn(32, 32, requires_grad=True)
    _seeded(lambda: cpu_dropout(x, P)).sum().backward()
    assert torch.allclose(x.grad, _seeded(lambda: keep_mask(x.shape, P)).float() / (1 - P))


def test_cpu_dropout_module_follows_train_and_eval():
    layer, x = CpuDropout(P), torch.randn(16, 16)
    assert isinstance(layer, nn.Dropout) and layer.p == P
    assert torch.equal(_seeded(lambda: layer(x)), _seeded(lambda: cpu_dropout(x, P)))
    assert torch.equal(layer.eval()(x), x)


# -- the attention function -----------------------------------------------------------------------------------------


class _Attn(nn.Module):
    def __init__(self, is_causal: bool = False):
        super().__init__()
        self.is_causal = is_causal


def _qkv_mask():
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 2, 5, 4, generator=gen) for _ in range(3))
    mask = torch.ones(2, 1, 5, 5, dtype=torch.bool)
    mask[1, ..., 3:] = False  # the second sequence's last two keys are padding
    return q, k, v, mask


def _by_hand(q, k, v, mask, p):
    scores = (q @ k.transpose(2, 3)) * q.size(-1) ** -0.5
    weights = torch.softmax(scores.masked_fill(~mask, torch.finfo(q.dtype).min), dim=-1)
    if p:
        weights = weights * keep_mask(weights.shape, p)  # returned as kept, not rescaled
    return (weights @ v / (1 - p)).transpose(1, 2), weights


def test_attention_while_training_is_eager_with_cpu_dropout():
    q, k, v, mask = _qkv_mask()
    out, weights = _seeded(lambda: attention(_Attn().train(), q, k, v, mask, dropout=P))
    want_out, want_weights = _seeded(lambda: _by_hand(q, k, v, mask, P))
    assert out.shape == (2, 5, 2, 4)
    assert torch.allclose(out, want_out, atol=1e-6) and torch.allclose(weights, want_weights, atol=1e-6)
    assert (weights[1, ..., 3:] == 0).all()  # padding gets no attention
    additive = torch.zeros(mask.shape).masked_fill(~mask, torch.finfo(q.dtype).min)
    assert torch.allclose(_seeded(lambda: attention(_Attn().train(), q, k, v, additive, dropout=P))[0], out)
    # the hand computation masks as sdpa does
    sdpa_out = sdpa_attention_forward(_Attn(), q, k, v, mask)[0]
    assert torch.allclose(_by_hand(q, k, v, mask, 0.0)[0], sdpa_out, atol=1e-6)


def test_attention_under_bf16_autocast_drops_bf16_probabilities():
    q, k, v, mask = _qkv_mask()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, weights = _seeded(lambda: attention(_Attn().train(), *(t.bfloat16() for t in (q, k, v)), mask, dropout=P))
    want_out, want_weights = _seeded(lambda: _by_hand(q, k, v, mask, P))
    assert weights.dtype == out.dtype == torch.bfloat16  # no float32 copy of the probabilities
    assert torch.allclose(weights.float(), want_weights, atol=1e-2) and torch.allclose(out.float(), want_out, atol=5e-2)


def test_attention_while_training_without_dropout_is_eager_and_equals_sdpa():
    # under bf16 autocast sdpa's CPU backward is the slow one: training attends eagerly even at dropout 0
    q, k, v, mask = _qkv_mask()
    out, weights = attention(_Attn().train(), q, k, v, mask, dropout=0.0)
    want_out, want_weights = _by_hand(q, k, v, mask, 0.0)
    assert weights is not None and torch.allclose(weights, want_weights, atol=1e-6)
    assert torch.allclose(out, want_out, atol=1e-6)
    assert torch.allclose(out, sdpa_attention_forward(_Attn(), q, k, v, mask)[0], atol=1e-6)


def test_attention_that_drops_everything_gives_zeros():
    q, k, v, mask = _qkv_mask()
    out, weights = attention(_Attn().train(), q, k, v, mask, dropout=1.0)
    assert torch.equal(out, torch.zeros_like(out)) and torch.equal(weights, torch.zeros_like(weights))


@pytest.mark.parametrize("dropout", [0.0, P])
def test_attention_in_eval_is_sdpa(dropout):
    q, k, v, mask = _qkv_mask()
    got = _seeded(lambda: attention(_Attn().eval(), q, k, v, mask, dropout=dropout))
    want = _seeded(lambda: sdpa_attention_forward(_Attn(), q, k, v, mask, dropout=dropout))
    assert got[1] is None and torch.equal(got[0], want[0])


def test_causal_attention_is_sdpa_even_while_training():
    q, k, v, _ = _qkv_mask()
    got = _seeded(lambda: attention(_Attn(is_causal=True).train(), q, k, v, None, dropout=P))
    want = _seeded(lambda: sdpa_attention_forward(_Attn(is_causal=True), q, k, v, None, dropout=P))
    assert got[1] is None and torch.equal(got[0], want[0])
    flagged = _seeded(lambda: attention(_Attn().train(), q, k, v, None, dropout=P, is_causal=True))
    assert flagged[1] is None and torch.equal(flagged[0], want[0])


# -- use_cpu_dropout on every tiny family ---------------------------------------------------------------------------


def _batch(folder):
    tok = AutoTokenizer.from_pretrained(folder)
    batch = tok(["the package installs cleanly", "a longer line of text about the tests"], padding=True)
    batch = {k: torch.tensor(v) for k, v in batch.items() if k in ("input_ids", "attention_mask")}
    assert not batch["attention_mask"].all()  # one row is padded, so attention sees a mask
    return batch


def _dropout_ps(model, cls):
    return [m.p for m in model.modules() if type(m) is cls]


@pytest.mark.parametrize("family", FAMILIES)
def test_use_cpu_dropout_swaps_without_changing_the_model(family, tiny_models, tmp_path, monkeypatch):
    folder = tiny_models[family]
    model = AutoModelForMaskedLM.from_pretrained(folder, **DROPOUT.get(family, {})).eval()
    batch = _batch(folder)
    before_ps, before_state = _dropout_ps(model, nn.Dropout), model.state_dict()
    with torch.no_grad():
        before_out = model(**batch).logits
    assert use_cpu_dropout(model) == len(before_ps) > 0
    assert _dropout_ps(model, nn.Dropout) == [] and _dropout_ps(model, CpuDropout) == before_ps
    after_state = model.state_dict()
    assert list(after_state) == list(before_state)
    assert all(torch.equal(after_state[name], t) for name, t in before_state.items())
    assert model.config._attn_implementation == ATTENTION
    assert not any(m.training for m in model.modules())  # the swap kept the model in eval mode
    with torch.no_grad():
        assert torch.allclose(model(**batch).logits, before_out, atol=1e-6, rtol=0)

    shapes = []
    monkeypatch.setattr(cd, "keep_mask", lambda shape, p: shapes.append(tuple(shape)) or keep_mask(shape, p))
    model.train()
    loss = _seeded(lambda: model(**batch, labels=batch["input_ids"]).loss)
    loss.backward()
    assert torch.isfinite(loss) and all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    assert sum(len(s) == 4 for s in shapes) == model.config.num_hidden_layers  # attention probs: the fast path
    assert torch.equal(_seeded(lambda: model(**batch, labels=batch["input_ids"]).loss), loss)  # seeded masks

    model.save_pretrained(tmp_path)
    assert ATTENTION not in (tmp_path / "config.json").read_text()


def test_use_cpu_dropout_keeps_each_module_s_mode(tiny_bert):
    """A frozen model in eval mode (a distillation teacher) must not start dropping when its dropouts are swapped."""
    model = AutoModelForMaskedLM.from_pretrained(tiny_bert).eval()
    use_cpu_dropout(model)
    assert not any(m.training for m in model.modules())


def test_use_cpu_dropout_keeps_eager_attention(tiny_bert):
    model = AutoModelForMaskedLM.from_pretrained(tiny_bert, attn_implementation="eager")
    assert use_cpu_dropout(model) > 0
    assert model.config._attn_implementation == "eager"


@pytest.mark.parametrize(("env", "swapped"), [(None, True), ("1", True), ("0", False)])
def test_on_fit_start_swaps_unless_turned_off(env, swapped, tiny_bert, monkeypatch):
    if env is None:
        monkeypatch.delenv("DOMAINBERT_CPU_DROPOUT", raising=False)
    else:
        monkeypatch.setenv("DOMAINBERT_CPU_DROPOUT", env)
    calls = []  # on the CPU, on_fit_start also keeps freed memory, whatever the dropout setting
    monkeypatch.setattr("domainbert.core.cpu_memory.keep_freed_memory", lambda: calls.append(1) or True)
    module = HFModule()
    module.model = AutoModelForMaskedLM.from_pretrained(tiny_bert)
    module.on_fit_start()
    assert bool(_dropout_ps(module, CpuDropout)) is swapped and bool(_dropout_ps(module, nn.Dropout)) is not swapped
    assert calls == [1]


# -- fused_ok and build_optimizer -----------------------------------------------------------------------------------


def _groups(seed=0):
    gen = torch.Generator().manual_seed(seed)
    params = [nn.Parameter(torch.randn(7, 5, generator=gen)), nn.Parameter(torch.randn(5, generator=gen))]
    return [
        {"params": params[:1], "names": ["w"], "lr": 1e-2, "weight_decay": 0.01},
        {"params": params[1:], "names": ["b"], "lr": 1e-2, "weight_decay": 0.0},
    ]


def test_fused_ok_needs_float_params_on_one_device_kind():
    assert fused_ok(_groups())
    assert not fused_ok([]) and not fused_ok([{"params": []}])
    assert not fused_ok(_groups() + [{"params": [torch.zeros(3, device="meta")]}])
    assert not fused_ok([{"params": [torch.zeros(3, dtype=torch.int64)]}])


def test_default_optimizer_is_fused_adamw_and_an_injected_one_is_used():
    opt = build_optimizer(None, _groups())
    assert type(opt) is torch.optim.AdamW and opt.defaults["fused"] is True
    assert [g["lr"] for g in opt.param_groups] == [1e-2, 1e-2]
    assert not build_optimizer(None, _groups(), fused=False).defaults["fused"]
    seen = []
    sgd = build_optimizer(lambda groups: seen.append(groups) or torch.optim.SGD(groups, lr=0.5), _groups())
    assert type(sgd) is torch.optim.SGD and [g["weight_decay"] for g in sgd.param_groups] == [0.01, 0.0]
    assert all("names" not in g for g in seen[0])  # names are for logging, not for the optimizer


def test_fused_step_equals_the_plain_adamw_step():
    fused_groups, plain_groups = _groups(), _groups()
    fused = build_optimizer(None, fused_groups)
    plain = torch.optim.AdamW([{k: v for k, v in g.items() if k != "names"} for g in plain_groups], foreach=False)
    gen = torch.Generator().manual_seed(1)
    for _ in range(3):
        for fg, pg in zip(fused_groups, plain_groups, strict=True):
            for fp, pp in zip(fg["params"], pg["params"], strict=True):
                fp.grad = torch.randn(fp.shape, generator=gen)
                pp.grad = fp.grad.clone()
        fused.step()
        plain.step()
    for fg, pg, start in zip(fused_groups, plain_groups, _groups(), strict=True):
        for fp, pp, p0 in zip(fg["params"], pg["params"], start["params"], strict=True):
            assert torch.allclose(fp, pp, atol=1e-6, rtol=0) and not torch.allclose(fp, p0, atol=1e-3)


def test_a_resumed_unfused_checkpoint_keeps_the_fused_kernel_and_its_state():
    groups = _groups()
    old = torch.optim.AdamW([{k: v for k, v in g.items() if k != "names"} for g in groups])  # foreach, not fused
    for g in groups:
        for p in g["params"]:
            p.grad = torch.ones_like(p)
    old.step()
    saved = old.state_dict()
    assert saved["param_groups"][0]["fused"] is None
    new = build_optimizer(None, _groups())
    new.load_state_dict(saved)
    assert [g["fused"] for g in new.param_groups] == [True, True]  # the kernel of this run, not the checkpoint's
    assert saved["param_groups"][0]["fused"] is None  # the checkpoint itself is left as it was
    assert [g["weight_decay"] for g in new.param_groups] == [0.01, 0.0]
    first = next(iter(new.state.values()))
    assert float(first["step"]) == 1.0 and torch.count_nonzero(first["exp_avg"]) > 0  # the moments came along
