"""Long texts in windows (``data.long_text: windows``): tokenizing, collating, the mean over windows, the record."""

import json
import math

import pytest
import torch
from transformers import AutoTokenizer

from domainbert.core.embed import mean_pool
from domainbert.data.batching import Collator
from domainbert.data.classification import ClassificationDataModule
from domainbert.data.windows import (
    CONFIG_KEY,
    WINDOW_MASK,
    Windows,
    align_windows,
    default_stride,
    recorded,
    tokenize_windows,
    window_mean,
)
from domainbert.errors import DomainBertError
from domainbert.modules.classification import SequenceClassificationModule
from domainbert.modules.probe_init import embed_batches
from tests.helpers import FIX

LABELS = ["api", "graphics", "network"]
SHORT = ["The tool parses graphical images.", "The client exports api modules over secure sockets."]


def _texts(n: int = 15) -> list[str]:
    return [json.loads(line)["text"] for line in (FIX / "cls_train.jsonl").read_text().splitlines()[:n]]


def long_text(n: int = 15) -> str:
    """About ten words of each of ``n`` fixture texts: far more than a window of 32 tokens."""
    return " ".join(_texts(n))


def write_rows(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.fixture(scope="module")
def tok(tiny_bert):
    return AutoTokenizer.from_pretrained(tiny_bert)


def _module(tiny_bert, pooling="mean"):
    return SequenceClassificationModule(str(tiny_bert), label_names=LABELS, pooling=pooling).eval()


def _dm(tmp_path, texts, **kw):
    rows = [{"text": t, "label": LABELS[i % 3]} for i, t in enumerate(texts)]
    args = {"train": write_rows(tmp_path / "train.jsonl", rows), "batch_size": len(texts), "max_length": 32}
    return ClassificationDataModule(**{**args, **kw})


def _batch(dm, tok, split="train"):
    dm.connect(tok)
    dm.setup("fit")
    ds = dm.datasets[split]
    return Collator(tok)([ds[i] for i in range(len(ds))])


# -- tokenizing -------------------------------------------------------------------------------------


def test_a_long_text_becomes_overlapping_windows_that_cover_it(tok):
    text, windows = long_text(), Windows(max_length=32, stride=8, max_windows=100)
    content = tok(text, add_special_tokens=False)["input_ids"]
    room = 32 - tok.num_special_tokens_to_add()
    got = tokenize_windows(tok, [text], windows)["input_ids"][0]
    assert len(got) == 1 + math.ceil((len(content) - room) / (room - 8)) > 3
    inner = [w[1:-1] for w in got]  # [CLS] ... [SEP]
    assert all(len(w) == room for w in inner[:-1])
    for a, b in zip(inner, inner[1:]):
        assert a[-8:] == b[:8]  # consecutive windows share exactly `stride` tokens
    assert inner[0] + [t for w in inner[1:] for t in w[8:]] == content  # and together hold the whole text


def test_windows_are_capped_per_text_and_a_short_text_is_one_window(tok):
    enc = tokenize_windows(tok, [long_text(), SHORT[0]], Windows(32, 8, max_windows=3))
    assert [len(w) for w in enc["input_ids"]] == [3, 1]
    assert enc["input_ids"][1][0] == tok(SHORT[0], truncation=True, max_length=32)["input_ids"]
    uncapped = tokenize_windows(tok, [long_text()], Windows(32, 8, max_windows=100))["input_ids"][0]
    assert enc["input_ids"][0] == uncapped[:3]  # the first windows are kept


def test_the_default_stride_is_a_quarter_window_and_the_default_path_truncates(tmp_path):
    assert default_stride(128) == 32
    assert _dm(tmp_path, SHORT).windows is None
    assert _dm(tmp_path, SHORT, long_text="truncate").windows is None
    assert _dm(tmp_path, SHORT, long_text="windows").windows == Windows(32, 8, 8)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"long_text": "chunks"}, r"data.long_text='chunks': expected truncate or windows"),
        ({"long_text": "windows", "stride": 32}, r"data.stride=32: expected 0 <= stride < data.max_length \(32\)"),
        ({"long_text": "windows", "max_windows": 0}, r"data.max_windows=0: expected at least 1"),
        ({"long_text": "windows", "text_pair_column": "text"}, r"does not take text pairs"),
    ],
)
def test_bad_window_options_are_one_line_errors(tmp_path, kw, match):
    with pytest.raises(DomainBertError, match=match) as err:
        _dm(tmp_path, SHORT, **kw)
    assert "\n" not in str(err.value)


def test_a_stride_that_leaves_no_room_is_named(tok):
    with pytest.raises(DomainBertError, match=r"data.stride=30: a window of 32 tokens holds 30 tokens of text"):
        tokenize_windows(tok, SHORT, Windows(32, 30, 8))


# -- batching ---------------------------------------------------------------------------------------


def test_collation_keeps_each_texts_windows_together(tmp_path, tok):
    texts = [SHORT[0], long_text(15), long_text(6)]
    dm = _dm(tmp_path, texts, long_text="windows", stride=8)
    dm.connect(tok)
    dm.setup("fit")
    ds = dm.datasets["train"]
    counts = [len(ds[i]["input_ids"]) for i in range(3)]
    assert counts[0] == 1 and counts[1] > counts[2] > 1
    batch = next(iter(dm.train_dataloader()))  # shuffled: text i has label id i
    order = batch["labels"].tolist()
    assert sorted(order) == [0, 1, 2]
    mask = batch[WINDOW_MASK]
    assert batch["input_ids"].shape[:2] == mask.shape == (3, max(counts))
    assert mask.sum(1).tolist() == [counts[i] for i in order]
    for row, i in enumerate(order):
        for j, window in enumerate(ds[i]["input_ids"]):
            n = len(window)
            assert batch["input_ids"][row, j, :n].tolist() == window
            assert batch["attention_mask"][row, j].sum() == n
    padding = ~mask
    assert (batch["input_ids"][padding] == tok.pad_token_id).all() and (batch["attention_mask"][padding] == 0).all()


def test_length_grouping_counts_a_texts_tokens_over_its_windows(tmp_path, tok):
    dm = _dm(tmp_path, [SHORT[0], long_text()], long_text="windows", stride=8)
    dm.connect(tok)
    dm.setup("fit")
    ds = dm.datasets["train"]
    assert dm.lengths(ds) == [sum(len(w) for w in ds[i]["input_ids"]) for i in range(2)]


# -- the mean over windows --------------------------------------------------------------------------


def test_window_mean_is_the_mean_of_each_texts_real_windows():
    values = torch.tensor([[1.0, 2.0], [3.0, 6.0], [5.0, 1.0], [7.0, 7.0]])
    mask = torch.tensor([[True, False, False], [True, True, True]])
    expected = torch.tensor([[1.0, 2.0], [5.0, 14 / 3]])
    torch.testing.assert_close(window_mean(values, mask), expected)


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_logits_are_the_head_on_the_mean_of_the_windows_pooled_vectors(tmp_path, tok, tiny_bert, pooling):
    module = _module(tiny_bert, pooling)
    texts = [long_text(15), SHORT[0], long_text(5)]
    dm = _dm(tmp_path, texts, long_text="windows", stride=8)
    dm.connect(tok)
    dm.setup("fit")
    batch = Collator(tok)([dm.datasets["train"][i] for i in range(3)])
    with torch.no_grad():
        logits = module(batch)
        model = module.model
        expected = []
        for i in range(3):
            pooled = []
            for window in dm.datasets["train"][i]["input_ids"]:  # each window on its own, unpadded
                ids = torch.tensor([window])
                inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
                if pooling == "mean":
                    pooled.append(mean_pool(model.bert(**inputs).last_hidden_state, inputs["attention_mask"]))
                else:
                    pooled.append(model.bert(**inputs).pooler_output)
            expected.append(model.classifier(torch.cat(pooled).mean(0)))  # by hand: mean of pooled, then the head
    torch.testing.assert_close(logits, torch.stack(expected), rtol=1e-5, atol=1e-5)


def test_short_texts_in_windows_give_exactly_the_truncated_logits(tmp_path, tok, tiny_bert):
    module = _module(tiny_bert)
    truncated = _batch(_dm(tmp_path, SHORT), tok)
    windowed = _batch(_dm(tmp_path, SHORT, long_text="windows"), tok)
    assert WINDOW_MASK in windowed and WINDOW_MASK not in truncated
    assert torch.equal(windowed["input_ids"][:, 0], truncated["input_ids"])
    with torch.no_grad():
        assert torch.equal(module(windowed), module(truncated))


def test_the_probe_embeds_each_text_as_the_mean_of_its_windows(tmp_path, tok, tiny_bert, monkeypatch):
    monkeypatch.setattr("domainbert.modules.probe_init.auto_precision", lambda device: "32-true")  # no bf16 here
    module = _module(tiny_bert)
    texts = [long_text(15), SHORT[0]]
    dm = _dm(tmp_path, texts, long_text="windows", stride=8)
    dm.connect(tok)
    dm.setup("fit")
    rows = [dm.datasets["train"][i] for i in range(2)]
    x, y = embed_batches(module.model, [Collator(tok)(rows)])
    with torch.no_grad():
        for i, row in enumerate(rows):
            ids = torch.tensor(row["input_ids"])
            hidden = module.model.bert(input_ids=ids, attention_mask=torch.tensor(row["attention_mask"]))
            want = mean_pool(hidden.last_hidden_state, torch.tensor(row["attention_mask"])).mean(0)
            torch.testing.assert_close(x[i], want, rtol=1e-5, atol=1e-5)
    assert y.tolist() == [0, 1]


# -- the record in the model's config ---------------------------------------------------------------


def test_a_fit_records_the_windows_and_predict_takes_them_back(tmp_path, tok, tiny_bert):
    module = _module(tiny_bert)
    config = module.model.config
    fitted = _dm(tmp_path, SHORT, long_text="windows", stride=8, max_windows=3)
    assert align_windows(fitted, config, fit=True) == Windows(32, 8, 3)
    assert getattr(config, CONFIG_KEY) == {"long_text": "windows", "max_length": 32, "stride": 8, "max_windows": 3}
    assert recorded(config) == Windows(32, 8, 3)

    later = _dm(tmp_path, SHORT)  # long_text left unset: the model's windows
    later.connect(tok)
    later.setup("fit")
    assert not isinstance(later.datasets["train"][0]["input_ids"][0], list)
    assert align_windows(later, config, fit=False) == Windows(32, 8, 3)
    assert later.long_text == "windows" and not later.datasets  # encoded again, in windows, when next loaded
    explicit = _dm(tmp_path, SHORT, long_text="truncate")  # a choice given is kept
    assert align_windows(explicit, config, fit=False) is None

    align_windows(_dm(tmp_path, SHORT, long_text="truncate"), config, fit=True)  # fine-tuned again, truncated
    assert not hasattr(config, CONFIG_KEY) and recorded(config) is None


def test_the_model_card_says_plain_transformers_truncates(tmp_path, tiny_bert):
    module = _module(tiny_bert)
    assert "Long texts" not in module.model_card()
    align_windows(_dm(tmp_path, SHORT, long_text="windows"), module.model.config, fit=True)
    card = module.model_card()
    assert "## Long texts" in card and "windows of 32 tokens overlapping by 8" in card
    assert "`domainbert predict` reads this" in card and "it truncates" in card
