"""The one registry type (:class:`domainbert.core.plugins.Registry`) and the extension points built on it.

Plugins that misbehave: one that exits or raises at import is skipped with one warning naming its distribution;
names registered twice (over a built-in's name, a pipeline option) are all named in one warning line, at every
extension point alike, and never imported. Built-ins are registered exactly as a plugin is, in ``pyproject.toml``.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest

from domainbert.cli.short_names import MODELS, expand_short_names
from domainbert.core.plugins import Refused, Registry
from domainbert.data import registry
from domainbert.deploy.formats import FORMATS
from domainbert.pipeline import build_parser, strategies
from domainbert.pipeline.strategies import STRATEGIES

ROOT = Path(__file__).resolve().parents[2]
#: every extension point: its registry, and its built-ins' names
EXTENSION_POINTS = {
    "domainbert.datamodules": (registry.DATAMODULES, {"classification", "corpus", "qa", "tagging"}),
    "domainbert.models": (MODELS, {"classification", "tagging", "qa", "mlm", "contrastive", "tsdae", "distill"}),
    "domainbert.strategies": (
        STRATEGIES,
        {"select", "vocab", "dapt", "tapt", "contrastive", "tsdae", "self_train", "larger_teacher", "soup"},
    ),
    "domainbert.export_formats": (FORMATS, {"fp32", "bf16", "int8", "onnx", "onnx_int8"}),
}


@pytest.fixture
def install(tmp_path, monkeypatch):
    """``install(entry_points, **modules)``: a distribution ``evilplug`` on ``sys.path`` with those modules."""
    site = tmp_path / "site"

    def make(entry_points: str, **modules: str) -> Path:
        info = site / "evilplug-0.1.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: evilplug\nVersion: 0.1\n")
        (info / "entry_points.txt").write_text(entry_points)
        for name, code in modules.items():
            (site / f"{name}.py").write_text(code)
            monkeypatch.delitem(sys.modules, name, raising=False)
        monkeypatch.syspath_prepend(str(site))
        return site

    yield make
    monkeypatch.undo()
    for name in [m for m in sys.modules if m.startswith("evil_")]:
        del sys.modules[name]
    for extension_point, _ in EXTENSION_POINTS.values():
        extension_point.refresh()


def _messages(caught) -> list[str]:
    return [str(w.message) for w in caught]


@pytest.mark.parametrize("code", ["import sys\nsys.exit(3)\n", "raise SystemError('boom')\n", "import os\nos.nope\n"])
def test_a_datamodule_plugin_that_exits_or_raises_at_import_is_skipped_naming_its_distribution(install, capsys, code):
    install("[domainbert.datamodules]\nevil = evil_exits:DataModule\n", evil_exits=code)
    with pytest.warns(UserWarning) as caught:
        registry.main([])
    said = [m for m in _messages(caught) if "'evil'" in m]
    assert len(said) == 1 and "(evilplug: evil_exits:DataModule) failed to import and is skipped" in said[0]
    listed = capsys.readouterr().out
    assert "classification  domainbert.data.classification.ClassificationDataModule" in listed
    assert "evil" in listed and "FAILED TO IMPORT" in listed


def test_a_keyboard_interrupt_while_importing_a_plugin_still_interrupts(install):
    install("[domainbert.datamodules]\nevil = evil_stop:DataModule\n", evil_stop="raise KeyboardInterrupt\n")
    with pytest.raises(KeyboardInterrupt), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        registry.load_plugins(refresh=True)


def test_plugins_under_built_in_short_names_are_all_named_in_one_warning_and_not_imported(install):
    marker = "import pathlib\npathlib.Path(__file__).with_name('marker').touch()\nDataModule = object\n"
    site = install(
        "[domainbert.datamodules]\nclassification = evil_taken:DataModule\ncorpus = evil_taken:DataModule\n",
        evil_taken=marker,
    )
    with pytest.warns(UserWarning) as caught:
        found = registry.DATAMODULES.load(refresh=True)
    clashes = [m for m in _messages(caught) if "already taken" in m]
    assert len(clashes) == 1 and "\n" not in clashes[0]
    assert (
        "'classification' (evilplug: evil_taken:DataModule; kept: domainbert: domainbert.data.classification:"
        in (clashes[0])
    )
    assert "'corpus' (evilplug: evil_taken:DataModule; kept: domainbert: domainbert.data.corpus:" in clashes[0]
    assert found["classification"].__module__ == "domainbert.data.classification" and not registry.DATAMODULES.failed
    assert "evil_taken" not in sys.modules and not (site / "marker").exists()


_STRATEGY = '''
from dataclasses import dataclass
from domainbert.pipeline.strategies.base import Strategy

@dataclass
class Spec:
    enabled: bool = False

class Printer(Strategy, name="print_config", settings=Spec):
    """A plugin named like an option of the pipeline's parser."""

class Dapt(Strategy, name="dapt", settings=Spec):
    """A plugin named like a built-in strategy."""
'''


def test_strategy_plugins_named_like_a_pipeline_option_or_a_built_in_are_named_in_one_line(install, capsys):
    entries = "[domainbert.strategies]\nprint_config = evil_strategy:Printer\ndapt = evil_strategy:Dapt\n"
    install(entries, evil_strategy=_STRATEGY)
    with pytest.warns(UserWarning) as caught:
        loaded = strategies.load(refresh=True)
    taken = [m for m in _messages(caught) if "already taken" in m]
    assert len(taken) == 1 and "\n" not in taken[0]
    assert "'print_config' (evilplug: evil_strategy:Printer; reserved: a pipeline option)" in taken[0]
    assert "'dapt' (evilplug: evil_strategy:Dapt; kept: domainbert: domainbert.pipeline.strategies.dapt:" in taken[0]
    assert "print_config" not in loaded and type(loaded["dapt"]).__module__ == "domainbert.pipeline.strategies.dapt"
    assert "evil_strategy" not in sys.modules  # refused by its name alone
    cfg = build_parser([]).parse_args(["--base_model", "m", "--task_train", "t", "--task_val", "v"])
    assert cfg.dapt.enabled == "auto"  # the parser still works, with the built-in dapt


def test_no_strategy_can_take_the_name_of_an_option_of_the_pipelines_parser():
    installed = strategies.load(refresh=True)
    options = {a.dest.split(".")[0] for a in build_parser([])._actions}
    assert options - set(installed) <= strategies.reserved()


def test_every_extension_point_is_one_registry_whose_built_ins_are_the_entry_points_of_pyproject():
    tomllib = pytest.importorskip("tomllib")
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["entry-points"]
    assert set(declared) == set(EXTENSION_POINTS)
    for group, (extension_point, built_in) in EXTENSION_POINTS.items():
        extension_point.refresh()
        assert isinstance(extension_point, Registry) and extension_point.group == group
        assert set(extension_point.builtins()) == built_in == set(declared[group])
        assert {name: extension_point[name] for name in built_in} == {
            name: target.replace(":", ".") for name, target in declared[group].items()
        }


def test_a_plugin_under_a_built_in_name_is_refused_alike_at_every_extension_point_and_never_imported(install):
    marker = "import pathlib\npathlib.Path(__file__).with_name('marker').touch()\nThing = object\n"
    taken = {"datamodules": "classification", "models": "qa", "strategies": "dapt", "export_formats": "int8"}
    entries = "".join(f"[domainbert.{group}]\n{name} = evil_taken:Thing\n" for group, name in taken.items())
    site = install(entries, evil_taken=marker)
    for group, name in taken.items():
        extension_point, _ = EXTENSION_POINTS[f"domainbert.{group}"]
        with pytest.warns(UserWarning) as caught:
            extension_point.refresh()
            paths = dict(extension_point)
        said = [m for m in _messages(caught) if "already taken" in m]
        assert len(said) == 1 and f"{name!r} (evilplug: evil_taken:Thing; kept: domainbert: domainbert." in said[0]
        assert not paths[name].startswith("evil_taken")
    assert STRATEGIES.load()["dapt"].name == "dapt" and FORMATS.load()["int8"].option == "int8"
    assert "evil_taken" not in sys.modules and not (site / "marker").exists()


def test_a_plugin_model_short_name_expands_as_a_built_in_does_without_importing_it(install):
    install("[domainbert.models]\nmine = evil_model:MyModule\n", evil_model="raise SystemExit(3)\n")
    MODELS.refresh()
    assert expand_short_names(["fit", "--model", "mine"]) == ["fit", "--model", "evil_model.MyModule"]
    assert expand_short_names(["--model=MyModule", "--model", "qa"]) == [
        "--model=evil_model.MyModule",
        "--model",
        "domainbert.modules.qa.QuestionAnsweringModule",
    ]
    assert list(MODELS)[-1] == "mine" and "evil_model" not in sys.modules


class _Thing:
    def __init__(self, name: str = "", rank: int = 0) -> None:
        self.name, self.rank = name, rank


def _make(name: str, obj):
    """A registry's ``make`` for the tests: a class is made, a ``_Thing`` must carry its registered name."""
    thing = obj() if isinstance(obj, type) else obj
    if not isinstance(thing, _Thing):
        raise Refused(f"{thing!r} is not a thing")
    if thing.name and thing.name != name:
        raise Refused(f"its name {thing.name!r} is not {name!r}")
    return thing


_THINGS = """
from tests.unit.test_plugin_loading import _Thing

class Broken(_Thing):
    def __init__(self):
        raise ValueError("no")

good = _Thing()
b_first = _Thing(rank=1)
a_second = _Thing(rank=2)
renamed = _Thing("other")
number = 3
"""


def test_the_registry_reads_names_lazily_imports_once_and_skips_what_fails_naming_its_distribution(install):
    install(
        "[domainbert.things]\ngood = evil_things:good\nbroken = evil_things:Broken\nrenamed = evil_things:renamed\n"
        "notone = evil_things:number\nexits = evil_exit:Thing\nzz = evil_things:b_first\nyy = evil_things:a_second\n"
        "help = evil_things:good\n",
        evil_things=_THINGS,
        evil_exit="raise SystemExit(3)\n",
    )
    things = Registry("domainbert.things", "thing", make=_make, reserved=lambda: {"help": "an option"})
    with pytest.warns(UserWarning) as caught:
        assert things["good"] == "evil_things.good" and things.get("nothing") is None and "help" not in things
    assert "evil_things" not in sys.modules and "evil_exit" not in sys.modules  # names and paths: nothing imported
    said = _messages(caught)
    assert any("'help' (evilplug: evil_things:good; reserved: an option)" in m for m in said)
    assert any("domainbert's metadata registers no built-in thing under domainbert.things" in m for m in said)
    with pytest.warns(UserWarning) as caught:
        loaded = things.load()
    assert list(loaded) == ["good", "zz", "yy"] and things.load() is loaded  # found order; imported once
    assert things.failed == {
        "broken": "ValueError: no",
        "renamed": "its name 'other' is not 'renamed'",
        "notone": "3 is not a thing",
        "exits": "SystemExit: 3",
    }
    said = " ".join(_messages(caught))
    assert "the thing plugin 'exits' (evilplug: evil_exit:Thing) failed to import and is skipped: SystemExit: 3" in said
    assert "the thing plugin 'broken' (evilplug: evil_things:Broken) is skipped: making it failed: ValueError" in said
    assert "the thing plugin 'renamed' (evilplug: evil_things:renamed) is skipped: its name 'other'" in said
    ranked = Registry("domainbert.things", "thing", make=_make, order=lambda thing: -thing.rank)
    with pytest.warns(UserWarning):
        assert list(ranked.load()) == ["yy", "zz", "good", "help"]  # no name reserved here
