import gzip
from pathlib import Path

import datasets
import lightning.pytorch as L
import pytest
from transformers import AutoTokenizer

from domainbert.core.callbacks import TrainingGuard
from domainbert.data.corpus import CorpusDataModule, CorpusTokenizer
from domainbert.data.token_cache import fingerprint, tokenizer_fingerprint
from domainbert.errors import DomainBertError
from domainbert.modules.mlm import MaskedLMModule


def _dm(tok, train, **kw):
    dm = CorpusDataModule(train=str(train), **kw)
    dm.connect(tok)
    dm.setup("fit")
    return dm


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_packing_loses_no_tokens(tiny_models, corpus_file, family):
    tok = AutoTokenizer.from_pretrained(tiny_models[family])
    dm = _dm(tok, corpus_file, val_ratio=0.0, max_length=32)
    lines = [line for line in corpus_file.read_text().splitlines() if line.strip()]
    sep = tok.sep_token_id
    expected = []
    for line in lines:
        expected += tok(line, add_special_tokens=False)["input_ids"] + [sep]
    got = []
    for i in range(len(dm.train_ds)):
        ids = dm.train_ds[i]["input_ids"].tolist()
        assert ids[0] == tok.cls_token_id and ids[-1] == sep
        assert len(ids) <= 32
        got += ids[1:-1]
    assert got == expected
    assert all(len(dm.train_ds[i]["input_ids"]) == 32 for i in range(len(dm.train_ds) - 1))


def test_split_is_deterministic_and_disjoint(tiny_bert, corpus_file):
    tok = AutoTokenizer.from_pretrained(tiny_bert)
    a = _dm(tok, corpus_file, val_ratio=0.1, packing=False, max_length=64)
    b = _dm(tok, corpus_file, val_ratio=0.1, packing=False, max_length=64)
    va = [tuple(a.val_ds[i]["input_ids"]) for i in range(len(a.val_ds))]
    vb = [tuple(b.val_ds[i]["input_ids"]) for i in range(len(b.val_ds))]
    assert va == vb and len(va) == 40
    batch = next(iter(a.train_dataloader()))
    assert batch["input_ids"].shape == batch["attention_mask"].shape
    assert "token_type_ids" in batch  # BERT uses segment ids


def test_formats_jsonl_csv_gz_and_folder(tiny_bert, tmp_path):
    tok = AutoTokenizer.from_pretrained(tiny_bert)
    (tmp_path / "a.jsonl").write_text('{"body": "the daemon parses packets"}\n{"body": "the library renders"}\n')
    dm = _dm(tok, tmp_path / "a.jsonl", text_column="body", val_ratio=0.0, packing=False)
    assert len(dm.train_ds) == 2
    with gzip.open(tmp_path / "c.txt.gz", "wt") as fh:
        fh.write("one line here\n\nsecond line there\n")
    dm = _dm(tok, tmp_path / "c.txt.gz", val_ratio=0.0, packing=False)
    assert len(dm.train_ds) == 2  # the blank line is skipped
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "x.txt").write_text("first paragraph line\nstill first\n\nsecond paragraph\n")
    dm = _dm(tok, folder, val_ratio=0.0, packing=False, text_mode="paragraph")
    assert len(dm.train_ds) == 2


def test_bad_inputs_name_the_file_and_column(tiny_bert, tmp_path):
    tok = AutoTokenizer.from_pretrained(tiny_bert)
    with pytest.raises(DomainBertError, match="no such file"):
        _dm(tok, tmp_path / "missing.txt")
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(DomainBertError, match="empty.txt: the file is empty"):
        _dm(tok, tmp_path / "empty.txt")
    (tmp_path / "blank.txt").write_text("\n\n   \n")
    with pytest.raises(DomainBertError, match="no non-empty text"):
        _dm(tok, tmp_path / "blank.txt")
    (tmp_path / "d.jsonl").write_text('{"body": "x"}\n')
    with pytest.raises(DomainBertError, match=r"d.jsonl: no column 'text'.*body"):
        _dm(tok, tmp_path / "d.jsonl")
    (tmp_path / "latin.txt").write_bytes("good line\ncaf\xe9 au lait\n".encode("latin-1"))
    with pytest.raises(DomainBertError, match=r"latin.txt: line 2: .*not valid UTF-8"):
        _dm(tok, tmp_path / "latin.txt")
    dm = CorpusDataModule(train=str(tmp_path / "x.txt"))
    with pytest.raises(DomainBertError, match="connect"):
        dm.setup("fit")


def _cache_files() -> set[Path]:
    return set(Path(datasets.config.HF_DATASETS_CACHE).rglob("cache-*.arrow"))


def test_tokenization_is_cached_across_runs_under_the_trainer(tiny_bert, corpus_file, tmp_path, monkeypatch):
    """Once ``datasets`` could not hash the tokenize closure (it held the datamodule, through it the trainer
    and its callbacks), used a random fingerprint, and tokenized again on every run. A second run (a new datamodule and
    module, as a new process has) now finds the tokenized arrow files and never calls the tokenizer."""
    corpus = tmp_path / "corpus.txt"  # a file of its own: no other test's cache can serve it
    corpus.write_bytes(corpus_file.read_bytes())
    tok_cls = type(AutoTokenizer.from_pretrained(tiny_bert))
    original, calls = tok_cls.__call__, []

    def counting(self, *args, **kwargs):
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(tok_cls, "__call__", counting)

    def run() -> None:
        module = MaskedLMModule(str(tiny_bert), head_warmup_steps=0)
        dm = CorpusDataModule(train=str(corpus), val_ratio=0.1, max_length=32, batch_size=8)
        dm.connect(module.tokenizer)
        quiet = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False}
        quiet["callbacks"] = [TrainingGuard()]  # as under the CLI; it holds a ctypes handle, which dill cannot pickle
        L.Trainer(max_steps=1, limit_val_batches=0, enable_model_summary=False, default_root_dir=tmp_path, **quiet).fit(
            module, dm
        )

    run()
    first, files = len(calls), _cache_files()
    assert first > 0 and files
    run()
    assert len(calls) == first  # the second run tokenized nothing
    assert _cache_files() == files  # and wrote no new cache file
    # the fingerprint follows the tokenizer's content and the settings, not the objects' identity
    tok = AutoTokenizer.from_pretrained(tiny_bert)
    assert tokenizer_fingerprint(tok) == tokenizer_fingerprint(AutoTokenizer.from_pretrained(tiny_bert))
    extended = AutoTokenizer.from_pretrained(tiny_bert)
    extended.add_tokens(["kernelspace"])  # as `domainbert vocab extend` does
    assert tokenizer_fingerprint(extended) != tokenizer_fingerprint(tok)
    ds = datasets.Dataset.from_dict({"text": ["a b"]})
    assert fingerprint(ds, CorpusTokenizer(tok, 32, 3)) != fingerprint(ds, CorpusTokenizer(tok, 64, 3))
    assert fingerprint(ds, CorpusTokenizer(tok, 32, 3)) == fingerprint(ds, CorpusTokenizer(tok, 32, 3))
