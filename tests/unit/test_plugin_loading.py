"""Plugins that misbehave: one that exits or raises at import is skipped with one warning naming its distribution;
names registered twice (over a built-in short name, a pipeline option) are all named in one warning line."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest

from domainbert.core.plugins import load_entry_points
from domainbert.data import registry
from domainbert.pipeline import build_parser, strategies


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
    registry.load_plugins(refresh=True)
    strategies.load(refresh=True)


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
        found, failed = load_entry_points(registry.GROUP, "datamodule")
    clashes = [m for m in _messages(caught) if "already taken" in m]
    assert len(clashes) == 1 and "\n" not in clashes[0]
    assert (
        "'classification' (evilplug: evil_taken:DataModule; kept: domainbert: domainbert.data.classification:"
        in (clashes[0])
    )
    assert "'corpus' (evilplug: evil_taken:DataModule; kept: domainbert: domainbert.data.corpus:" in clashes[0]
    assert found["classification"].__module__ == "domainbert.data.classification" and not failed
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
    entries = "[domainbert.strategies]\nprinter = evil_strategy:Printer\nmine = evil_strategy:Dapt\n"
    install(entries, evil_strategy=_STRATEGY)
    with pytest.warns(UserWarning) as caught:
        loaded = strategies.load(refresh=True)
    taken = [m for m in _messages(caught) if "names taken" in m]
    assert len(taken) == 1 and "\n" not in taken[0]
    assert "'printer' (evilplug: evil_strategy:Printer) named 'print_config': a pipeline option" in taken[0]
    assert "'mine' (evilplug: evil_strategy:Dapt) named 'dapt': a built-in strategy" in taken[0]
    assert "print_config" not in loaded and type(loaded["dapt"]).__module__ == "domainbert.pipeline.strategies.dapt"
    cfg = build_parser([]).parse_args(["--base_model", "m", "--task_train", "t", "--task_val", "v"])
    assert cfg.dapt.enabled == "auto"  # the parser still works, with the built-in dapt


def test_no_strategy_can_take_the_name_of_an_option_of_the_pipelines_parser():
    installed = strategies.load(refresh=True)
    options = {a.dest.split(".")[0] for a in build_parser([])._actions}
    assert options - set(installed) <= strategies.reserved()
