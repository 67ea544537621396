"""Every shipped config is parsed and instantiated (litgpt's test_config_hub), with tiny local models."""

from pathlib import Path

import pytest
import yaml

from domainbert.cli import cli_main

ROOT = Path(__file__).resolve().parents[2]
FIT_CONFIGS = sorted(
    p for stage in ("pretrain", "finetune", "distill") for p in (ROOT / "configs" / stage).glob("*.yaml")
)
#: the pipeline's built-in stage configs (used when a pipeline config names none)
STAGE_CONFIGS = sorted((ROOT / "domainbert" / "pipeline" / "stages").glob("*.yaml"))


@pytest.fixture(scope="module")
def tiny_teacher(tmp_path_factory):
    from transformers import AutoConfig

    from tests.helpers.distill_tiny import make_teacher

    path = make_teacher("bert", tmp_path_factory.mktemp("teacher"), layers=4)
    config = AutoConfig.from_pretrained(path)  # relabel it for the fixture task the configs are pointed at
    labels = ["api", "graphics", "network"]
    config.id2label, config.label2id = dict(enumerate(labels)), {n: i for i, n in enumerate(labels)}
    config.save_pretrained(path)
    return path


@pytest.mark.parametrize("path", FIT_CONFIGS + STAGE_CONFIGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_fit_config_instantiates(path, tiny_bert, tiny_teacher, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # configs use repo-relative data paths
    cfg = yaml.safe_load(path.read_text())
    init = cfg["model"].get("init_args", {})
    args = ["--config", str(path), "--trainer.default_root_dir", str(tmp_path), "--data.init_args.max_length=64"]
    if path in STAGE_CONFIGS:  # the pipeline gives these their data
        fx = ROOT / "tests/fixtures"
        args += [f"--data.train={fx / ('corpus.txt' if 'Corpus' in cfg['data']['class_path'] else 'cls_train.jsonl')}"]
    if "init_from" in init or cfg["model"]["class_path"].endswith(("MaskedLMModule", "Module")):
        if "DistillationModule" not in cfg["model"]["class_path"]:
            args += ["--model.init_from", str(tiny_bert)]
    if "DistillationModule" in cfg["model"]["class_path"]:
        args += ["--model.teacher", str(tiny_teacher), "--model.init_args.teacher_cache", "null"]
        fx = ROOT / "tests/fixtures"  # the tiny teacher knows the fixture task's 3 labels
        args += [f"--data.init_args.{k}={fx / f'cls_{v}.jsonl'}" for k, v in (("train", "train"), ("val", "val"))]
    cli = cli_main(args, run=False)
    assert cli.model is not None and cli.datamodule is not None and cli.trainer is not None
    assert cli.model.tokenizer is not None, "the model owns its tokenizer"
    if hasattr(cli.datamodule, "tokenizer"):
        assert cli.datamodule.tokenizer is cli.model.tokenizer, "the CLI connected the tokenizer"


@pytest.mark.parametrize("group", sorted(p.name for p in (ROOT / "configs/trainer").glob("*.yaml")))
def test_trainer_group_layers_over_a_stage_config(group, capsys):
    from domainbert.cli import main

    layered = yaml.safe_load((ROOT / "configs/trainer" / group).read_text())["trainer"]
    stage = str(ROOT / "configs/finetune/tiny_classification.yaml")
    with pytest.raises(SystemExit) as done:
        main(["fit", "--config", stage, "--config", str(ROOT / "configs/trainer" / group), "--print_config"])
    assert done.value.code in (0, None)
    printed = yaml.safe_load(capsys.readouterr().out)
    assert {k: printed["trainer"][k] for k in layered} == layered
    assert printed["model"]["init_args"]["learning_rate"] == 1e-4  # the stage config is still there
