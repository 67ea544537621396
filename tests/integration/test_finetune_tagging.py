"""Token tagging: first-sub-token labels, tag-set checks, every family learns, entity F1, the CLI cycle."""

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from domainbert.cli import main
from domainbert.data.tagging import TaggingDataModule, TaggingEncoder, bio_order
from domainbert.errors import DomainBertError
from domainbert.modules.tagging import TokenClassificationModule

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"
CONFIG = str(ROOT / "configs/finetune/tiny_tagging.yaml")
TAGS = ["O", "B-COMP", "I-COMP", "B-OBJ", "I-OBJ"]


def _dm(**kw):
    args = {"train": str(FIX / "tag_train.jsonl"), "val": str(FIX / "tag_val.jsonl"), "batch_size": 8}
    args.update(kw)
    return TaggingDataModule(**args)


def test_tag_set_order_and_completion():
    assert _dm().label_names == TAGS
    assert bio_order({"B-PER", "O", "I-LOC"}) == ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]


@pytest.mark.parametrize("family", ["bert", "roberta", "albert"])
def test_each_word_is_labelled_on_its_first_sub_token_only(tiny_models, family):
    tok = AutoTokenizer.from_pretrained(tiny_models[family])
    words = ["The", "firmware", "parses", "packets", "."]
    tags = ["O", "B-OBJ", "O", "B-OBJ", "O"]
    enc = TaggingEncoder(tok, "tokens", "tags", {t: i for i, t in enumerate(TAGS)}, max_length=64)
    labels = enc({"tokens": [words], "tags": [tags]})["labels"][0]
    word_ids = tok([words], is_split_into_words=True).word_ids(0)
    assert len(word_ids) > len(words) + 2  # some words are split into several sub-tokens
    firsts = [i for i, w in enumerate(word_ids) if w is not None and (i == 0 or word_ids[i - 1] != w)]
    assert [labels[i] for i in firsts] == [TAGS.index(t) for t in tags]
    assert all(label == -100 for i, label in enumerate(labels) if i not in firsts)


def test_unknown_tag_and_bad_rows_name_the_row(tiny_bert, tmp_path):
    tok = AutoTokenizer.from_pretrained(tiny_bert)
    dm = _dm(val=str(FIX / "tag_val_unknown.jsonl"))
    dm.connect(tok)
    with pytest.raises(DomainBertError) as err:
        dm.setup("fit")
    assert "tag_val_unknown.jsonl" in str(err.value) and "row 2" in str(err.value) and "'B-DATE'" in str(err.value)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"tokens": ["a", "b"], "tags": ["O", "O"]}\n{"tokens": ["a", "b"], "tags": ["O"]}\n')
    dm = _dm(val=str(bad))
    dm.connect(tok)
    with pytest.raises(DomainBertError, match="row 2: 2 words but 1 tags"):
        dm.setup("fit")


@pytest.mark.parametrize("family", ["bert", "roberta", "albert", "distilbert", "electra"])
def test_loss_falls_for_every_family(tiny_models, family):
    torch.manual_seed(0)
    dm = _dm()
    m = TokenClassificationModule(str(tiny_models[family]), num_labels=5, label_names=dm.label_names)
    dm.connect(m.tokenizer)
    dm.setup("fit")
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
    losses = []
    for _ in range(3):
        for batch in dm.train_dataloader():
            loss = m.compute_loss(m(batch), batch["labels"])
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    assert sum(losses[-3:]) / 3 < 0.6 * losses[0]


def test_validation_reports_entity_f1_of_the_word_tags(tiny_bert):
    m = TokenClassificationModule(str(tiny_bert), num_labels=5, label_names=TAGS)
    # two rows; -100 marks sub-tokens and padding
    labels = torch.tensor([[-100, 1, 2, 0, 3, -100], [-100, 1, -100, 0, 3, 4]])
    pred_ids = torch.tensor([[0, 1, 2, 0, 0, 0], [0, 1, 0, 0, 3, 4]])  # the first row misses its OBJ entity
    logits = torch.nn.functional.one_hot(pred_ids, 5).float()
    preds, golds = m.word_tags(logits, labels)
    assert golds == [["B-COMP", "I-COMP", "O", "B-OBJ"], ["B-COMP", "O", "B-OBJ", "I-OBJ"]]
    m.val_f1.update(preds, golds)
    s = m.val_f1.scores()  # 4 gold entities, 3 predicted, all 3 right
    assert s["precision"].item() == pytest.approx(1.0)
    assert s["recall"].item() == pytest.approx(0.75)
    assert s["f1"].item() == pytest.approx(2 * 0.75 / 1.75)


def test_cli_fit_test_predict(tiny_bert, tmp_path, capsys):
    common = ["--config", CONFIG, "--model.init_from", str(tiny_bert), "--trainer.default_root_dir", str(tmp_path)]
    main(["fit", *common, "--model.learning_rate", "3e-3", "--trainer.max_epochs", "2"])
    run = tmp_path / "tiny_tagging" / "version_0"
    from transformers import AutoModelForTokenClassification

    exported = AutoModelForTokenClassification.from_pretrained(run / "hf")
    assert exported.config.id2label == dict(enumerate(TAGS))
    best = next((run / "checkpoints").glob("best-*.ckpt"))
    capsys.readouterr()
    main(["test", *common, "--ckpt_path", str(best)])
    out = capsys.readouterr().out
    assert "test/f1" in out and "test/precision" in out and "test/recall" in out
    main(["predict", *common, "--ckpt_path", str(best)])
    rows = [
        json.loads(x)
        for x in next(tmp_path.glob("tiny_tagging/version_*/predictions.jsonl")).read_text().split("\n")
        if x
    ]
    assert len(rows) == 10
    assert all(len(r["tags"]) == len(r["tokens"]) and set(r["tags"]) <= set(TAGS) for r in rows)
    assert all(len(r["gold"]) == len(r["tokens"]) for r in rows)  # the file's own tags, kept beside
