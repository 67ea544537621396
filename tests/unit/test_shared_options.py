"""The options every fine-tuning module and every task datamodule takes are declared and documented once.

They are the constructor arguments of the bases (``FineTuneModule``, ``TaskDataModule``, ``LabelledDataModule``),
described in the bases' docstrings; a task takes its own options and hands the rest on with ``**kwargs``.
LightningCLI (jsonargparse) follows ``**kwargs`` into the bases, so each task's ``--help`` and YAML keys still list
every option, flat, with the base's default (or the task's own, where it names the option for one) and the base's
description.
"""

import dataclasses
import inspect

import docstring_parser
import pytest
from jsonargparse import ArgumentParser

from domainbert.core.compat import parser_actions
from domainbert.data.base import TaskDataModule
from domainbert.data.classification import ClassificationDataModule
from domainbert.data.labelled import LabelledDataModule
from domainbert.data.qa import QADataModule
from domainbert.data.tagging import TaggingDataModule
from domainbert.modules.classification import SequenceClassificationModule
from domainbert.modules.finetune import FineTuneModule
from domainbert.modules.lora import LoraSettings
from domainbert.modules.qa import QuestionAnsweringModule
from domainbert.modules.tagging import TokenClassificationModule

#: each task and the bases whose options it takes
TASKS = {
    SequenceClassificationModule: (FineTuneModule,),
    TokenClassificationModule: (FineTuneModule,),
    QuestionAnsweringModule: (FineTuneModule,),
    ClassificationDataModule: (LabelledDataModule, TaskDataModule),
    TaggingDataModule: (LabelledDataModule, TaskDataModule),
    QADataModule: (TaskDataModule,),
}
#: the shared options a task names in its own signature, for a default of its own
OWN_DEFAULTS = {
    TokenClassificationModule: {"learning_rate": 5e-5},
    QADataModule: {"batch_size": 16, "max_length": 384},
}
#: named by every fine-tuning module, without a default: it is positional (``SequenceClassificationModule(path)``)
POSITIONAL = {"init_from"}


def own_parameters(cls) -> dict[str, inspect.Parameter]:
    """The named parameters of ``cls.__init__`` itself (not ``self``, not ``**kwargs``)."""
    params = inspect.signature(cls.__init__).parameters.values()
    return {p.name: p for p in params if p.name != "self" and p.kind is not inspect.Parameter.VAR_KEYWORD}


def described(text: str) -> str:
    return " ".join(text.split())


def base_docs(base) -> dict[str, str]:
    """The options described in the base's class docstring (where jsonargparse finds them for its subclasses)."""
    return {p.arg_name: described(p.description) for p in docstring_parser.parse(base.__doc__).params}


def resolved(cls) -> dict[str, object]:
    """The options jsonargparse (as LightningCLI) builds for ``cls``: name -> argparse action."""
    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(cls, "x", fail_untyped=False)
    return {a.dest.removeprefix("x."): a for a in parser_actions(parser) if a.dest.startswith("x.")}


@pytest.mark.parametrize("base", [FineTuneModule, LabelledDataModule, TaskDataModule], ids=lambda c: c.__name__)
def test_a_base_describes_each_of_its_options(base):
    assert set(base_docs(base)) == set(own_parameters(base))
    assert all(base_docs(base).values())


@pytest.mark.parametrize("cls", list(TASKS), ids=lambda c: c.__name__)
def test_each_task_lists_the_shared_options_with_the_base_defaults_and_descriptions(cls):
    actions = resolved(cls)
    for base in TASKS[cls]:
        docs = base_docs(base)
        for name, param in own_parameters(base).items():
            assert name in actions, f"{cls.__name__}: --{name} is missing"
            want = OWN_DEFAULTS.get(cls, {}).get(name, param.default)
            if want is inspect.Parameter.empty:
                assert actions[name].required, name
            else:
                assert actions[name].default == want, name
            assert described(actions[name].help) == docs[name], f"{cls.__name__}: --{name}"


@pytest.mark.parametrize("cls", list(TASKS), ids=lambda c: c.__name__)
def test_a_task_names_a_shared_option_only_for_a_default_of_its_own_and_never_describes_it(cls):
    own = own_parameters(cls)
    own_docs = {p.arg_name for p in docstring_parser.parse(cls.__init__.__doc__).params}
    for base in TASKS[cls]:
        for name, param in own_parameters(base).items():
            assert name not in own_docs, f"{cls.__name__} describes --{name} again"
            if name in own and name not in POSITIONAL:
                assert own[name].default == OWN_DEFAULTS[cls][name] != param.default, name
    named = {n for base in TASKS[cls] for n in own_parameters(base)} & set(own)
    assert named - POSITIONAL == set(OWN_DEFAULTS.get(cls, {}))


def test_the_hyperparameters_hold_every_argument_with_lora_as_plain_data(tiny_bert):
    lora = LoraSettings(r=4, alpha=8)
    module = TokenClassificationModule(str(tiny_bert), label_names=["O", "B-X", "I-X"], weight_decay=0.5, lora=lora)
    expected = {n for cls in (TokenClassificationModule, FineTuneModule) for n in own_parameters(cls)} - {"optimizer"}
    assert set(module.hparams) == expected
    assert (module.hparams.learning_rate, module.hparams.weight_decay, module.hparams.freeze_layers) == (5e-5, 0.5, 0)
    assert module.hparams.label_names == ["O", "B-X", "I-X"] and module.hparams.init_from == str(tiny_bert)
    assert module.hparams.lora == dataclasses.asdict(lora)  # checkpoints load with weights_only
    assert module.hparams_initial.lora == dataclasses.asdict(lora)  # and so does the loggers' hparams.yaml


def test_a_task_resolves_before_the_hyperparameters_are_saved(tiny_bert):
    module = SequenceClassificationModule(str(tiny_bert), label_names=["a", "b"], pooling="mean", head_init="auto")
    assert (module.hparams.pooling, module.hparams.head_init) == ("mean", "probe")  # as resolved, outside the CLI
    assert module.hparams.learning_rate == 3e-5 and module.hparams.lora is None
    qa = QuestionAnsweringModule(str(tiny_bert), n_best=5, layer_decay=0.9)
    assert (qa.hparams.n_best, qa.hparams.layer_decay, qa.hparams.max_answer_length) == (5, 0.9, 30)
    with pytest.raises(TypeError, match="learningrate"):
        QuestionAnsweringModule(str(tiny_bert), learningrate=1e-3)
