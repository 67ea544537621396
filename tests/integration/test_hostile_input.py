"""Hostile input: each case gets a clear error naming what is wrong, or a documented handling.

Each test (or parametrize case) counts as one bad input in the fault-injection summary printed at the end of the
run. Every CLI-level case goes through :func:`faults_summary.check_one_line`: exit code 2, exactly one
``domainbert: error:`` line, and a traceback would be counted in the summary's ``tracebacks=``.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from domainbert.cli import main
from domainbert.core.checks import check_checkpoint_config, check_checkpoint_model, checkpoint_family
from domainbert.data.classification import ClassificationDataModule
from domainbert.errors import DomainBertError
from tests.helpers import FIX, ROOT, TINY_CLS, TINY_MLM, bad_input, corpus, faults_summary

MLM = "domainbert.modules.mlm.MaskedLMModule"
CLS = "domainbert.modules.classification.SequenceClassificationModule"

#: size of the single-line corpus. 10 MB is the size to survive: tokenizing it takes ~46 s on 2 shared cores with the
#: tiny tokenizer (~3 s per MB, linear), so the suite uses 1 MB; DOMAINBERT_HOSTILE_MB=10 runs the full size.
HUGE_MB = float(os.environ.get("DOMAINBERT_HOSTILE_MB", "1"))


@pytest.fixture(scope="module")
def tok(tiny_bert):
    return AutoTokenizer.from_pretrained(tiny_bert)


def classification(tok, train, **kw) -> ClassificationDataModule:
    dm = ClassificationDataModule(train=str(train), **kw)
    dm.connect(tok)
    dm.setup("fit")
    return dm


def jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def cli_error(capsys, argv: list[str]) -> str:
    """Run the CLI, expect a user error (exit 2) in one ``domainbert: error:`` line, no traceback; return the line."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    return faults_summary.check_one_line(capsys.readouterr().err)


# -- text corpora ------------------------------------------------------------------------------------


@bad_input
def test_random_bytes_name_the_file_and_the_line(tok, tmp_path):
    rng = random.Random(0)
    data = b"clean first line\n" + bytes(rng.randrange(256) for _ in range(4096))
    path = tmp_path / "random.txt"
    path.write_bytes(data)
    try:
        data.decode("utf-8")
        raise AssertionError("the random bytes happen to be valid UTF-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
    assert line >= 2
    with pytest.raises(DomainBertError, match=rf"{path}: line {line}: .*not valid UTF-8"):
        corpus(tok, path)


@bad_input
def test_mixed_encodings_name_the_line(tok, tmp_path):
    path = tmp_path / "mixed.txt"
    path.write_bytes("héllo wörld in utf-8\nplain ascii\n".encode() + "café in latin-1\n".encode("latin-1"))
    with pytest.raises(DomainBertError, match=rf"{path}: line 3: bytes at offset \d+ are not valid UTF-8"):
        corpus(tok, path)


@bad_input
def test_a_file_of_empty_lines_is_an_error(tok, tmp_path):
    path = tmp_path / "empty_lines.txt"
    path.write_text("\n\n   \n\t\n\n", encoding="utf-8")
    with pytest.raises(DomainBertError, match=rf"{path}: the corpus has no non-empty text"):
        corpus(tok, path)


@bad_input
def test_one_huge_line_is_packed_without_losing_a_token(tok, tmp_path):
    """Documented handling: a document of any length is cut into full blocks; every token is kept, in order."""
    words = (ROOT / "tests/fixtures/corpus.txt").read_text(encoding="utf-8").split()
    n = int(HUGE_MB * 1e6)
    reps = n // len(" ".join(words)) + 1
    line = " ".join(words * reps)[:n].rsplit(" ", 1)[0]
    path = tmp_path / "huge.txt"
    path.write_text(line + "\n", encoding="utf-8")
    dm = corpus(tok, path, val_ratio=0.0, max_length=64, batch_size=4)
    want = tok(line, add_special_tokens=False, return_attention_mask=False, return_token_type_ids=False)["input_ids"]
    want = [*want, tok.sep_token_id]  # the document separator
    block = 64 - 2
    assert len(dm.train_ds) == -(-len(want) // block)
    got = []
    for j in range(len(dm.train_ds)):
        ids = dm.train_ds[j]["input_ids"]
        assert ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id
        assert len(ids) == 64 or j == len(dm.train_ds) - 1
        got.append(ids[1:-1])
    np.testing.assert_array_equal(np.concatenate(got), np.asarray(want))
    batch = next(iter(dm.train_dataloader()))
    assert batch["input_ids"].shape == (4, 64)


@bad_input
def test_a_split_left_empty_by_filtering_is_an_error(tok, tmp_path):
    """The corpus drops blank documents; a validation file with nothing else is named, not used empty."""
    val = tmp_path / "val.txt"
    val.write_text("   \n\n\t\n", encoding="utf-8")
    with pytest.raises(DomainBertError, match=rf"{val}: the corpus has no non-empty text"):
        corpus(tok, ROOT / "tests/fixtures/corpus.txt", val=str(val))


@bad_input
def test_a_csv_split_with_a_header_only_is_an_error(tok, tmp_path):
    train = jsonl(tmp_path / "train.jsonl", [{"text": "a b", "label": "x"}, {"text": "c d", "label": "y"}])
    val = tmp_path / "val.csv"
    val.write_text("text,label\n", encoding="utf-8")
    with pytest.raises(DomainBertError, match=rf"{val}: no rows"):
        classification(tok, train, val=str(val))


# -- labelled data -----------------------------------------------------------------------------------


@bad_input
def test_csv_with_quotes_and_newlines_inside_fields_is_read_exactly(tok, tmp_path):
    path = tmp_path / "quoted.csv"
    path.write_text(
        'text,label\n"He said ""hi"", then\nleft, twice",a\nplain,b\n"multi\n\nline, with comma",a\n', encoding="utf-8"
    )
    dm = classification(tok, path)
    want = ['He said "hi", then\nleft, twice', "plain", "multi\n\nline, with comma"]
    assert list(dm.raw("train")["text"]) == want
    assert dm.label_names == ["a", "b"]
    encoded = dm.datasets["train"]
    assert encoded["labels"] == [0, 1, 0]
    assert encoded["input_ids"] == [tok(t, truncation=True, max_length=128)["input_ids"] for t in want]


@bad_input
def test_a_list_label_in_single_label_data_is_an_error(tok, tmp_path):
    path = jsonl(tmp_path / "l.jsonl", [{"text": "a b", "label": "x"}, {"text": "c", "label": ["x", "y"]}])
    with pytest.raises(DomainBertError, match=r"holds lists of labels .*multi_label"):
        classification(tok, path)


@bad_input
@pytest.mark.parametrize("bad", [1.5, {"id": 1}, True], ids=["float", "dict", "bool"])
def test_a_label_of_the_wrong_type_names_the_row(tok, tmp_path, bad):
    path = jsonl(
        tmp_path / "w.jsonl", [{"text": "a b", "label": 0}, {"text": "c", "label": 1}, {"text": "d", "label": bad}]
    )
    with pytest.raises(DomainBertError) as err:
        classification(tok, path)
    assert f"{path}: row 3: column 'label'" in str(err.value) and "expected a label name" in str(err.value)


@bad_input
def test_integral_float_labels_are_the_integer_class_ids(tok, tmp_path):
    """JSON readers turn a column of 0, 1, 2.0 into floats; 2.0 is the class "2", not "2.0"."""
    path = jsonl(
        tmp_path / "f.jsonl", [{"text": "a b", "label": 0}, {"text": "c", "label": 1}, {"text": "d", "label": 2.0}]
    )
    assert classification(tok, path).label_names == ["0", "1", "2"]


# -- configs and checkpoints -------------------------------------------------------------------------


@bad_input
@pytest.mark.parametrize(
    ("yaml", "key"),
    [("trainer:\n  max_stepz: 3\n", "max_stepz"), ("model:\n  init_args:\n    learning_rat: 0.1\n", "learning_rat")],
)
def test_an_unknown_config_key_is_named(tiny_bert, tmp_path, capsys, yaml, key):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml, encoding="utf-8")
    err = cli_error(capsys, ["fit", "--config", TINY_MLM, "--model.init_from", str(tiny_bert), "--config", str(bad)])
    assert key in err


def fake_checkpoint(path: Path, module, class_path: str) -> Path:
    """What the CLI saves (weights and hyper-parameters), without a training run."""
    hp = {**dict(module.hparams), "_class_path": class_path}
    torch.save({"state_dict": module.state_dict(), "hyper_parameters": hp, "pytorch-lightning_version": "2.6"}, path)
    return path


@pytest.fixture(scope="module")
def roberta_ckpt(tiny_models, tmp_path_factory):
    from domainbert.modules.mlm import MaskedLMModule

    module = MaskedLMModule(init_from=str(tiny_models["roberta"]), head_warmup_steps=0)
    return fake_checkpoint(tmp_path_factory.mktemp("ck") / "roberta.ckpt", module, MLM)


@bad_input
def test_a_checkpoint_of_another_model_family_is_refused(roberta_ckpt, tiny_bert, tiny_models):
    assert checkpoint_family(torch.load(roberta_ckpt, weights_only=True)["state_dict"]) == "roberta"
    cfg = {"class_path": MLM, "init_args": {"init_from": str(tiny_bert)}}
    with pytest.raises(DomainBertError, match=rf"{roberta_ckpt} holds a roberta model, but .*{tiny_bert} is a bert"):
        check_checkpoint_config(roberta_ckpt, cfg)
    with pytest.raises(DomainBertError, match=rf"written by {MLM}, but the config's model is {CLS}"):
        check_checkpoint_config(roberta_ckpt, {"class_path": CLS, "init_args": {"init_from": str(tiny_bert)}})
    same = {"class_path": MLM, "init_args": {"init_from": str(tiny_models["roberta"])}}
    check_checkpoint_config(roberta_ckpt, same)  # the run's own config passes


@pytest.fixture(scope="module")
def cls_ckpt(tiny_bert, tmp_path_factory):
    from domainbert.modules.classification import SequenceClassificationModule

    module = SequenceClassificationModule(init_from=str(tiny_bert), label_names=["api", "graphics", "network"])
    return fake_checkpoint(tmp_path_factory.mktemp("ck") / "cls3.ckpt", module, CLS)


@bad_input
@pytest.mark.parametrize("labels", [["a", "b"], ["x", "y", "z"]], ids=["other-count", "same-count-other-names"])
def test_a_checkpoint_of_another_label_set_is_refused(cls_ckpt, tiny_bert, labels):
    from domainbert.modules.classification import SequenceClassificationModule

    module = SequenceClassificationModule(init_from=str(tiny_bert), label_names=labels)
    with pytest.raises(DomainBertError, match=r"trained on the labels \['api', 'graphics', 'network'\]"):
        check_checkpoint_model(cls_ckpt, module)
    same = SequenceClassificationModule(init_from=str(tiny_bert), label_names=["api", "graphics", "network"])
    check_checkpoint_model(cls_ckpt, same)  # its own label set passes


@bad_input
def test_the_cli_refuses_a_checkpoint_of_another_label_set(cls_ckpt, tiny_bert, tmp_path, capsys):
    two = jsonl(tmp_path / "two.jsonl", [{"text": f"text {i}", "label": "ab"[i % 2]} for i in range(8)])
    argv = ["fit", "--config", TINY_CLS, "--model.init_from", str(tiny_bert), "--data.train", str(two)]
    argv += ["--data.val", str(two), "--data.test", "null", "--data.predict", "null", "--trainer.max_steps", "1"]
    argv += ["--trainer.logger", "false", "--trainer.default_root_dir", str(tmp_path), "--ckpt_path", str(cls_ckpt)]
    err = cli_error(capsys, argv)
    assert "trained on the labels ['api', 'graphics', 'network']" in err


@bad_input
def test_a_tokenizer_that_does_not_fit_the_model_is_refused(tiny_models, tmp_path, capsys):
    folder = tmp_path / "bert_with_roberta_tokenizer"
    shutil.copytree(tiny_models["bert"], folder)
    for f in folder.iterdir():
        if "token" in f.name or f.name in ("vocab.txt", "special_tokens_map.json"):
            f.unlink()
    AutoTokenizer.from_pretrained(tiny_models["roberta"]).save_pretrained(folder)
    rows = json.loads((folder / "config.json").read_text())["vocab_size"]
    n = len(AutoTokenizer.from_pretrained(folder))
    assert n > rows
    err = cli_error(capsys, ["fit", "--config", TINY_MLM, "--model.init_from", str(folder)])
    assert f"the tokenizer has {n} tokens but the model's embedding has {rows} rows" in err


# -- the command line: one line per bad input, naming the file, row, field or option ----------------------------


def _write(path: Path, text: str | bytes) -> str:
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return str(path)


def _no_tokenizer(tiny_bert, tmp_path) -> str:
    """A copy of the tiny BERT without its tokenizer files (transformers 5 would build an empty vocabulary)."""
    folder = tmp_path / "no_tokenizer"
    shutil.copytree(tiny_bert, folder)
    for f in folder.iterdir():
        if "token" in f.name or f.name in ("vocab.txt", "special_tokens_map.json"):
            f.unlink()
    return str(folder)


#: ``id: (extra argv, what the line must name)``; ``{tmp}`` is the test's folder.
#: Files named in the argv are made by :func:`_bad_files` before the run.
CLI_CASES = {
    # data
    "csv-without-label-column": (["--data.train", "{tmp}/nolabel.csv"], ["{tmp}/nolabel.csv", "no column 'label'"]),
    "parquet-that-is-not-parquet": (["--data.train", "{tmp}/fake.parquet"], ["{tmp}/fake.parquet", "not a Parquet"]),
    "label-column-with-nulls": (["--data.train", "{tmp}/nulls.jsonl"], ["{tmp}/nulls.jsonl: row 5: column 'label'"]),
    "text-column-of-numbers": (["--data.train", "{tmp}/nums.jsonl"], ["{tmp}/nums.jsonl: row 1: column 'text'"]),
    "jsonl-rows-that-are-lists": (
        ["--data.train", "{tmp}/lists.jsonl"],
        ["{tmp}/lists.jsonl: line 1: expected a JSON"],
    ),
    "empty-train-glob": (
        ["--data.train", "{tmp}/nothing*.jsonl"],
        ["{tmp}/nothing*.jsonl: the pattern matches no file"],
    ),
    "train-folder-without-data": (["--data.train", "{tmp}/empty_dir"], ["{tmp}/empty_dir: the folder holds no .csv"]),
    "missing-val-file": (["--data.val", "{tmp}/nope.jsonl"], ["{tmp}/nope.jsonl: no such file"]),
    "unknown-text-column": (["--data.text_column", "body"], ["cls_train.jsonl: no column 'body'"]),
    "val-label-not-in-train": (
        ["--data.val", str(FIX / "cls_val_unknown.jsonl")],
        ["cls_val_unknown.jsonl: row 3: label 'firmware'", "not in the label set"],
    ),
    "negative-classification-batch-size": (["--data.batch_size", "-3"], ["data.batch_size=-3: expected at least 1"]),
    # configs and options
    "unknown-model-class-path": (["--model", "domainbert.modules.nope.Nope"], ["domainbert.modules.nope.Nope"]),
    "config-that-is-a-list": (["--config", "{tmp}/list.yaml"], ["{tmp}/list.yaml: expected a mapping", "a list"]),
    "config-that-is-empty": (["--config", "{tmp}/empty.yaml"], ["{tmp}/empty.yaml: expected a mapping", "empty file"]),
    "config-file-missing": (["--config", "{tmp}/none.yaml"], ["{tmp}/none.yaml", "does not exist"]),
    "learning-rate-not-a-number": (["--model.learning_rate", "abc"], ['"learning_rate"', "abc"]),
    "precision-that-does-not-exist": (["--trainer.precision", "17-fancy"], ['"trainer.precision"', "17-fancy"]),
    "negative-seed": (["--seed_everything", "-1"], ["--seed_everything=-1: expected true, false or a seed"]),
    "seed-not-a-number": (["--seed_everything", "abc"], ['"seed_everything"', "abc"]),
    "negative-max-epochs": (["--trainer.max_epochs", "-3"], ["--trainer.max_epochs=-3: expected -1"]),
    "zero-gradient-accumulation": (
        ["--trainer.accumulate_grad_batches", "0"],
        ["--trainer.accumulate_grad_batches=0: expected at least 1"],
    ),
    # models and tokenizers
    "init-from-folder-without-config": (["--model.init_from", "{tmp}/empty_dir"], ["{tmp}/empty_dir: no config.json"]),
    "init-from-missing-folder": (["--model.init_from", "{tmp}/nowhere"], ["{tmp}/nowhere: no such folder"]),
    "model-folder-without-tokenizer": (
        ["--model.init_from", "{tmp}/no_tokenizer"],
        ["{tmp}/no_tokenizer: no tokenizer files", "every word as [UNK]"],
    ),
    # checkpoints
    "zero-byte-checkpoint": (["--ckpt_path", "{tmp}/zero.ckpt"], ["--ckpt_path {tmp}/zero.ckpt: not a readable"]),
    "random-bytes-checkpoint": (["--ckpt_path", "{tmp}/junk.ckpt"], ["--ckpt_path {tmp}/junk.ckpt: not a readable"]),
    "checkpoint-of-another-task": (
        ["--ckpt_path", "{tmp}/mlm.ckpt"],
        ["--ckpt_path {tmp}/mlm.ckpt was written by " + MLM, "the config's model is " + CLS],
    ),
}


def _bad_files(tmp: Path, tiny_bert) -> None:
    rows = "".join(json.dumps({"text": f"t {i}", "label": "ab"[i % 2]}) + "\n" for i in range(4))
    _write(tmp / "nolabel.csv", "text,category\na b,x\nc d,y\n")
    _write(tmp / "fake.parquet", "this is not parquet\n")
    _write(tmp / "nulls.jsonl", rows + json.dumps({"text": "x", "label": None}) + "\n")
    _write(tmp / "nums.jsonl", "".join(json.dumps({"text": i, "label": "ab"[i % 2]}) + "\n" for i in range(4)))
    _write(tmp / "lists.jsonl", "[1, 2]\n[3, 4]\n")
    (tmp / "empty_dir").mkdir()
    _write(tmp / "list.yaml", "- trainer\n- model\n")
    _write(tmp / "empty.yaml", "")
    _write(tmp / "zero.ckpt", b"")
    _write(tmp / "junk.ckpt", random.Random(0).randbytes(4096))
    _no_tokenizer(tiny_bert, tmp)


@pytest.fixture(scope="module")
def mlm_bert_ckpt(tiny_bert, tmp_path_factory):
    from domainbert.modules.mlm import MaskedLMModule

    module = MaskedLMModule(init_from=str(tiny_bert), head_warmup_steps=0)
    return fake_checkpoint(tmp_path_factory.mktemp("ck") / "mlm.ckpt", module, MLM)


@bad_input
@pytest.mark.parametrize("case", list(CLI_CASES))
def test_a_bad_input_on_the_command_line_is_one_line_naming_it(case, tiny_bert, mlm_bert_ckpt, tmp_path, capsys):
    _bad_files(tmp_path, tiny_bert)
    shutil.copy(mlm_bert_ckpt, tmp_path / "mlm.ckpt")
    extra, names = CLI_CASES[case]
    sub = "test" if "--ckpt_path" in extra else "fit"
    argv = [
        sub,
        "--config",
        TINY_CLS,
        "--model.init_from",
        str(tiny_bert),
        "--data.train",
        str(FIX / "cls_train.jsonl"),
    ]
    argv += ["--data.val", str(FIX / "cls_val.jsonl"), "--data.test", str(FIX / "cls_test.jsonl")]
    argv += ["--data.predict", "null", "--trainer.max_steps", "1", "--trainer.logger", "false"]
    argv += ["--trainer.default_root_dir", str(tmp_path / "runs")]
    line = cli_error(capsys, argv + [a.format(tmp=tmp_path) for a in extra])
    for name in names:
        assert name.format(tmp=tmp_path) in line
    assert not (tmp_path / "runs").exists()  # nothing was trained or written


@bad_input
def test_ckpt_path_best_without_any_run_names_the_folder_it_searched(tiny_bert, tmp_path, capsys):
    argv = ["predict", "--config", TINY_CLS, "--model.init_from", str(tiny_bert), "--ckpt_path", "best"]
    line = cli_error(capsys, argv + ["--trainer.default_root_dir", str(tmp_path / "runs")])
    assert f"ckpt_path='best': no checkpoint under {tmp_path}/runs/tiny_classification/version_*/checkpoints" in line


# -- the user's own files ----------------------------------------------------------------------------------------


def test_the_suite_keeps_the_datasets_cache_out_of_the_users_home(tok, tmp_path):
    """conftest points ``datasets`` at a temporary folder before anything imports it (setting the variable later
    has no effect: ``datasets.config`` reads it once), so no test writes into ``~/.cache/huggingface/datasets``."""
    import datasets.config

    cache = Path(os.environ["HF_DATASETS_CACHE"])
    assert Path(datasets.config.HF_DATASETS_CACHE) == cache
    assert Path(tempfile.gettempdir()).resolve() in cache.resolve().parents
    before = set(cache.rglob("*.arrow"))
    rows = [{"text": f"text {tmp_path.name} {i}", "label": "ab"[i % 2]} for i in range(4)]
    classification(tok, jsonl(tmp_path / "t.jsonl", rows))
    assert set(cache.rglob("*.arrow")) - before  # this load's Arrow files went to the session's folder
