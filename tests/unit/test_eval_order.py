"""Validation and test rows batched by length, and test predictions put back in file order.

Covers ``TaskDataModule._loader`` (a task with ``predict_by_length`` batches its validation and test rows with a
:class:`~domainbert.data.batching.LengthSortedSampler`) and, in :mod:`domainbert.pipeline.worker`,
:func:`sampler_order`, :func:`in_file_order`, :func:`test_predictions` and the :class:`TestPredictions` callback.
"""

from __future__ import annotations

import contextlib
import json
from types import SimpleNamespace

import pytest
import torch
from torch.utils.data import DataLoader
from transformers import AutoTokenizer

from domainbert.core.prediction import in_file_order, sampler_order
from domainbert.data.batching import Collator, LengthSortedSampler
from domainbert.data.classification import ClassificationDataModule
from domainbert.modules.classification import SequenceClassificationModule
from domainbert.pipeline import worker  # not its names: pytest would collect test_predictions and TestPredictions
from tests.helpers import FIX

BATCH = 4
SPLITS = {"validation": FIX / "cls_val.jsonl", "test": FIX / "cls_test.jsonl"}


@pytest.fixture(scope="module")
def tok(tiny_bert):
    return AutoTokenizer.from_pretrained(tiny_bert)


@pytest.fixture
def dm(tok):
    data = ClassificationDataModule(
        train=str(FIX / "cls_train.jsonl"),
        val=str(SPLITS["validation"]),
        test=str(SPLITS["test"]),
        batch_size=BATCH,
        eval_batch_size=BATCH,
        max_length=64,
    )
    data.connect(tok)
    return data


def _loader(dm, split: str) -> DataLoader:
    return dm.val_dataloader() if split == "validation" else dm.test_dataloader()


def _file_gold(dm, split: str) -> list[int]:
    """The label ids of ``split``'s file, in file order."""
    rows = [json.loads(line) for line in SPLITS[split].read_text().splitlines() if line.strip()]
    return [dm.label_names.index(r["label"]) for r in rows]


def _row_ids(batch) -> list[list[int]]:
    """Each row's unpadded token ids."""
    return [ids[mask.bool()].tolist() for ids, mask in zip(batch["input_ids"], batch["attention_mask"], strict=True)]


def _padding(widths: list[list[int]]) -> int:
    """Pad tokens of batches whose rows have the lengths ``widths`` (one list per batch)."""
    return sum(max(w) * len(w) - sum(w) for w in widths)


# -- in_file_order and sampler_order -----------------------------------------------------------------


def test_in_file_order_undoes_a_permutation_and_keeps_values_without_an_order():
    order = torch.randperm(50, generator=torch.Generator().manual_seed(0)).tolist()
    assert order != sorted(order)
    given = [f"row{i}" for i in order]  # the values as a sampler of that order yields them
    assert in_file_order(given, order) == [f"row{i}" for i in range(50)]
    values = ["c", "a", "b"]
    assert in_file_order(values, None) == ["c", "a", "b"]
    assert in_file_order(values, [2, 0, 1]) == ["a", "b", "c"]


def test_sampler_order_is_the_length_sorted_samplers_order_and_none_otherwise():
    lengths = [3, 7, 1, 7, 5]
    sorted_loader = DataLoader(list(range(5)), batch_size=2, sampler=LengthSortedSampler(lengths, 2))
    assert sampler_order(sorted_loader) == [1, 3, 4, 0, 2]  # longest first, ties in file order
    assert [x for b in sorted_loader for x in b.tolist()] == [1, 3, 4, 0, 2]
    assert sampler_order(DataLoader(list(range(5)), batch_size=2)) is None
    assert sampler_order(DataLoader(list(range(5)), batch_size=2, shuffle=True)) is None
    assert sampler_order(object()) is None  # not a loader at all


# -- the datamodule's evaluation loaders -----------------------------------------------------------


@pytest.mark.parametrize("split", ["validation", "test"])
def test_evaluation_batches_are_grouped_by_length_and_hold_every_row_once(dm, split):
    loader = _loader(dm, split)
    assert isinstance(loader.sampler, LengthSortedSampler)
    ds = dm.datasets[split]
    file_rows = [list(ds[i]["input_ids"]) for i in range(len(ds))]
    order = sampler_order(loader)
    assert sorted(order) == list(range(len(ds))) and order != list(range(len(ds)))  # the fixture's lengths vary
    batches = list(loader)
    seen = [ids for batch in batches for ids in _row_ids(batch)]
    assert seen == [file_rows[i] for i in order]  # every row once, in the sampler's order
    lengths = [len(ids) for ids in seen]
    assert lengths == sorted(lengths, reverse=True)  # the file is shorter than one sorted run
    assert all(batch["input_ids"].shape[0] <= BATCH for batch in batches)
    sorted_widths = [[len(ids) for ids in _row_ids(batch)] for batch in batches]
    file_lengths = [len(ids) for ids in file_rows]
    file_widths = [file_lengths[i : i + BATCH] for i in range(0, len(file_lengths), BATCH)]
    assert _padding(sorted_widths) <= _padding(file_widths)
    padded = sum(b["input_ids"].numel() - int(b["attention_mask"].sum()) for b in batches)
    assert padded == _padding(sorted_widths)  # each batch is padded to its own longest row only


@pytest.mark.parametrize(("limit", "sorted_"), [(1.0, True), (None, True), (0.5, False), (2, False)])
def test_a_limited_evaluation_keeps_file_order(dm, limit, sorted_):
    dm.trainer = SimpleNamespace(limit_val_batches=limit, limit_test_batches=limit, callbacks=[])
    try:
        for split in ("validation", "test"):
            assert dm.sorts_evaluation(split) is sorted_
            assert isinstance(_loader(dm, split).sampler, LengthSortedSampler) is sorted_
    finally:
        dm.trainer = None


# -- TestPredictions, driven by hand ------------------------------------------------------------------


class _Module(torch.nn.Module):
    """A stand-in LightningModule whose ``model`` returns the logits it is given (the callback hooks it)."""

    def __init__(self) -> None:
        super().__init__()
        self.model = torch.nn.Identity()


def _planted(batch) -> torch.Tensor:
    """Logits whose argmax is each row's token-id sum modulo 3: a prediction that belongs to the row."""
    ids = (batch["input_ids"] * batch["attention_mask"]).sum(1)
    return torch.nn.functional.one_hot(ids % 3, 3).float()


def _planted_file_pred(dm, split: str) -> list[int]:
    ds = dm.datasets[split]
    return [sum(ds[i]["input_ids"]) % 3 for i in range(len(ds))]


def _run_test_pass(collect: worker.TestPredictions, trainer, loader, limit: int | None = None) -> _Module:
    module = _Module()
    collect.on_test_start(trainer, module)
    for i, batch in enumerate(loader):
        if limit is not None and i >= limit:
            break
        collect.on_test_batch_start(trainer, module, batch, i)
        module.model(_planted(batch))  # the module's test step runs its model
        collect.on_test_batch_end(trainer, module, None, batch, i)
    collect.on_test_end(trainer, module)
    return module


@pytest.mark.parametrize("as_list", [False, True], ids=["loader", "list-of-one"])
def test_test_predictions_callback_gives_gold_and_pred_in_file_order(dm, as_list):
    loader = dm.test_dataloader()
    trainer = SimpleNamespace(test_dataloaders=[loader] if as_list else loader)
    collect = worker.TestPredictions()
    module = _run_test_pass(collect, trainer, loader)
    assert not module.model._forward_hooks  # the hook is gone after the pass
    gold = _file_gold(dm, "test")
    assert collect.gold != gold  # the pass saw the rows sorted by length: the check below can fail
    rows = collect.record(SimpleNamespace(label_names=dm.label_names))
    assert rows == {"gold": gold, "pred": _planted_file_pred(dm, "test"), "labels": list(dm.label_names)}


def test_test_predictions_callback_keeps_the_order_of_a_file_order_loader(dm):
    dm.setup("test")
    ds = dm.datasets["test"]
    loader = DataLoader(ds, batch_size=BATCH, shuffle=False, collate_fn=Collator(dm.tokenizer))
    collect = worker.TestPredictions()
    _run_test_pass(collect, SimpleNamespace(test_dataloaders=loader), loader)
    assert collect.order is None
    rows = collect.record(SimpleNamespace(label_names=dm.label_names))
    assert rows["gold"] == _file_gold(dm, "test") and rows["pred"] == _planted_file_pred(dm, "test")


def test_record_is_none_when_the_pass_saw_fewer_rows_than_the_sampler_orders(dm):
    loader = dm.test_dataloader()
    collect = worker.TestPredictions()
    _run_test_pass(collect, SimpleNamespace(test_dataloaders=loader), loader, limit=2)  # as limit_test_batches=2
    assert len(collect.gold) == 2 * BATCH < len(collect.order)
    assert collect.record(SimpleNamespace(label_names=dm.label_names)) is None


# -- test_predictions: a pass of its own -----------------------------------------------------------------


def test_test_predictions_gives_the_files_gold_and_each_rows_own_prediction_in_file_order(dm, tiny_bert):
    torch.manual_seed(0)
    model = SequenceClassificationModule(str(tiny_bert), label_names=dm.label_names, pooling="mean").eval()
    trainer = SimpleNamespace(precision_plugin=SimpleNamespace(forward_context=contextlib.nullcontext))
    assert isinstance(dm.test_dataloader().sampler, LengthSortedSampler)
    ds, collate = dm.datasets["test"], Collator(dm.tokenizer)

    def alone() -> torch.Tensor:  # each row's logits, the row alone (no padding, no neighbours), in file order
        with torch.no_grad():
            return torch.cat([model(collate([ds[i]])) for i in range(len(ds))])

    with torch.no_grad():  # a random head predicts one class for every row; centred, it tells the rows apart
        model.model.classifier.bias -= alone().mean(0)
    expected = alone().argmax(-1).tolist()
    assert len(set(expected)) > 1  # so the check of the predictions below can fail
    rows = worker.test_predictions(trainer, model, dm)
    assert rows["gold"] == _file_gold(dm, "test")
    assert rows["pred"] == expected
    assert rows["labels"] == list(dm.label_names)
