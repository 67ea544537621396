"""Plugin datamodules: the example package installs, registers a short name, lists, and fits; the contract."""

import importlib.metadata
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import lightning.pytorch as L
import pytest
from transformers import AutoConfig

from domainbert.cli import short_names
from domainbert.data import registry
from domainbert.data.contract import check_datamodule
from domainbert.errors import DomainBertError
from tests.helpers.examples import install_example

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "examples" / "plugin_datamodule"
DIST = "domainbert-folder-datamodule"


def _run(*args: str, cwd: Path = ROOT, path: Path | None = None) -> subprocess.CompletedProcess:
    """``python *args``; with ``path``, that folder is on the subprocess's ``PYTHONPATH``."""
    env = {**os.environ, "PYTHONWARNINGS": "default"}
    if path is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(path), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def installed_plugin(tmp_path_factory) -> Path:
    """The example plugin ``pip install``ed into a throwaway folder (returned), never into the project's environment.

    No network: no index, no build isolation, no deps. It is built from a copy, so the build leaves nothing
    (``build/``, ``*.egg-info``) in the source tree; ``--no-cache-dir`` keeps pip's wheel cache untouched.
    Subprocesses see the plugin with the folder on their ``PYTHONPATH`` (its entry points come with it).
    """
    target = install_example("plugin_datamodule", tmp_path_factory.mktemp("plugin"), skip=("sample",))
    assert list(target.glob("*.dist-info/entry_points.txt")), sorted(p.name for p in target.iterdir())
    return target


def test_the_plugin_is_installed_only_into_its_own_folder(installed_plugin):
    assert (installed_plugin / "folder_datamodule").is_dir()
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.distribution(DIST)  # this environment has no such distribution...
    assert importlib.util.find_spec("folder_datamodule") is None  # ...and cannot import the plugin


def test_installed_plugin_is_listed_and_fits_by_its_short_name(installed_plugin, tiny_bert, tmp_path):
    listed = _run("-m", "domainbert", "datamodules", path=installed_plugin)
    assert listed.returncode == 0, listed.stderr
    assert any(
        line.split() == ["folder", "folder_datamodule.FolderClassificationDataModule"]
        for line in listed.stdout.splitlines()
    ), listed.stdout

    fit = ["-m", "domainbert", "fit", "--data", "folder", "--data.root", str(PLUGIN / "sample")]
    fit += ["--data.batch_size", "8", "--model", "domainbert.modules.classification.SequenceClassificationModule"]
    fit += ["--model.init_from", str(tiny_bert), "--model.learning_rate", "3e-3", "--trainer.max_epochs", "3"]
    fit += ["--trainer.default_root_dir", str(tmp_path), "--run_name", "plugin", "--trainer.enable_progress_bar=false"]
    fit += ["--seed_everything", "0"]  # a drawn seed made the loss check below depend on luck
    done = _run(*fit, path=installed_plugin)
    assert done.returncode == 0, done.stderr[-3000:]
    run = tmp_path / "plugin" / "version_0"
    # the label set came from the plugin's folders, through link_arguments, into the exported config
    assert AutoConfig.from_pretrained(run / "hf").id2label == {0: "graphics", 1: "network"}
    assert "folder_datamodule.FolderClassificationDataModule" in (run / "config.yaml").read_text()
    rows = (run / "metrics.csv").read_text().splitlines()
    header = rows[0].split(",")
    losses = [float(r.split(",")[header.index("val/loss")]) for r in rows[1:] if r.split(",")[header.index("val/loss")]]
    assert len(losses) == 3 and losses[-1] < losses[0]


def test_a_plugin_that_fails_to_import_is_named_and_skipped(monkeypatch, capsys):
    bad = importlib.metadata.EntryPoint("broken_plugin", "no_such_module_xyz:Thing", registry.GROUP)
    installed = importlib.metadata.entry_points
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [*installed(group=group), bad])
    with pytest.warns(UserWarning, match="'broken_plugin' .*no_such_module_xyz:Thing.* failed to import"):
        plugins = registry.load_plugins(refresh=True)
    assert list(plugins) == ["classification", "corpus", "qa", "tagging"]
    with pytest.warns(UserWarning):
        registry.main([])
    out = capsys.readouterr().out.splitlines()
    assert out[2].split() == ["corpus", "domainbert.data.corpus.CorpusDataModule"]
    assert " ".join(out[5].split()).startswith("broken_plugin FAILED TO IMPORT: ModuleNotFoundError")
    monkeypatch.undo()
    registry.load_plugins(refresh=True)


def test_short_names_expand_in_every_flag_form():
    registry.load_plugins(refresh=True)
    full = "domainbert.data.classification.ClassificationDataModule"
    assert short_names.expand_short_names(["fit", "--data", "classification"]) == ["fit", "--data", full]
    assert short_names.expand_short_names(["--data=classification"]) == [f"--data={full}"]
    assert short_names.expand_short_names(["--data.class_path", "classification"]) == ["--data.class_path", full]
    assert short_names.expand_short_names(["--data", "my.own.Module"]) == ["--data", "my.own.Module"]


class _NoLabels(L.LightningDataModule):
    pass


class _BadLabels(L.LightningDataModule):
    num_labels = 3
    label_names = ["a", "b"]


class _Model:
    hparams = {"num_labels": None}


def test_contract_names_what_a_labelled_task_misses():
    with pytest.raises(DomainBertError, match="_NoLabels has no num_labels or label_names"):
        check_datamodule(_NoLabels(), _Model())
    with pytest.raises(DomainBertError, match=r"num_labels is 3 but label_names has 2 names"):
        check_datamodule(_BadLabels(), _Model())
    check_datamodule(_NoLabels(), type("MLM", (), {"hparams": {}})())  # an unlabelled task needs neither
