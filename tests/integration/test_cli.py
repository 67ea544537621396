"""The LightningCLI end to end: run folders, saved configs that rerun, HF export, clean errors; every --help."""

import re

import pytest
from transformers import AutoModelForMaskedLM, AutoTokenizer

from domainbert.cli import COMMANDS, main
from tests.helpers import TINY_MLM, tiny_mlm_args


def _fit(tiny_bert, corpus_file, root, *extra):
    main(
        [*tiny_mlm_args("fit", tiny_bert, corpus_file, root), "--trainer.max_steps", "4"]
        + ["--trainer.val_check_interval", "2", *extra]
    )


def test_fit_twice_gives_two_runs_each_with_config_and_export(tiny_bert, corpus_file, tmp_path):
    _fit(tiny_bert, corpus_file, tmp_path)
    _fit(tiny_bert, corpus_file, tmp_path)
    runs = sorted((tmp_path / "tiny_debug").iterdir())
    assert [r.name for r in runs] == ["version_0", "version_1"]
    for run in runs:
        assert (run / "config.yaml").exists()
        model = AutoModelForMaskedLM.from_pretrained(run / "hf")
        tok = AutoTokenizer.from_pretrained(run / "hf")
        assert model.get_input_embeddings().num_embeddings == len(tok)
    # the saved config runs again as it is, into a new folder
    main(["fit", "--config", str(runs[0] / "config.yaml")])
    assert (tmp_path / "tiny_debug" / "version_2" / "hf" / "model.safetensors").exists()


def test_resume_from_ckpt_path_through_the_cli(tiny_bert, corpus_file, tmp_path):
    _fit(tiny_bert, corpus_file, tmp_path)
    ckpt = next((tmp_path / "tiny_debug/version_0/checkpoints").glob("*.ckpt"))
    _fit(tiny_bert, corpus_file, tmp_path, "--trainer.max_steps", "6", "--ckpt_path", str(ckpt))
    final = next((tmp_path / "tiny_debug/version_1/checkpoints").glob("*.ckpt"))
    assert "step=6" in final.name


@pytest.mark.parametrize(
    "args,message",
    [
        (["--model.init_from", "/no/such/model"], "/no/such/model: no such folder"),
        (["--data.train", "/no/such/corpus.txt"], "/no/such/corpus.txt: no such file"),
        (["--data.max_length", "4096"], "data.max_length=4096 is beyond the model's 128 positions"),
        (["--data.text_column", "body", "--data.train", "JSONL"], "no column 'body'"),
    ],
)
def test_bad_input_is_one_clear_line(tiny_bert, corpus_file, tmp_path, capsys, args, message):
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text('{"text": "a b c"}\n')
    args = [str(jsonl) if a == "JSONL" else a for a in args]
    base = [
        "fit",
        "--config",
        TINY_MLM,
        "--model.init_from",
        str(tiny_bert),
        "--data.train",
        str(corpus_file),
        "--trainer.default_root_dir",
        str(tmp_path),
    ]
    with pytest.raises(SystemExit) as exc:
        main(base + args)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_tokenizer_that_does_not_fit_the_model(tiny_models, tmp_path, capsys, corpus_file):
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(tiny_models["bert"], bad)
    big = AutoTokenizer.from_pretrained(tiny_models["roberta"])  # 500 tokens for a 200-row embedding
    for f in bad.glob("tok*"):
        f.unlink()
    big.save_pretrained(bad)
    with pytest.raises(SystemExit):
        main(["fit", "--config", TINY_MLM, "--model.init_from", str(bad), "--data.train", str(corpus_file)])
    assert "the tokenizer has 500 tokens but the model's embedding has 200 rows" in capsys.readouterr().err


def test_unknown_config_key_is_named(tiny_bert, tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["fit", "--config", TINY_MLM, "--model.init_args.learnin_rate", "0.1"])
    assert "learnin_rate" in capsys.readouterr().err


def test_tool_subcommands_start_without_importing_lightning():
    import subprocess
    import sys

    code = "import sys, domainbert.cli, domainbert.pipeline; print(sorted(m for m in sys.modules if 'lightning' in m))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_prints_its_own_help(command, capsys):
    code = 0
    try:
        main([command, "--help"])
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr().out
    assert code in (0, None), (command, code)
    assert re.match(rf"usage: domainbert (\[options\] )?{command}\b", out), out[:300]
