"""``model.losses`` through the command line: terms by class path train, log, save and reload; an older
checkpoint given a term, and a loss term from another package (``examples/plugin_loss``), load; an entry in a form
that is not ``{class_path, init_args}`` is one line naming it; 0.1.0's ``extra_losses`` and ``alpha``..``delta`` are
read as the terms they meant."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from domainbert.cli import cli_main, main
from domainbert.distill.losses import HiddenStateLoss
from domainbert.distill.module import DistillationModule
from tests.helpers import FIX, ROOT
from tests.helpers.examples import install_example

TINY = str(ROOT / "configs/distill/tiny_debug.yaml")
OLD = FIX / "old_main"
PLUGIN = ROOT / "examples" / "plugin_loss"
SHORT = ["--trainer.max_steps=2", "--trainer.val_check_interval=2", "--trainer.limit_val_batches=1"]


@pytest.fixture(scope="module")
def teacher(tmp_path_factory) -> Path:
    """A tiny 4-layer classifier labelled for the fixture task (api, graphics, network)."""
    from tests.helpers.distill_tiny import labelled_teacher

    return labelled_teacher(tmp_path_factory.mktemp("teacher"), layers=4)


def _fit(tmp_path: Path, teacher: Path, more: list, *args: str):
    """A two-step distillation of ``configs/distill/tiny_debug.yaml`` with ``more`` loss terms after its own."""
    snippet = tmp_path / "extra.yaml"
    snippet.write_text(yaml.safe_dump({"model": {"init_args": {"losses+": more}}}))
    argv = ["fit", "--config", TINY, "--config", str(snippet), "--model.teacher", str(teacher)]
    argv += ["--model.init_args.teacher_cache", "null", "--trainer.default_root_dir", str(tmp_path / "runs"), *SHORT]
    return cli_main([*argv, *args])


def _checkpoint(tmp_path: Path) -> Path:
    found = sorted((tmp_path / "runs").glob("**/checkpoints/*.ckpt"))
    assert found, sorted(str(p) for p in (tmp_path / "runs").rglob("*"))
    return found[-1]


def test_a_term_by_class_path_trains_logs_and_reloads_from_its_checkpoint(teacher, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    term = {
        "class_path": "domainbert.distill.losses.HiddenStateLoss",
        "init_args": {"kind": "cosine", "layer_map": {2: 4}},
    }
    term["init_args"] |= {"weight": 0.25, "name": "cos_hidden"}
    cli = _fit(tmp_path, teacher, [term])
    loss = cli.model.losses["cos_hidden"]
    assert isinstance(loss, HiddenStateLoss) and loss.kind == "cosine" and loss.layer_map == {2: 4}
    assert cli.model.loss_weights["cos_hidden"] == 0.25
    assert torch.isfinite(cli.trainer.callback_metrics["train/loss_cos_hidden"])
    ckpt = _checkpoint(tmp_path)
    saved = torch.load(ckpt, map_location="cpu", weights_only=True)["hyper_parameters"]["losses"]
    assert [e["init_args"]["weight"] for e in saved] == [0.5, 0.5, 0.1, 0.25]  # the config's terms, then this one
    assert saved[3]["class_path"] == "domainbert.distill.losses.HiddenStateLoss"
    assert saved[3]["init_args"].items() >= {"kind": "cosine", "weight": 0.25, "name": "cos_hidden"}.items()
    loaded = DistillationModule.load_from_checkpoint(ckpt, weights_only=True)  # Lightning's own loader, no CLI
    assert loaded.loss_weights["cos_hidden"] == 0.25 and loaded.losses["cos_hidden"].layer_map == {2: 4}

    argv = ["validate", "--config", TINY, "--model.teacher", str(teacher), "--model.init_args.teacher_cache", "null"]
    argv += ["--ckpt_path", str(ckpt), "--trainer.default_root_dir", str(tmp_path / "v"), "--trainer.logger", "false"]
    again = cli_main([*argv, "--trainer.limit_val_batches=1"])  # the config names no extra term: the checkpoint does
    assert again.model.loss_weights["cos_hidden"] == 0.25 and again.model.losses["cos_hidden"].kind == "cosine"


def test_an_entry_with_weight_beside_init_args_is_one_line_naming_it(teacher, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    snippet = tmp_path / "older.yaml"
    older = {"class_path": "HiddenStateLoss", "init_args": {"layer_map": {1: 2}}, "weight": 0.3}
    snippet.write_text(yaml.safe_dump({"model": {"init_args": {"losses": [older]}}}))
    with pytest.raises(SystemExit) as done:
        main(["fit", "--config", TINY, "--config", str(snippet), "--model.teacher", str(teacher), *SHORT])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert "model.losses[0] (HiddenStateLoss): unknown keys ['weight']; expected {class_path:" in err


def test_a_released_config_trains_the_terms_it_meant(teacher, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    snippet = tmp_path / "released.yaml"
    model = {"losses": None, "alpha": 0.7, "beta": 0.0, "gamma": 0.2, "hidden_loss": "cosine", "temperature": 3.0}
    model["extra_losses"] = [{"class_path": "domainbert.losses.HardLabelLoss", "init_args": {}, "weight": 0.3}]
    snippet.write_text(yaml.safe_dump({"model": {"init_args": model}}))
    argv = ["fit", "--config", TINY, "--config", str(snippet), "--model.teacher", str(teacher)]
    argv += ["--model.init_args.teacher_cache", "null", "--trainer.default_root_dir", str(tmp_path / "runs"), *SHORT]
    with pytest.warns(FutureWarning, match=r"released\.yaml: the 0\.1\.0 loss options \(temperature, alpha, beta"):
        cli = cli_main(argv)
    assert cli.model.loss_weights == {"kl": 0.7, "hidden": 0.2, "hardlabelloss": 0.3}
    assert cli.model.losses["kl"].temperature == 3.0 and cli.model.losses["hidden"].kind == "cosine"
    saved = yaml.safe_load(next((tmp_path / "runs").glob("**/config.yaml")).read_text())["model"]["init_args"]
    assert "alpha" not in saved and len(saved["losses"]) == 3  # the run's config is today's form


def test_a_misspelt_term_argument_is_one_line_naming_the_entry(teacher, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    snippet = tmp_path / "bad.yaml"
    bad = {"class_path": "HiddenStateLoss", "init_args": {"layer_map": {1: 2}, "knd": "cosine"}}
    snippet.write_text(yaml.safe_dump({"model": {"init_args": {"losses": [bad]}}}))
    with pytest.raises(SystemExit) as done:
        main(["fit", "--config", TINY, "--config", str(snippet), "--model.teacher", str(teacher), *SHORT])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert "model.losses[0]: domainbert.distill.losses.HiddenStateLoss(" in err and "knd='cosine'" in err
    assert "its arguments are kind, layer_map, student_layers" in err


def test_help_and_print_config_show_each_terms_arguments(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["fit", "--model", "distill", "--model.losses.help", "HiddenStateLoss"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--losses.kind {mse,cosine}" in out and "--losses.layer_map LAYER_MAP" in out
    assert "--losses.weight WEIGHT the term's factor in the distillation loss (>= 0)" in out

    snippet = tmp_path / "extra.yaml"
    term = {"class_path": "AttentionLoss", "init_args": {"layer_map": {1: 2}, "weight": 0.5}}
    snippet.write_text(yaml.safe_dump({"model": {"init_args": {"losses": [term]}}}))
    with pytest.raises(SystemExit):
        main(["fit", "--config", TINY, "--config", str(snippet), "--model.teacher", "t", "--print_config"])
    printed = yaml.safe_load(capsys.readouterr().out)["model"]["init_args"]["losses"]
    assert printed == [
        {
            "class_path": "domainbert.distill.losses.AttentionLoss",
            "init_args": {
                "layer_map": {"1": 2},  # jsonargparse writes the keys as text, and reads them back as numbers
                "student_layers": None,
                "teacher_layers": None,
                "weight": 0.5,
                "name": None,
            },
        }
    ]


def test_old_checkpoint_given_an_extra_term_validates_to_the_same_loss(tmp_path, monkeypatch):
    import json

    monkeypatch.chdir(ROOT)
    ckpt = torch.load(OLD / "distill" / "model.ckpt", map_location="cpu", weights_only=True)
    term = {
        "class_path": "domainbert.distill.losses.HiddenStateLoss",
        "init_args": {"layer_map": {1: 1}, "weight": 0.2},
    }
    ckpt["hyper_parameters"]["extra_losses"] = [term]  # as a 0.1.0 checkpoint saves a term
    path = tmp_path / "older.ckpt"
    torch.save(ckpt, path)
    argv = ["validate", "--config", str(OLD / "distill" / "config.yaml"), "--ckpt_path", str(path)]
    argv += ["--model.teacher", str(OLD / "teacher-hf"), "--trainer.default_root_dir", str(tmp_path)]
    with pytest.warns(FutureWarning, match=r"the 0\.1\.0 loss options"):
        cli = cli_main([*argv, "--trainer.logger", "false"])
    assert cli.model.loss_weights == {"kl": 0.5, "hard": 0.5, "hidden": 0.1, "hiddenstateloss": 0.2}
    expected = json.loads((OLD / "expected.json").read_text())["distill"]
    assert float(cli.trainer.callback_metrics["val/loss"]) == pytest.approx(expected, rel=1e-5)


@pytest.fixture(scope="module")
def installed_plugin(tmp_path_factory) -> Path:
    """``examples/plugin_loss`` ``pip install``ed into a throwaway folder (returned), never into the environment."""
    target = install_example("plugin_loss", tmp_path_factory.mktemp("plugin_loss"))
    assert (target / "logit_mse_loss" / "__init__.py").is_file()
    return target


def test_the_example_plugin_term_loads_by_class_path_and_its_loss_is_computed(
    installed_plugin, teacher, tmp_path, monkeypatch
):
    monkeypatch.chdir(ROOT)
    monkeypatch.syspath_prepend(str(installed_plugin))
    snippet = yaml.safe_load((PLUGIN / "logit_mse.yaml").read_text())["model"]["init_args"]["losses+"]
    cli = _fit(tmp_path, teacher, snippet)
    module = cli.model
    term = module.losses["logit_mse"]
    assert type(term).__module__ == "logit_mse_loss" and term.scale == 2.0 and module.loss_weights["logit_mse"] == 0.5
    assert "train/loss_logit_mse" in cli.trainer.callback_metrics

    module.eval()
    batch = next(iter(cli.datamodule.train_dataloader()))
    input_ids, _, view = module.prepare(batch, salt=0)
    with torch.no_grad():
        inputs = {"input_ids": input_ids, "attention_mask": view["attention_mask"]}
        student = module.model(**inputs, output_hidden_states=True)
        teacher_out = module.teacher(**inputs, output_hidden_states=True)
        total, parts = module.distill_loss(student, teacher_out, view)
    by_hand = ((student.logits / 2 - teacher_out.logits / 2) ** 2).sum(-1).mean()
    assert parts["logit_mse"].item() == pytest.approx(by_hand.item(), rel=1e-5) and by_hand.item() > 0
    weighted = sum(module.loss_weights[name] * value for name, value in parts.items())
    assert total.item() == pytest.approx(weighted.item(), rel=1e-6) and set(parts) == {
        "kl",
        "hard",
        "hidden",
        "logit_mse",
    }
