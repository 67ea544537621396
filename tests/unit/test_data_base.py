"""The task datamodules' shared settings, and which of them carry a label set."""

import inspect
from dataclasses import fields

import pytest

from domainbert.data.base import TaskDataModule, TaskSettings
from domainbert.data.classification import ClassificationDataModule
from domainbert.data.labelled import LabelledDataModule
from domainbert.data.qa import QADataModule
from domainbert.data.tagging import TaggingDataModule
from domainbert.errors import DomainBertError

TASKS = [ClassificationDataModule, TaggingDataModule, QADataModule]


@pytest.mark.parametrize("cls", TASKS)
def test_every_shared_setting_is_an_explicit_documented_parameter(cls):
    # LightningCLI builds --help and the YAML keys from each constructor's own signature and docstring
    params = inspect.signature(cls.__init__).parameters
    doc = inspect.getdoc(cls.__init__)
    for f in fields(TaskSettings):
        assert f.name in params, f"{cls.__name__}.__init__ lacks {f.name}"
        assert params[f.name].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
        assert f"\n    {f.name}: " in doc, f"{cls.__name__}.__init__ does not document {f.name}"
    assert not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def test_settings_reach_the_datamodule():
    dm = QADataModule(train="t.jsonl", test="x.jsonl", batch_size=3, max_length=64, stride=16, num_workers=2, seed=5)
    assert dm.settings == TaskSettings(
        train="t.jsonl", test="x.jsonl", batch_size=3, max_length=64, num_workers=2, seed=5
    )
    assert dm.paths == {"train": "t.jsonl", "validation": None, "test": "x.jsonl", "predict": None}
    assert (dm.batch_size, dm.eval_batch_size, dm.max_length, dm.num_workers, dm.seed) == (3, 3, 64, 2, 5)
    assert TaggingDataModule(eval_batch_size=7).eval_batch_size == 7


def test_of_takes_the_settings_by_name_and_misses_none():
    args = {f.name: getattr(TaskSettings(), f.name) for f in fields(TaskSettings)} | {"self": None, "stride": 3}
    assert TaskSettings.of(args | {"seed": 9}) == TaskSettings(seed=9)
    del args["cache_dir"]
    with pytest.raises(KeyError, match="cache_dir"):
        TaskSettings.of(args)


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
