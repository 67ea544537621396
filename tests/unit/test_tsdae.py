"""TSDAE: the deletion noise, the decoder tied to the encoder, the loss by hand, the pooled vector as the only memory,
the head warm-up's settings and learning rates.

Fits, the export and the pipeline stage are in tests/integration/test_tsdae_fit.py.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from domainbert.core.embed import mean_pool
from domainbert.core.seeding import step_generator
from domainbert.data.denoise import Deleter, compact, delete_tokens
from domainbert.errors import DomainBertError
from domainbert.modules.base import HFModule
from domainbert.modules.tsdae import TsdaeModule
from tests.helpers.mlm import fixed_batch, small_corpus

FAMILIES_WITH_DECODER = ("bert", "roberta", "electra")


@pytest.fixture(scope="module")
def modules(tiny_models) -> dict[str, TsdaeModule]:
    """One TSDAE module per family with a causal-LM class, mean-pooled."""
    return {f: TsdaeModule(str(tiny_models[f]), pooling="mean") for f in FAMILIES_WITH_DECODER}


def _batch(module: TsdaeModule, corpus_file) -> dict:
    return fixed_batch(small_corpus(module, corpus_file, packing=False))


def _rows(n: int = 64, length: int = 100) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``n`` rows of ``[CLS] text... [SEP] pad...`` (ids 2 and 3 special, 0 padding), of lengths 3 to ``length``."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 200, (n, length), generator=g)
    mask = torch.zeros(n, length, dtype=torch.long)
    for i in range(n):
        k = 3 + (i * 7) % (length - 2)
        mask[i, :k] = 1
        ids[i, 0], ids[i, k - 1] = 2, 3
    ids[mask == 0] = 0
    return ids, mask, torch.isin(ids, torch.tensor([0, 2, 3]))


# -- deletion noise ---------------------------------------------------------------------------------
def test_deletion_removes_about_the_ratio_and_keeps_every_special_token():
    ids, mask, special = _rows()
    kept = delete_tokens(ids, mask, special, 0.6, step_generator(0, 0))
    text = mask.bool() & ~special
    share = (kept & text).sum() / text.sum()
    assert abs(float(share) - 0.4) < 0.03, f"kept {float(share):.3f} of the text tokens, expected about 0.4"
    assert torch.equal(kept & special & mask.bool(), special & mask.bool()), "special tokens are never deleted"
    assert not (kept & ~mask.bool()).any(), "padding is never kept"


def test_every_text_keeps_at_least_one_of_its_tokens():
    ids, mask, special = _rows()
    kept = delete_tokens(ids, mask, special, 0.9999, step_generator(0, 0))
    text = mask.bool() & ~special
    assert ((kept & text).sum(dim=1) == 1).all(), "each row lost all its tokens but one, drawn at random"


def test_the_noisy_batch_keeps_the_surviving_tokens_in_order_and_pads_the_rest():
    ids = torch.tensor([[2, 10, 11, 12, 3], [2, 20, 3, 0, 0]])
    mask = (ids != 0).long()
    kept = torch.tensor([[1, 0, 1, 0, 1], [1, 1, 1, 0, 0]]).bool()
    out = compact({"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}, kept, 0)
    assert out["input_ids"].tolist() == [[2, 11, 3], [2, 20, 3]]
    assert out["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 1]]
    assert out["token_type_ids"].shape == (2, 3)


def test_the_noise_is_the_same_for_a_seed_and_step_and_fresh_at_each_step(modules, corpus_file):
    module = modules["bert"]
    batch = _batch(module, corpus_file)
    first, again, later = module.noisy(batch, 5), module.noisy(batch, 5), module.noisy(batch, 6)
    assert torch.equal(first["input_ids"], again["input_ids"]), "reproducible from (seed, step)"
    assert not torch.equal(first["input_ids"], later["input_ids"]), "a fresh draw at the next step"
    module.hparams.seed = 1
    try:
        other_seed = module.noisy(batch, 5)
    finally:
        module.hparams.seed = 0
    assert not torch.equal(first["input_ids"], other_seed["input_ids"]), "another seed draws other noise"


def test_a_ratio_of_one_is_refused_in_one_line(modules):
    with pytest.raises(DomainBertError, match=r"^model.deletion_ratio=1.0: expected a share in \[0, 1\)$"):
        Deleter(modules["bert"].tokenizer, 1.0)


# -- the tied decoder -------------------------------------------------------------------------------
@pytest.mark.parametrize("fam", FAMILIES_WITH_DECODER)
def test_the_decoder_holds_the_encoders_own_tensors_but_its_cross_attention(modules, fam):
    module = modules[fam]
    encoder, base = dict(module.model.named_parameters()), dict(module.decoder.base_model.named_parameters())
    assert module.tied and all(base[name] is encoder[name] for name in module.tied)
    untied = sorted(set(base) - set(module.tied))
    assert untied and all("crossattention" in name for name in untied), untied
    assert module.decoder.get_output_embeddings().weight is module.model.get_input_embeddings().weight
    names = [n for n, _ in module.named_parameters()]
    assert len(names) == len(set(id(p) for p in module.parameters())), "the optimizer sees each tensor once"


def test_an_optimizer_step_moves_encoder_and_decoder_together(tiny_bert, corpus_file):
    module = TsdaeModule(str(tiny_bert), pooling="mean")
    batch = _batch(module, corpus_file)
    name = "encoder.layer.0.attention.self.query.weight"
    before = module.model.get_parameter(name).detach().clone()
    opt = torch.optim.SGD([p for p in module.parameters() if p.requires_grad], lr=1.0)
    module(batch, salt=0)["loss"].backward()
    opt.step()
    enc, dec = module.model.get_parameter(name), module.decoder.base_model.get_parameter(name)
    assert enc is dec and not torch.equal(enc.detach(), before), "one tensor, changed once for both"
    cross = module.decoder.base_model.get_parameter("encoder.layer.0.crossattention.self.value.weight")
    assert cross.grad is not None and cross.grad.abs().sum() > 0, "the cross-attention trains too"
    # one key: its softmax weight is 1 whatever the query, so the query and key projections get no gradient
    query = module.decoder.base_model.get_parameter("encoder.layer.0.crossattention.self.query.weight")
    assert query.grad is None or not query.grad.any()


@pytest.mark.parametrize("fam", ("distilbert", "albert"))
def test_a_family_without_a_causal_lm_is_refused_naming_its_model_type(tiny_models, fam):
    with pytest.raises(DomainBertError, match=rf"^TSDAE: model_type '{fam}' has no causal-LM class"):
        TsdaeModule(str(tiny_models[fam]))


# -- the loss and the decoder's only memory --------------------------------------------------------
@pytest.mark.parametrize("fam", FAMILIES_WITH_DECODER)
def test_the_loss_is_the_cross_entropy_of_the_original_tokens_by_hand(modules, corpus_file, fam):
    module = modules[fam].eval()
    try:
        batch = {k: v[:2] for k, v in _batch(module, corpus_file).items()}
        with torch.no_grad():
            got = module(batch, salt=7)
            noisy = module.noisy(batch, 7)
            pooled = mean_pool(module.model(**noisy).last_hidden_state, noisy["attention_mask"])
            ids, mask = batch["input_ids"], batch["attention_mask"]
            logits = module.decoder(
                ids[:, :-1], attention_mask=mask[:, :-1], encoder_hidden_states=pooled[:, None]
            ).logits
        total, count = 0.0, 0
        for row in range(ids.shape[0]):
            for t in range(ids.shape[1] - 1):
                if mask[row, t + 1]:  # the next token is a real one: a target
                    total -= float(F.log_softmax(logits[row, t].double(), dim=-1)[ids[row, t + 1]])
                    count += 1
        assert got["n"] == count == int(mask[:, 1:].sum())
        assert float(got["loss"]) == pytest.approx(total / count, rel=1e-5)
    finally:
        module.train()


def test_the_pooled_embedding_is_the_only_cross_attention_input(modules, corpus_file):
    module = modules["bert"].eval()
    seen = []
    crosses = [m for n, m in module.decoder.named_modules() if n.endswith("crossattention.self")]
    hooks = [m.register_forward_pre_hook(lambda _m, a, kw: seen.append(kw), with_kwargs=True) for m in crosses]
    try:
        batch = _batch(module, corpus_file)
        with torch.no_grad():
            module(batch, salt=3)
            pooled = module.embed(module.noisy(batch, 3))
    finally:
        for h in hooks:
            h.remove()
        module.train()
    assert len(seen) == len(crosses) == module.decoder.config.num_hidden_layers
    for kw in seen:
        memory = kw["encoder_hidden_states"]
        assert memory.shape == (batch["input_ids"].shape[0], 1, module.model.config.hidden_size)
        torch.testing.assert_close(memory, pooled[:, None, :], rtol=0, atol=0)
        assert kw.get("attention_mask") is None, "one always-visible key: nothing to mask"


def test_a_checkpoint_without_a_head_starts_it_from_the_embeddings(tiny_bert, tmp_path):
    from transformers import AutoModel, AutoTokenizer

    bare = tmp_path / "bare"
    AutoModel.from_pretrained(tiny_bert).save_pretrained(bare)
    AutoTokenizer.from_pretrained(tiny_bert).save_pretrained(bare)
    module = TsdaeModule(str(bare), pooling="mean")
    assert any(k.startswith("cls.predictions.transform") for k in module.head_missing), module.head_missing
    dense = module.decoder.cls.predictions.transform.dense
    torch.testing.assert_close(dense.weight, torch.eye(dense.weight.shape[0]), rtol=0, atol=0)
    assert module._init_head_from_data, "the output bias comes from the data at setup"
    assert TsdaeModule(str(tiny_bert)).pooling == "cls", "auto: cls without sentence-transformers files (the paper's)"


# -- the head warm-up (the fit that shows the encoder held still is in tests/integration/test_tsdae_fit.py) ---------
def test_a_100_step_head_warm_up_by_default_and_0_turns_it_off(tiny_bert):
    module = TsdaeModule(str(tiny_bert))
    assert module.hparams.head_warmup_steps is None and module.head_warmup_steps == 100
    assert TsdaeModule(str(tiny_bert), head_warmup_steps=0).head_warmup_steps == 0


def test_without_a_head_warm_up_the_optimizer_groups_and_schedule_are_the_plain_ones(tiny_bert):
    module = TsdaeModule(str(tiny_bert), head_warmup_steps=0)
    groups = module.trainable_groups()
    assert [g["names"] for g in groups] == [g["names"] for g in HFModule.trainable_groups(module)]
    assert all(f(step) == 1.0 for f in module.lr_lambdas(groups, 100) for step in (0, 1, 99)), "constant, no warm-up"


def test_in_the_warm_up_only_the_decoders_own_groups_learn_at_head_warmup_lr(tiny_bert):
    w, lr, head_lr = 3, 1e-4, 1e-2
    module = TsdaeModule(
        str(tiny_bert), learning_rate=lr, weight_decay=0.01, head_warmup_steps=w, head_warmup_lr=head_lr
    )
    groups = module.trainable_groups()
    own = {id(p) for p in module.decoder.parameters()} - {id(p) for p in module.model.parameters()}
    head = [all(id(p) in own for p in g["params"]) for g in groups]
    assert all(h or not any(id(p) in own for p in g["params"]) for h, g in zip(head, groups)), "no mixed group"
    assert sum(len(g["params"]) for g, h in zip(groups, head) if h) == len(own), "every own weight in a head group"
    for g, is_head, f in zip(groups, head, module.lr_lambdas(groups, 10)):
        got = [g["lr"] * f(step) for step in range(w + 2)]
        want = [head_lr if is_head else 0.0] * w + [lr] * 2
        assert got == pytest.approx(want, rel=1e-12, abs=0.0), (is_head, got)


def test_the_main_warm_up_and_decay_start_after_the_head_warm_up(tiny_bert):
    module = TsdaeModule(str(tiny_bert), head_warmup_steps=2, warmup_ratio=0.25, lr_schedule="linear")
    groups = module.trainable_groups()
    encoder = module.lr_lambdas(groups, 10)[[g["names"][0].startswith("model.") for g in groups].index(True)]
    # 8 steps after the warm-up: 2 of LR warm-up, then linear decay over the remaining 6 to 0 at step 10
    assert [encoder(s) for s in range(10)] == pytest.approx([0, 0, 0.5, 1, 1, 5 / 6, 4 / 6, 3 / 6, 2 / 6, 1 / 6])


@pytest.mark.parametrize("value", [-1, 2.5])
def test_a_bad_head_warmup_steps_is_refused_naming_the_option(tiny_bert, value):
    expected = rf"^model\.head_warmup_steps={value}: expected a whole number of steps >= 0, or null$"
    with pytest.raises(DomainBertError, match=expected):
        TsdaeModule(str(tiny_bert), head_warmup_steps=value)


class _Strategy:
    def __init__(self, ddp_kwargs):
        self._ddp_kwargs = ddp_kwargs


class _Trainer:
    def __init__(self, ddp_kwargs=None, world_size=1, steps=1000):
        self.strategy, self.world_size, self.estimated_stepping_batches = _Strategy(ddp_kwargs), world_size, steps


def _start(monkeypatch, module, trainer) -> None:
    monkeypatch.setattr(TsdaeModule, "trainer", property(lambda self: trainer))
    module.on_fit_start()


def test_a_head_warm_up_under_ddp_without_unused_parameters_is_refused_with_the_fix(tiny_bert, monkeypatch):
    module = TsdaeModule(str(tiny_bert), head_warmup_steps=5)
    with pytest.raises(DomainBertError, match="ddp_find_unused_parameters_true.*head_warmup_steps 0"):
        _start(monkeypatch, module, _Trainer(ddp_kwargs={}, world_size=2))
    _start(monkeypatch, module, _Trainer(ddp_kwargs={"find_unused_parameters": True}, world_size=2))
    _start(monkeypatch, TsdaeModule(str(tiny_bert), head_warmup_steps=0), _Trainer(ddp_kwargs={}, world_size=2))


def test_a_warm_up_that_covers_the_whole_run_is_warned_about(tiny_bert, monkeypatch, caplog):
    module = TsdaeModule(str(tiny_bert), head_warmup_steps=5)
    with caplog.at_level("WARNING", logger="domainbert.modules.head_warmup"):
        _start(monkeypatch, module, _Trainer(steps=10))
        assert not caplog.records
        _start(monkeypatch, module, _Trainer(steps=5))
    assert "covers the whole run (5 steps)" in caplog.text


def test_an_encoder_a_failed_fit_left_frozen_is_back_in_the_optimizer_groups(tiny_bert):
    module = TsdaeModule(str(tiny_bert), head_warmup_steps=5)
    every = sum(len(g["params"]) for g in module.trainable_groups())
    module.set_encoder_frozen(True)  # as a fit that died in its warm-up leaves it
    assert sum(len(g["params"]) for g in module.trainable_groups()) == every
