"""Hostile data: each case, unchecked, would print a traceback or train silently on nonsense; each is one
``domainbert: error:`` line naming the file and the line, or the field, and what was expected.

Each test (or parametrize case) is one bad input in the fault-injection summary.
"""

from __future__ import annotations

import gzip
import json

import pytest
from transformers import AutoTokenizer

from domainbert.cli import main
from domainbert.data.classification import ClassificationDataModule
from domainbert.errors import DomainBertError
from tests.helpers import TINY_MLM, bad_input, corpus


@pytest.fixture(scope="module")
def tok(tiny_bert):
    return AutoTokenizer.from_pretrained(tiny_bert)


def cli_error(capsys, argv: list[str]) -> str:
    """Run the CLI, expect a user error (exit 2) and no traceback; return stderr."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "domainbert: error:" in err and "Traceback" not in err
    return err


def _numbered_text(n: int) -> bytes:
    """Lines that compress poorly enough for a cut to fall in the middle of the text."""
    return "".join(f"line {i} of the corpus, checksum {i * 7919 % 100003:05d}\n" for i in range(n)).encode()


# -- compressed files ---------------------------------------------------------------------------------


@bad_input
def test_a_truncated_gzip_corpus_names_the_file_and_where_it_breaks_off(tok, tmp_path):
    data = gzip.compress(_numbered_text(20000))
    path = tmp_path / "corpus.txt.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DomainBertError) as err:
        corpus(tok, path)
    msg = str(err.value)
    assert msg.startswith(f"{path}: the gzip file is truncated: its text breaks off after line ")
    lines = int(msg.split("after line ")[1].split()[0])
    assert 0 < lines < 20000  # the lines before the cut were read


@bad_input
def test_a_gz_file_that_is_not_gzip_is_named(tok, tmp_path):
    path = tmp_path / "corpus.txt.gz"
    path.write_text("plain text, never compressed\n", encoding="utf-8")
    with pytest.raises(DomainBertError, match=r"corpus\.txt\.gz: line 1: not a gzip file .*rename it without \.gz"):
        corpus(tok, path)


# -- labelled data ------------------------------------------------------------------------------------


@bad_input
def test_a_broken_jsonl_line_is_named_by_its_line_number(tok, tmp_path):
    rows = [json.dumps({"text": f"text {i}", "label": "ab"[i % 2]}) for i in range(6)]
    rows[3] = rows[3][:-1]  # the closing brace is lost
    path = tmp_path / "train.jsonl"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    with pytest.raises(DomainBertError) as err:
        ClassificationDataModule(train=str(path)).label_names  # noqa: B018 - reading it reads the file
    assert str(err.value).startswith(f"{path}: line 4: not valid JSON (")
    assert "position" not in str(err.value)


@bad_input
def test_training_data_with_a_single_class_is_refused(tok, tmp_path):
    path = tmp_path / "one.jsonl"
    path.write_text("".join(json.dumps({"text": f"t {i}", "label": "spam"}) + "\n" for i in range(5)))
    with pytest.raises(DomainBertError) as err:
        ClassificationDataModule(train=str(path)).label_names  # noqa: B018
    assert str(err.value).startswith(f"{path}: column 'label' holds a single label ('spam') in all 5 rows")
    with pytest.raises(DomainBertError, match=r"data\.labels=\['spam'\]: classification needs at least two"):
        ClassificationDataModule(train=str(path), labels=["spam"])


@bad_input
@pytest.mark.parametrize("max_length", [0, 1])
def test_a_max_length_too_short_for_any_text_is_refused(max_length):
    with pytest.raises(DomainBertError, match=rf"data\.max_length={max_length}: expected at least 8 tokens"):
        ClassificationDataModule(train="unused.jsonl", max_length=max_length)


# -- the command line ---------------------------------------------------------------------------------


@bad_input
def test_a_negative_mlm_batch_size_is_one_line(tiny_bert, tmp_path, capsys):
    err = cli_error(
        capsys,
        ["fit", "--config", TINY_MLM, "--model.init_from", str(tiny_bert), "--data.batch_size", "-1"]
        + ["--trainer.default_root_dir", str(tmp_path)],
    )
    assert "data.batch_size=-1: expected at least 1" in err


@bad_input
def test_mlm_nsp_without_sentence_pairs_is_refused(tiny_bert, tmp_path, capsys):
    err = cli_error(
        capsys,
        ["fit", "--config", TINY_MLM, "--model.init_from", str(tiny_bert), "--model.objective", "mlm+nsp"]
        + ["--trainer.default_root_dir", str(tmp_path), "--trainer.max_steps", "1"],
    )
    assert "model.objective 'mlm+nsp' needs sentence pairs, but data.nsp is false" in err
