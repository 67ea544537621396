"""Domain vocabulary: new words become one token, new rows start as the mean of their old pieces, and saves reload."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoTokenizer, BertModel

from domainbert import cli
from domainbert.adapt import vocab, vocab_cli
from domainbert.errors import DomainBertError
from tests.helpers.tiny import FAMILIES
from tests.helpers.vocab import lines, load, mlm_bias, span_ids


@pytest.mark.parametrize("family", FAMILIES)
def test_cli_extend_saves_a_loadable_model(tiny_models, corpus_file, tmp_path, family):
    src = tiny_models[family]
    out = tmp_path / "ext"
    cli.main(["vocab", "extend", "--model", str(src), "--corpus", str(corpus_file), "--top_k", "6", "--min_freq", "5",
              "--out", str(out)])  # fmt: skip
    model, tok = load(out)
    src_model, src_tok = load(src)
    rows = model.get_input_embeddings().weight
    assert len(tok) == rows.shape[0] == model.config.vocab_size == len(src_tok) + 6
    info = json.loads((out / "vocab_extension.json").read_text(encoding="utf-8"))
    assert info["added"] == 6 and info["tokens_per_word"]["after"] < info["tokens_per_word"]["before"]
    src_rows = src_model.get_input_embeddings().weight
    for w in info["words"]:
        assert tok.convert_tokens_to_ids(w["token"]) == w["id"]
        ids = src_tok.convert_tokens_to_ids(w["old_pieces"])
        assert torch.allclose(rows[w["id"]], src_rows[ids].mean(0), atol=1e-6, rtol=0)
        assert torch.allclose(mlm_bias(model)[w["id"]], mlm_bias(src_model)[ids].mean(0), atol=1e-6, rtol=0)
    word = info["words"][0]["token"].lstrip("▁")
    assert span_ids(tok, f"see {word} here", 4, 4 + len(word)) == [info["words"][0]["id"]]


def test_extend_keeps_the_source_pooler_and_prints_a_summary(tiny_bert, corpus_file, tmp_path, capsys):
    src = tmp_path / "with_pooler"
    torch.manual_seed(1)
    BertModel.from_pretrained(tiny_bert).save_pretrained(src)  # a headless checkpoint with a trained pooler
    AutoTokenizer.from_pretrained(tiny_bert).save_pretrained(src)
    out = tmp_path / "ext"
    vocab_cli.main(["extend", "--model", str(src), "--corpus", str(corpus_file), "--top_k", "3", "--min_freq", "5",
                "--out", str(out)])  # fmt: skip
    saved = load_file(str(out / "model.safetensors"))
    pooler = load_file(str(src / "model.safetensors"))["pooler.dense.weight"]
    assert torch.equal(saved["bert.pooler.dense.weight"], pooler)
    printed = capsys.readouterr().out
    assert "added 3 tokens" in printed and "tokens per word" in printed


def test_extend_refuses_to_overwrite(tiny_bert, corpus_file, tmp_path):
    out = tmp_path / "ext"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    args = ["extend", "--model", str(tiny_bert), "--corpus", str(corpus_file), "--top_k", "2", "--min_freq", "5"]
    with pytest.raises(DomainBertError, match="exists and was not written by domainbert"):
        vocab_cli.main([*args, "--out", str(out)])
    assert (out / "keep.txt").read_text() == "mine"
    vocab_cli.main([*args, "--out", str(out), "--overwrite", "true"])
    assert not (out / "keep.txt").exists() and (out / "tokenizer.json").exists()


@pytest.mark.parametrize("content", [None, "", "\n\n\n"], ids=["missing", "empty", "blank"])
def test_bad_corpus_names_the_file(tiny_bert, tmp_path, capsys, content):
    corpus = tmp_path / "corpus.txt"
    if content is not None:
        corpus.write_text(content)
    out = tmp_path / "ext"
    with pytest.raises(SystemExit) as exc:
        cli.main(["vocab", "extend", "--model", str(tiny_bert), "--corpus", str(corpus), "--out", str(out)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"domainbert: error: {corpus}" in err and "Traceback" not in err
    assert not out.exists()


def test_help_shows_docstrings(capsys):
    with pytest.raises(SystemExit) as exc:
        vocab_cli.main(["extend", "--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    assert "--top_k" in text and "the fewest occurrences a word needs" in text


@pytest.mark.parametrize("lowercase", [True, False])
def test_train_wordpiece(corpus_file, tmp_path, lowercase):
    out = tmp_path / "tok"
    cli.main(["vocab", "train", "--corpus", str(corpus_file), "--vocab_size", "300", "--out", str(out),
              "--lowercase", str(lowercase).lower()])  # fmt: skip
    tok = AutoTokenizer.from_pretrained(out)
    assert type(tok).__name__ == "BertTokenizer" and 100 < len(tok) <= 300
    assert tok.convert_tokens_to_ids(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]) == [0, 1, 2, 3, 4]
    line = lines(corpus_file)[0]
    enc = tok(line)
    assert enc["input_ids"][0] == tok.cls_token_id and enc["input_ids"][-1] == tok.sep_token_id
    assert tok.unk_token_id not in enc["input_ids"]
    assert ("The" in tok.tokenize(line)) is (not lowercase)
    assert tok.decode(enc["input_ids"], skip_special_tokens=True).split()[1:3] == [
        w.lower() if lowercase else w for w in line.split()[1:3]
    ]


def test_train_bad_input(tmp_path):
    with pytest.raises(DomainBertError, match="nothing.txt"):
        vocab_cli.main(["train", "--corpus", str(tmp_path / "nothing.txt"), "--out", str(tmp_path / "t")])
    with pytest.raises(DomainBertError, match="vocab_size=3"):
        vocab.train_wordpiece(["some text"], vocab_size=3)


def test_a_refused_out_is_reported_before_torch_or_transformers_load(tmp_path):
    # `vocab extend --out ~` is refused in the time the check takes, not after seconds of imports
    import subprocess
    import sys

    home = tmp_path / "home"
    (home / "docs").mkdir(parents=True)
    script = (
        "import sys\nfrom domainbert.cli import main\ntry:\n"
        f"    main(['vocab', 'extend', '--model', 'never-loaded', '--corpus', {str(tmp_path / 'c.txt')!r}, "
        "'--out', '~', '--overwrite', 'true'])\nexcept SystemExit as done:\n"
        "    print('exit', done.code, sorted({'torch', 'transformers'} & set(sys.modules)))\n"
    )
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "DOMAINBERT_LOG": "ERROR"}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert proc.stdout.strip().splitlines()[-1] == "exit 2 []", proc.stderr
    assert "it is a home folder; it is never an output, even with --overwrite" in proc.stderr
    assert sorted(p.name for p in home.iterdir()) == ["docs"]
