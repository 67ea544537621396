"""The task datamodules' shared options, and which of them carry a label set."""

import pytest

from domainbert.data.base import TaskDataModule
from domainbert.data.classification import ClassificationDataModule
from domainbert.data.labelled import LabelledDataModule
from domainbert.data.qa import QADataModule
from domainbert.data.tagging import TaggingDataModule
from domainbert.errors import DomainBertError

TASKS = [ClassificationDataModule, TaggingDataModule, QADataModule]


def test_options_reach_the_datamodule():
    dm = QADataModule(train="t.jsonl", test="x.jsonl", batch_size=3, max_length=64, stride=16, num_workers=2, seed=5)
    assert dm.paths == {"train": "t.jsonl", "validation": None, "test": "x.jsonl", "predict": None}
    assert (dm.batch_size, dm.eval_batch_size, dm.max_length, dm.num_workers, dm.seed) == (3, 3, 64, 2, 5)
    assert (dm.stride, dm.group_by_length, dm.num_proc, dm.cache_dir) == (16, False, None, None)
    assert TaggingDataModule(eval_batch_size=7).eval_batch_size == 7
    assert (QADataModule().batch_size, QADataModule().max_length) == (16, 384)  # QA's own defaults
    assert (TaggingDataModule().batch_size, TaggingDataModule().max_length) == (32, 128)  # the base's
    cls = ClassificationDataModule(labels=["a", "b"], train="t.jsonl", text_column="s", num_proc=2, cache_dir="c")
    assert (cls.label_names, cls.paths["train"], cls.text_column, cls.num_proc, cls.cache_dir) == (
        ["a", "b"],
        "t.jsonl",
        "s",
        2,
        "c",
    )


def test_a_misspelt_option_is_rejected():
    with pytest.raises(TypeError, match="batchsize"):
        ClassificationDataModule(batchsize=8)
    with pytest.raises(TypeError, match="labels"):
        QADataModule(labels=["a", "b"])  # QA has no label set


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"batch_size": 0}, "data.batch_size=0"),
        ({"eval_batch_size": 0}, "data.eval_batch_size=0"),
        ({"max_length": 4}, "data.max_length=4: expected at least 8"),
    ],
)
@pytest.mark.parametrize("cls", TASKS)
def test_bad_settings_are_user_errors(cls, kwargs, match):
    if cls is QADataModule:
        kwargs = {"stride": 0, **kwargs}  # QA checks its stride against max_length first
    with pytest.raises(DomainBertError, match=match):
        cls(**kwargs)


def test_only_labelled_tasks_have_a_label_set():
    qa = QADataModule()
    assert isinstance(qa, TaskDataModule) and not isinstance(qa, LabelledDataModule)
    # the CLI links data.num_labels / data.label_names only where they exist
    assert not hasattr(qa, "label_names") and not hasattr(qa, "num_labels")
    for dm in (ClassificationDataModule(labels=["a", "b"]), TaggingDataModule(labels=["O", "B-X", "I-X"])):
        assert isinstance(dm, LabelledDataModule)
        assert dm.num_labels == len(dm.label_names)
    assert ClassificationDataModule().label_names is None  # unknown until a training split or a model gives it
    with pytest.raises(DomainBertError, match="distinct label names"):
        TaggingDataModule(labels=["O", "O"])
