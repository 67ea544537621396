"""The MLM head's unigram bias counts the training split's token ids straight from its tokenized arrow column.

The count equals a hand count of the texts' tokens, and the count of the unmasked ids of every training batch
(what the bias used to read through the loader); a data module without a tokenized split falls back to the loader.
"""

import math
from collections import Counter

import numpy as np
import pytest
import torch
from transformers import AutoModelForMaskedLM, AutoTokenizer

from domainbert.core.mlm_head import count_ids, head_parts, unigram_bias_from_data
from domainbert.data.corpus import CorpusDataModule, _spaced, spaced_slices

TEXTS = ["apt installs packages", "dpkg unpacks the packages", "the kernel boots", "apt updates the lists"]


def _module(tokenizer, path, packing: bool, batch_size: int = 3) -> CorpusDataModule:
    path.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    length = 8 if packing else 64  # packed: several blocks, remainders carried over; line by line: nothing cut
    dm = CorpusDataModule(train=str(path), val_ratio=0.0, max_length=length, packing=packing, batch_size=batch_size)
    dm.connect(tokenizer)
    dm.setup("fit")
    return dm


def _hand_count(tokenizer, texts: list[str], vocab_size: int) -> np.ndarray:
    """How often each id occurs in the texts tokenized one by one, special ids (``[UNK]`` too) left out."""
    found = Counter(i for t in texts for i in tokenizer(t, add_special_tokens=False)["input_ids"])
    return np.array([found[i] if i not in tokenizer.all_special_ids else 0 for i in range(vocab_size)])


def test_count_ids_equals_a_hand_count_without_the_excluded_ids():
    chunks = [np.array([5, 5, 6, 0], dtype=np.int32), torch.tensor([[5, 7, 0, 0], [12, 1, 1, 9]])]
    counts = count_ids(chunks, vocab_size=10, exclude=[0, 1])
    assert counts.tolist() == [0, 0, 0, 0, 0, 3, 1, 1, 0, 2]  # 12 is past the vocabulary: counted as its last id


@pytest.mark.parametrize("packing", [True, False], ids=["packed", "line-by-line"])
def test_the_split_ids_count_as_the_texts_and_as_the_unmasked_ids_of_every_batch(tiny_bert, tmp_path, packing):
    tokenizer = AutoTokenizer.from_pretrained(tiny_bert)
    dm = _module(tokenizer, tmp_path / "corpus.txt", packing)
    vocab, special = len(tokenizer), tokenizer.all_special_ids
    from_split = count_ids(dm.train_token_ids(10**9), vocab, exclude=special)
    from_batches = count_ids((b["input_ids"] for b in dm.train_dataloader()), vocab, exclude=special)
    assert from_split.sum() > 0
    assert np.array_equal(from_split, _hand_count(tokenizer, TEXTS, vocab))
    assert np.array_equal(from_split, from_batches)


def test_spaced_slices_by_hand():
    assert spaced_slices(10, 4, slices=2) == [(0, 2), (5, 2)]  # gaps of 3 after each slice
    assert spaced_slices(10, 4) == [(0, 1), (2, 1), (5, 1), (7, 1)]  # no more slices than ids: gaps 1, 2, 1, 2
    assert spaced_slices(10, 10) == spaced_slices(10, 99) == [(0, 10)]  # everything: one slice
    assert spaced_slices(10, 0) == spaced_slices(0, 5) == []


@pytest.mark.parametrize(("total", "cap", "slices"), [(10**6, 2**13, 256), (1000, 999, 256), (257, 3, 2)])
def test_spaced_slices_are_disjoint_in_order_and_reach_across_the_split(total, cap, slices):
    found = spaced_slices(total, cap, slices)
    assert len(found) == min(slices, cap) and sum(length for _, length in found) == cap
    ends = [start + length for start, length in found]
    assert found[0][0] == 0 and all(end <= start for end, (start, _) in zip(ends, found[1:]))
    assert ends[-1] <= total and total - ends[-1] <= (total - cap) // len(found) + 1  # the last gap, one share


def test_the_spaced_ids_are_read_across_the_column_chunks():
    import pyarrow as pa

    column = pa.chunked_array([pa.array([[0, 1], [2]]), pa.array([[3, 4, 5], [6, 7, 8, 9]])])
    assert np.concatenate(list(_spaced(column, 8, slices=2))).tolist() == [0, 1, 2, 3, 5, 6, 7, 8]
    assert np.concatenate(list(_spaced(column, 4))).tolist() == [0, 2, 5, 7]
    assert np.concatenate(list(_spaced(column, 100))).tolist() == list(range(10))


def test_the_cap_counts_evenly_spaced_ids_of_the_split(tiny_bert, tmp_path):
    dm = _module(AutoTokenizer.from_pretrained(tiny_bert), tmp_path / "corpus.txt", packing=True)
    everything = np.concatenate(list(dm.train_token_ids(10**9)))
    positions = [s for s, _ in spaced_slices(len(everything), 7)]  # 7 slices of one id each
    assert np.array_equal(np.concatenate(list(dm.train_token_ids(7))), everything[positions])
    assert positions[-1] >= len(everything) * 6 // 7 - 1  # the last one from the end of the split, not its start
    assert list(dm.train_token_ids(0)) == []


def test_sentence_pairs_have_no_split_ids_and_their_loader_is_counted(tiny_bert, tmp_path, monkeypatch):
    tokenizer = AutoTokenizer.from_pretrained(tiny_bert)
    (tmp_path / "corpus.txt").write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    dm = CorpusDataModule(train=str(tmp_path / "corpus.txt"), val_ratio=0.0, max_length=32, batch_size=2, nsp=True)
    dm.connect(tokenizer)
    dm.setup("fit")
    assert dm.train_token_ids(10**9) is None
    batches = [{"input_ids": torch.tensor([[5, 5, 6, 0]])}]
    monkeypatch.setattr(dm, "train_dataloader", lambda: batches)  # the fallback reads the loader: these batches
    bias = _bias_after(tiny_bert, dm, exclude=[0])
    total = bias.shape[0] + 3
    assert bias[5].item() == pytest.approx(math.log(3 / total), rel=1e-5)


class _LoaderOnly:
    """A data module without a tokenized split: only its training loader."""

    def __init__(self, batches: list[dict]) -> None:
        self.batches = batches

    def train_dataloader(self) -> list[dict]:
        return self.batches


def _bias_after(tiny_bert, datamodule, exclude: list[int], **kw) -> torch.Tensor:
    model = AutoModelForMaskedLM.from_pretrained(tiny_bert)
    assert unigram_bias_from_data(model, datamodule, exclude=exclude, **kw)
    return head_parts(model)[2].detach().clone()


def test_a_data_module_without_a_tokenized_split_has_its_first_batches_counted(tiny_bert):
    batches = [{"input_ids": torch.tensor([[5, 5, 6, 0]])}, {"input_ids": torch.tensor([[5, 7, 0, 0]])}]
    bias = _bias_after(tiny_bert, _LoaderOnly(batches), exclude=[0], max_batches=1)
    total = bias.shape[0] + 3  # add-one smoothing over the vocabulary, plus the 3 non-pad ids of the first batch
    assert bias[5].item() == pytest.approx(math.log(3 / total), rel=1e-5)
    assert bias[7].item() == pytest.approx(math.log(1 / total), rel=1e-5)  # in the second batch: not read


def test_a_corpus_bias_is_read_from_the_split_not_the_loader(tiny_bert, tmp_path, monkeypatch):
    tokenizer = AutoTokenizer.from_pretrained(tiny_bert)
    dm = _module(tokenizer, tmp_path / "corpus.txt", packing=True)
    monkeypatch.setattr(dm, "train_dataloader", lambda: pytest.fail("the loader was read"))
    bias = _bias_after(tiny_bert, dm, exclude=tokenizer.all_special_ids)
    expected = _hand_count(tokenizer, TEXTS, bias.shape[0]) + 1.0
    assert torch.allclose(bias.double(), torch.tensor(np.log(expected / expected.sum())), atol=1e-5)


@pytest.mark.parametrize("module_class", ["mlm", "tsdae"])
def test_a_headless_checkpoint_gets_the_bias_of_its_corpus_at_setup(tiny_bert, tmp_path, monkeypatch, module_class):
    from transformers import AutoModel

    from domainbert.modules.mlm import MaskedLMModule
    from domainbert.modules.tsdae import TsdaeModule

    bare = tmp_path / "bare"
    AutoModel.from_pretrained(tiny_bert).save_pretrained(bare)
    tokenizer = AutoTokenizer.from_pretrained(tiny_bert)
    tokenizer.save_pretrained(bare)
    module = MaskedLMModule(str(bare)) if module_class == "mlm" else TsdaeModule(str(bare), pooling="mean")
    dm = _module(tokenizer, tmp_path / "corpus.txt", packing=module_class == "mlm")
    monkeypatch.setattr(module, "attached_datamodule", lambda: dm)
    module.setup("fit")
    bias = head_parts(module.model if module_class == "mlm" else module.decoder)[2]
    expected = _hand_count(tokenizer, TEXTS, bias.shape[0]) + 1.0
    assert torch.allclose(bias.double(), torch.tensor(np.log(expected / expected.sum())), atol=1e-5)
