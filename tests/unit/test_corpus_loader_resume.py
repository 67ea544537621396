"""Exact resume of the corpus loader, without training: a loader restored anywhere continues the uninterrupted order.

The training runs that resume (mid-epoch, after SIGKILL, across epochs) are in tests/integration/test_resume.py.
"""

import pytest
import torch
from torchdata.stateful_dataloader import StatefulDataLoader

from domainbert.data.corpus import ResumableEpochSampler
from domainbert.errors import DomainBertError


def _loader(n: int = 50, rank: int = 0, replicas: int = 1) -> StatefulDataLoader:
    """The corpus datamodule's loader over ``range(n)``: 8 rows a batch, seed 0, one rank of ``replicas``."""
    sampler = ResumableEpochSampler(n, seed=0, num_replicas=replicas, rank=rank)
    return StatefulDataLoader(list(range(n)), batch_size=8, sampler=sampler)


def _epochs(loader: StatefulDataLoader, first: int, last: int) -> list[list[int]]:
    out = []
    for epoch in range(first, last + 1):
        loader.sampler.set_epoch(epoch)  # as Lightning does at each epoch start
        out += [b.tolist() for b in loader]
    return out


def _stop_after(loader: StatefulDataLoader, n_batches: int) -> tuple[list[list[int]], int, dict]:
    """Iterate epochs 0, 1, ... and stop after ``n_batches``: (the batches, the epoch stopped in, the state)."""
    got, epoch = [], 0
    while True:
        loader.sampler.set_epoch(epoch)
        for batch in loader:
            got.append(batch.tolist())
            if len(got) == n_batches:
                return got, epoch, loader.state_dict()
        epoch += 1


def _resumed(state: dict, epoch: int, last: int, **kw) -> list[list[int]]:
    """What a new process draws from ``state`` on: the rest of ``epoch`` (iter before set_epoch, as Lightning), then
    whole epochs up to ``last``."""
    loader = _loader(**kw)
    loader.load_state_dict(state)
    it = iter(loader)
    loader.sampler.set_epoch(epoch)
    return [b.tolist() for b in it] + _epochs(loader, epoch + 1, last)


@pytest.mark.parametrize("stop", [3, 7, 9, 12], ids=["epoch0_mid", "epoch0_end", "epoch1_start", "epoch1_mid"])
def test_corpus_loader_restored_anywhere_continues_the_uninterrupted_order(stop):
    """50 rows, 8 a batch: 7 batches an epoch. Stopped after ``stop`` batches, the restored loader gives the rest
    of three epochs exactly (the old RandomSampler loader drew another order for the epoch after the restore)."""
    full = _epochs(_loader(), 0, 2)
    got, epoch, state = _stop_after(_loader(), stop)
    assert got + _resumed(state, epoch, 2) == full
    # each epoch is a permutation that depends on the epoch only
    assert sorted(sum(full[:7], [])) == list(range(50)) and full[:7] != full[7:14]


def test_a_position_saved_after_an_epochs_last_batch_gives_the_next_epoch_whole():
    """Restored from a checkpoint taken after the last batch of epoch 0, Lightning sets epoch 1 before it draws
    from the restored iterator: that iterator must give epoch 1 from its start, not skip its first 50 rows."""
    full = _epochs(_loader(), 0, 2)
    got, epoch, state = _stop_after(_loader(), 7)
    assert epoch == 0 and state["_sampler_iter_state"]["sampler_iter_state"] == {"epoch": 0, "yielded": 50}
    loader = _loader()
    loader.load_state_dict(state)
    it = iter(loader)
    loader.sampler.set_epoch(1)  # the fit loop moves on: epoch 0 was complete
    assert got + [b.tolist() for b in it] + _epochs(loader, 2, 2) == full


def test_corpus_loader_order_is_sharded_across_ranks_and_resumes_per_rank():
    """Two DDP ranks: each takes every 2nd index of the one global order of (seed, epoch); restored mid-epoch-1
    each rank continues its own shard, and together they cover every row in every epoch."""
    global_orders = [ResumableEpochSampler(50, seed=0, num_replicas=1, rank=0) for _ in range(2)]
    global_orders[1].set_epoch(1)
    ranks = []
    for rank in (0, 1):
        full = _epochs(_loader(rank=rank, replicas=2), 0, 2)  # 25 rows a rank: 4 batches an epoch
        got, epoch, state = _stop_after(_loader(rank=rank, replicas=2), 6)
        assert epoch == 1 and got + _resumed(state, epoch, 2, rank=rank, replicas=2) == full
        ranks.append(full)
    for e, sampler in enumerate(global_orders):
        expected = sampler.order()
        shards = [sum(r[4 * e : 4 * e + 4], []) for r in ranks]
        assert shards[0] == expected[0::2] and shards[1] == expected[1::2]


def test_a_checkpoint_from_the_random_sampler_loader_resumes_at_its_position(caplog):
    """A checkpoint saved before this loader (``StatefulDataLoader(shuffle=True)``) resumes after the same number
    of rows, with a warning that the order differs, instead of torchdata's AssertionError."""
    old = StatefulDataLoader(list(range(50)), batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(0))
    it = iter(old)
    for _ in range(3):
        next(it)
    with caplog.at_level("WARNING", logger="domainbert.data.corpus"):
        rest = _resumed(old.state_dict(), 0, 0)
    assert [len(b) for b in rest] == [8, 8, 8, 2]  # 26 rows left of the 50
    assert "older domainbert" in caplog.text and "after 24 examples" in caplog.text


@pytest.mark.faults(bad_inputs=1)
def test_a_corrupt_loader_position_in_a_checkpoint_is_a_domainbert_error():
    state = _stop_after(_loader(), 2)[2]
    state["_sampler_iter_state"]["sampler_iter_state"] = {"epoch": 0, "yielded": "24"}
    with pytest.raises(DomainBertError, match="position in the training data.*expected 'yielded'"):
        _resumed(state, 0, 0)
