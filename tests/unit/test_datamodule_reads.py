"""domainbert reads a datamodule only through what ``domainbert.data.contract`` declares.

Any ``LightningDataModule`` may run under domainbert: what the package reads off one beyond the required contract
is declared once (``data/contract.py``, and for ``core`` ``core/protocols.py``), each with the value assumed when a
user's datamodule lacks it; domainbert's own datamodules declare every one of them. A scan refuses a
``getattr``/``hasattr`` on a datamodule anywhere else.
"""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest

import domainbert
from domainbert.core.card import dataset_name
from domainbert.data import contract
from domainbert.data.classification import ClassificationDataModule
from domainbert.data.corpus import CorpusDataModule
from domainbert.data.qa import QADataModule
from domainbert.data.tagging import TaggingDataModule
from domainbert.data.windows import Windows
from domainbert.distill.teacher_cache import data_files
from domainbert.errors import DomainBertError

PACKAGE = Path(domainbert.__file__).parent
#: the files that declare the contract: the only ones that read an optional member off a datamodule
DECLARING = {"data/contract.py", "core/protocols.py"}


def _is_datamodule(node: ast.AST) -> bool:
    """Whether ``node`` names a datamodule: ``dm``, ``datamodule``, ``<x>.datamodule``, ``attached_datamodule()``."""
    if isinstance(node, ast.Name):
        return node.id in ("dm", "datamodule")
    if isinstance(node, ast.Attribute):
        return node.attr == "datamodule"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr == "attached_datamodule"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr":
        name = node.args[1] if len(node.args) > 1 else None
        return isinstance(name, ast.Constant) and name.value == "datamodule"
    return False


def datamodule_reads(source: str, where: str) -> list[str]:
    """``getattr``/``hasattr`` calls whose object is a datamodule."""
    calls = [
        call
        for call in ast.walk(ast.parse(source))
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in ("getattr", "hasattr")
    ]
    calls.sort(key=lambda call: (call.lineno, call.col_offset))
    return [f"{where}:{c.lineno}: {ast.unparse(c)}" for c in calls if c.args and _is_datamodule(c.args[0])]


def test_the_scan_flags_planted_reads_of_a_datamodule():
    source = """
def setup(self, trainer, dm, datamodule):
    a = getattr(dm, "windows", None), hasattr(datamodule, "use_labels")
    b = getattr(self.attached_datamodule(), "transfer", None), getattr(trainer.datamodule, "paths", None)
    c = getattr(getattr(trainer, "datamodule", None), "max_length", None)
    return getattr(trainer, "datamodule", None), getattr(self, "windows", None)
"""
    assert [line.split(": ", 1)[1] for line in datamodule_reads(source, "m.py")] == [
        "getattr(dm, 'windows', None)",
        "hasattr(datamodule, 'use_labels')",
        "getattr(self.attached_datamodule(), 'transfer', None)",
        "getattr(trainer.datamodule, 'paths', None)",
        "getattr(getattr(trainer, 'datamodule', None), 'max_length', None)",
    ]


def test_no_module_reads_a_datamodule_through_getattr_or_hasattr_outside_the_contract():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        if where not in DECLARING:
            found += datamodule_reads(path.read_text(encoding="utf-8"), where)
    assert found == []


@pytest.mark.parametrize("cls", [ClassificationDataModule, TaggingDataModule, QADataModule])
def test_every_task_datamodule_declares_what_the_package_reads(cls):
    for name in ("windows", "text_pair_column", "soft_label_column", "transfer"):
        assert any(name in vars(base) for base in cls.__mro__), f"{cls.__name__} does not declare {name}"
    assert cls.windows is None and cls.text_pair_column is None and cls.transfer is None


def test_a_plain_datamodule_reads_as_the_declared_defaults():
    plain = SimpleNamespace()
    assert contract.windows(plain) is None and contract.text_pair_column(plain) is None
    assert contract.soft_label_column(plain) is None and contract.transfer(plain) is None
    assert contract.multi_label(plain) is False and contract.label_names(plain) is None
    assert (contract.batch_size(plain), contract.nsp(plain), contract.packing(plain)) == (None, None, None)
    assert contract.data_max_length(plain) is None and contract.data_paths(plain) == {}
    assert not isinstance(plain, (contract.TakesLabels, contract.TakesWindows, contract.CountsLabels))
    assert not isinstance(plain, (contract.LabelledFiles, contract.Describes, contract.StreamsTrainTokens))
    assert contract.data_paths(None) == {} and data_files(None) is None and dataset_name(None) == "custom data"


def test_a_plugins_values_are_read_as_it_gives_them():
    plugin = SimpleNamespace(max_length=64, batch_size=1, hparams={"nsp": True, "packing": False, "train": "c/x.txt"})
    assert (contract.data_max_length(plugin), contract.batch_size(plugin)) == (64, 1)
    assert (contract.nsp(plugin), contract.packing(plugin)) == (True, False)
    assert contract.data_paths(plugin) == {"train": "c/x.txt"} and data_files(plugin) == ["c/x.txt"]
    assert contract.data_max_length(SimpleNamespace(max_length="64")) is None  # not a length: not checked
    assert contract.data_max_length(SimpleNamespace(max_length=True)) is None


def test_a_label_set_that_cannot_be_read_yet_reads_as_unknown():
    class Unread:
        @property
        def label_names(self):
            raise DomainBertError("train.jsonl: no such file")

    assert contract.label_names(Unread()) is None
    assert contract.label_names(SimpleNamespace(label_names=[1, 2])) == ["1", "2"]


def test_the_corpus_declares_its_files_as_paths_like_the_task_datamodules():
    corpus = CorpusDataModule(train="corpora/debian/*.txt", val="held/out.txt", nsp=True, packing=False)
    assert corpus.paths == {"train": "corpora/debian/*.txt", "validation": "held/out.txt"}
    assert contract.data_paths(corpus) == corpus.paths and data_files(corpus) == ["corpora/debian/*.txt"]
    assert dataset_name(corpus) == "debian"
    assert (contract.nsp(corpus), contract.packing(corpus), contract.batch_size(corpus)) == (True, False, 32)
    assert isinstance(corpus, contract.StreamsTrainTokens) and isinstance(corpus, contract.Describes)


def test_classification_declares_its_capabilities():
    dm = ClassificationDataModule(labels=["a", "b"], long_text="windows", max_length=32)
    assert isinstance(dm, contract.TakesLabels) and isinstance(dm, contract.TakesWindows)
    assert isinstance(dm, contract.CountsLabels) and isinstance(dm, contract.LabelledFiles)
    assert isinstance(contract.windows(dm), Windows) and contract.text_pair_column(dm) is None
    assert contract.text_pair_column(ClassificationDataModule(labels=["a", "b"], text_pair_column="p")) == "p"
    assert contract.data_max_length(dm) == 32 and contract.data_paths(dm)["train"] is None
    qa = QADataModule()
    assert not isinstance(qa, contract.TakesWindows) and not isinstance(qa, contract.TakesLabels)
    assert contract.windows(qa) is None
