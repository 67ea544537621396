"""keep_freed_memory: large CPU tensors come from, and go back to, the heap instead of fresh mmaps."""

from __future__ import annotations

import pytest

from domainbert.core import cpu_memory


def test_the_environment_variable_leaves_malloc_alone(monkeypatch):
    monkeypatch.setattr(cpu_memory, "_applied", False)
    monkeypatch.setenv("DOMAINBERT_CPU_MALLOC", "0")
    monkeypatch.setattr(cpu_memory, "_glibc", lambda: pytest.fail("libc was called"))
    assert cpu_memory.keep_freed_memory() is False


def test_other_platforms_are_left_alone(monkeypatch):
    monkeypatch.setattr(cpu_memory, "_applied", False)
    monkeypatch.setattr(cpu_memory.sys, "platform", "darwin")
    assert cpu_memory.keep_freed_memory() is False


def _recorded(monkeypatch, applies: bool) -> list:
    """keep_freed_memory and malloc_trim replaced by recorders: ``keep``, then each trim's argument."""
    calls: list = []
    monkeypatch.setattr(cpu_memory, "keep_freed_memory", lambda: calls.append("keep") or applies)
    monkeypatch.setattr(cpu_memory, "malloc_trim", lambda: calls.append)
    return calls


def test_a_pass_reuses_freed_memory_and_hands_it_back_even_when_it_fails(monkeypatch):
    calls = _recorded(monkeypatch, applies=True)
    with pytest.raises(RuntimeError, match="boom"), cpu_memory.reusing_freed_memory("cpu"):
        calls.append("pass")
        raise RuntimeError("boom")
    assert calls == ["keep", "pass", 0]  # settings first, one full trim after the pass


def test_a_pass_on_another_device_or_without_the_settings_trims_nothing(monkeypatch):
    calls = _recorded(monkeypatch, applies=False)
    with cpu_memory.reusing_freed_memory("cuda"):
        calls.append("pass")
    with cpu_memory.reusing_freed_memory("cpu"):  # settings refused (DOMAINBERT_CPU_MALLOC=0, macOS, musl)
        calls.append("pass")
    assert calls == ["pass", "keep", "pass"]


def test_embedding_on_the_cpu_runs_as_one_such_pass(monkeypatch, tiny_bert):
    from transformers import AutoModel

    from domainbert.core.embed import embed_texts
    from domainbert.core.hf import load_model, load_tokenizer

    encoder, _ = load_model(AutoModel, str(tiny_bert))
    calls = _recorded(monkeypatch, applies=True)
    real_forward = encoder.forward
    monkeypatch.setattr(encoder, "forward", lambda **kw: calls.append("batch") or real_forward(**kw))
    tokenizer = load_tokenizer(str(tiny_bert))
    out = embed_texts(encoder, tokenizer, ["a tool", "the server", "sql"], batch_size=2, bf16=False)
    assert out.shape[0] == 3
    assert calls == ["keep", "batch", "batch", 0]
