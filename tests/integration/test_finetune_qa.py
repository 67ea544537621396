"""Extractive QA: windows with a stride, spans mapped back to text, best span over windows, the CLI cycle."""

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from domainbert.cli import main
from domainbert.data.qa import QADataModule, QAEncoder
from domainbert.errors import DomainBertError
from domainbert.modules.qa import QuestionAnsweringModule, best_span

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"
CONFIG = str(ROOT / "configs/finetune/tiny_qa.yaml")


def _rows(name):
    return [json.loads(x) for x in (FIX / name).read_text().splitlines()]


@pytest.mark.parametrize("family", ["bert", "roberta", "albert"])
def test_windows_overlap_and_answer_spans_map_back_to_the_text(tiny_models, family):
    tok = AutoTokenizer.from_pretrained(tiny_models[family])
    rows = _rows("qa_train.jsonl")[:4]
    batch = {k: [r[k] for r in rows] for k in rows[0]}
    enc = QAEncoder(tok, "question", "context", "answers", "id", max_length=48, stride=16, keep_meta=True)
    out = enc(batch, indices=list(range(4)))
    assert all(out["example"].count(i) >= 2 for i in range(4))  # every long context is split into windows
    assert all(len(ids) <= 48 for ids in out["input_ids"])
    found = set()
    for i, ex in enumerate(out["example"]):
        s, e = out["start_positions"][i], out["end_positions"][i]
        offsets, gold = out["offsets"][i], rows[ex]["answers"]["text"][0]
        if offsets[s] is None:  # the answer is not in this window: both point at the first token
            assert s == e == 0
            continue
        assert rows[ex]["context"][offsets[s][0] : offsets[e][1]] == gold
        found.add(ex)
    assert found == {0, 1, 2, 3}
    # consecutive windows of one context overlap (the stride)
    first = [i for i, ex in enumerate(out["example"]) if ex == 0]
    spans = [[o for o in out["offsets"][i] if o is not None] for i in first[:2]]
    assert spans[1][0][0] < spans[0][-1][1]


def test_best_span_rules():
    offsets = [None, None, (0, 3), (4, 7), (8, 11), None]
    start = [9.0, 0.0, 1.0, 5.0, 0.0, 9.0]
    end = [9.0, 0.0, 0.0, 1.0, 4.0, 9.0]
    # the question/special tokens (None) never win, however high their scores
    assert best_span(start, end, offsets) == (9.0, 4, 11)
    # spans longer than max_answer_length are skipped
    assert best_span(start, end, offsets, max_answer_length=1) == (6.0, 4, 7)
    # an end before the start is not a span
    assert best_span([0, 0, 0, 0, 5], [0, 0, 5, 0, 0], [(0, 1)] * 5) == (5.0, 0, 1)
    assert best_span([1.0], [1.0], [None]) is None


def test_answer_is_the_best_span_over_all_windows(tiny_bert):
    m = QuestionAnsweringModule(str(tiny_bert))
    context = "alpha beta gamma delta"

    class Out:
        def __init__(self, start, end):
            self.start_logits, self.end_logits = torch.tensor(start), torch.tensor(end)

    meta = [
        {"example": 0, "offsets": [None, (0, 5), (6, 10)], "context": context, "gold": ["gamma delta"], "id": "q"},
        {"example": 0, "offsets": [None, (11, 16), (17, 22)], "context": context, "gold": ["gamma delta"], "id": "q"},
    ]
    m.collect(Out([[0, 1.0, 0], [0, 3.0, 0]], [[0, 0, 1.0], [0, 0, 3.0]]), {"meta": meta})
    answer = m.answers.answers[0]
    assert answer["answer"] == "gamma delta" and answer["score"] == 6.0
    assert m.answers.compute()["em"].item() == 1.0 and m.answers.compute()["f1"].item() == 1.0
    rows = m.answers.pop([0])
    assert rows == [{"id": "q", "question": None, "answer": "gamma delta", "score": 6.0, "gold": ["gamma delta"]}]
    assert m.answers.compute() == {}  # popped: nothing left to score


def test_answer_not_in_the_context_names_the_row(tiny_bert, tmp_path):
    bad = tmp_path / "bad.jsonl"
    rows = _rows("qa_val.jsonl")[:2]
    rows[1]["answers"]["answer_start"] = [0]
    bad.write_text("".join(json.dumps(r) + "\n" for r in rows))
    dm = QADataModule(train=str(FIX / "qa_train.jsonl"), val=str(bad), max_length=48, stride=16)
    dm.connect(AutoTokenizer.from_pretrained(tiny_bert))
    with pytest.raises(DomainBertError, match="row 2: answer"):
        dm.setup("fit")
    with pytest.raises(DomainBertError, match="stride"):
        QADataModule(train="x", max_length=48, stride=48)


@pytest.mark.parametrize("family", ["bert", "roberta", "albert", "distilbert", "electra"])
def test_loss_falls_for_every_family(tiny_models, family):
    torch.manual_seed(0)
    dm = QADataModule(train=str(FIX / "qa_train.jsonl"), batch_size=16, max_length=64, stride=24)
    m = QuestionAnsweringModule(str(tiny_models[family]))
    dm.connect(m.tokenizer)
    dm.setup("fit")
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
    losses = []
    while len(losses) < 24:
        for batch in dm.train_dataloader():
            loss = m(batch).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    assert sum(losses[-3:]) / 3 < 0.7 * losses[0]


def test_cli_fit_test_predict(tiny_bert, tmp_path, capsys):
    common = ["--config", CONFIG, "--model.init_from", str(tiny_bert), "--trainer.default_root_dir", str(tmp_path)]
    main(["fit", *common, "--model.learning_rate", "3e-3", "--trainer.max_epochs", "2"])
    run = tmp_path / "tiny_qa" / "version_0"
    from transformers import AutoModelForQuestionAnswering

    AutoModelForQuestionAnswering.from_pretrained(run / "hf")
    best = next((run / "checkpoints").glob("best-*.ckpt"))
    capsys.readouterr()
    main(["test", *common, "--ckpt_path", str(best)])
    out = capsys.readouterr().out
    assert "test/em" in out and "test/f1" in out
    main(["predict", *common, "--ckpt_path", str(best)])
    rows = [
        json.loads(x) for x in next(tmp_path.glob("tiny_qa/version_*/predictions.jsonl")).read_text().split("\n") if x
    ]
    questions = _rows("qa_val.jsonl")
    assert [r["id"] for r in rows] == [q["id"] for q in questions]  # one answer per question, windows merged
    assert all(r["answer"] in q["context"] for r, q in zip(rows, questions))
