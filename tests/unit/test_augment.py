"""Augmentation: each operation on its own, seeding, the synonym file, the masked-LM proposals, train-only use."""

import random
from collections import Counter
from pathlib import Path

import pytest

from domainbert.data.augment import Augmenter, AugmentSettings, as_settings, load_synonyms, random_delete, random_swap
from domainbert.errors import DomainBertError

FIX = Path(__file__).resolve().parents[1] / "fixtures"
SYN = FIX / "syn_synonyms.txt"
TEXT = "The fast server parses network packets with a simple tool."


def test_synonym_file_groups_are_symmetric(tmp_path):
    table = load_synonyms(SYN)
    assert sorted(table["fast"]) == ["quick", "rapid"]
    assert table["quick"] == ["fast", "rapid"]
    assert table["daemon"] == ["server"]
    bad = tmp_path / "syn.txt"
    bad.write_text("fast, quick\nlonely\n", encoding="utf-8")
    with pytest.raises(DomainBertError, match="line 2"):
        load_synonyms(bad)


def test_zero_probabilities_change_nothing():
    aug = Augmenter(AugmentSettings(synonyms=str(SYN)))
    assert not aug.active
    assert aug(TEXT, random.Random(0)) == TEXT


def test_synonym_replacement_keeps_case_and_punctuation():
    aug = Augmenter(AugmentSettings(synonyms=str(SYN), synonym_prob=1.0))
    out = aug("Fast, server parses tool.", random.Random(0)).split()
    assert out[0] in ("Quick,", "Rapid,")
    assert out[1] == "daemon"
    assert out[2] in ("reads", "analyses")
    assert out[3] in ("utility.", "program.")


def test_insert_swap_delete():
    rng = random.Random(0)
    words = TEXT.split()
    swapped = random_swap(words, rng, 0.5)
    assert Counter(swapped) == Counter(words) and swapped != words
    assert random_delete(words, rng, 1.0) in [[w] for w in words]  # never empty
    kept = random_delete(words, random.Random(1), 0.3)
    assert 0 < len(kept) < len(words) and all(w in words for w in kept)
    aug = Augmenter(AugmentSettings(synonyms=str(SYN), insert_prob=1.0))
    inserted = aug("fast tool", random.Random(0)).split()
    assert len(inserted) == 4 and Counter(inserted) - Counter(["fast", "tool"])
    assert set(inserted) - {"fast", "tool"} <= {"quick", "rapid", "utility", "program"}


def test_seeded_per_row_and_epoch():
    aug = Augmenter(AugmentSettings(swap_prob=0.3, delete_prob=0.2, seed=7))
    a = aug(TEXT, aug.rng(epoch=0, index=3))
    assert a == aug(TEXT, aug.rng(epoch=0, index=3))
    variants = {aug(TEXT, aug.rng(epoch=e, index=3)) for e in range(6)}
    assert len(variants) > 2


def test_settings_are_checked():
    with pytest.raises(DomainBertError, match="delete_prob"):
        as_settings({"delete_prob": 1.5})
    with pytest.raises(DomainBertError, match="synonyms"):
        as_settings({"synonym_prob": 0.1})
    with pytest.raises(DomainBertError, match="mlm_model"):
        as_settings({"mlm_prob": 0.1})
    with pytest.raises(DomainBertError, match="unknown"):
        as_settings({"bogus": 1})


def test_masked_lm_contextual_replacement(tiny_bert):
    aug = Augmenter(AugmentSettings(mlm_model=str(tiny_bert), mlm_prob=1.0, mlm_top_k=5))
    text = "the server parses network packets"
    out = aug(text, random.Random(0))
    assert out == aug(text, random.Random(0))  # deterministic given the generator
    words, new = text.split(), out.split()
    assert len(new) == len(words) and new != words
    vocab = aug.mlm._tokenizer.get_vocab()
    assert all(w in vocab and w.isalpha() for w, old in zip(new, words) if w != old)


def test_masked_lm_is_loaded_only_when_used(tiny_bert):
    # an Augmenter loads its masked LM on first use, and only when contextual replacement is on (that importing
    # the data layer loads no model code is checked in a fresh interpreter: tests/integration/test_import_footprint.py)
    assert Augmenter(AugmentSettings(mlm_model=str(tiny_bert), mlm_prob=0.0, delete_prob=0.1)).mlm is None
    aug = Augmenter(AugmentSettings(mlm_model=str(tiny_bert), mlm_prob=0.5))
    assert aug.mlm is not None and aug.mlm._model is None


def test_datamodule_augments_training_text_only(tiny_bert):
    from transformers import AutoTokenizer

    from domainbert.data.classification import ClassificationDataModule

    tok = AutoTokenizer.from_pretrained(tiny_bert)
    dm = ClassificationDataModule(
        train=str(FIX / "cls_train.jsonl"),
        val=str(FIX / "cls_val.jsonl"),
        batch_size=4,
        augment=AugmentSettings(delete_prob=0.3, swap_prob=0.2, seed=1),
    )
    dm.connect(tok)
    dm.setup("fit")
    train, val = dm.datasets["train"], dm.datasets["validation"]
    raw = dm.raw("train")
    plain = [tok(raw[i]["text"], truncation=True, max_length=128)["input_ids"] for i in range(10)]
    epoch0 = [train[(i, 0)]["input_ids"] for i in range(10)]
    assert epoch0 == [train[(i, 0)]["input_ids"] for i in range(10)]  # reproducible
    assert epoch0 != plain
    assert [train[(i, 1)]["input_ids"] for i in range(10)] != epoch0  # a new variant each epoch
    assert [train[(i, 0)]["labels"] for i in range(10)] == [dm.label2id[raw[i]["label"]] for i in range(10)]
    assert [val[i]["input_ids"] for i in range(5)] == [
        tok(dm.raw("validation")[i]["text"], truncation=True, max_length=128)["input_ids"] for i in range(5)
    ]
    loader = dm.train_dataloader()
    loader.sampler.set_epoch(2)
    batch = next(iter(loader))
    assert batch["input_ids"].shape[0] == 4 and batch["labels"].shape == (4,)
