"""Adaptation components: paired bootstrap, the frozen-embedding probe, kNN corpus curation, the pipeline's choice."""

import numpy as np
import pytest
import torch

from domainbert.adapt.select import nearest_documents
from domainbert.core.embed import mean_pool, native_pooling
from domainbert.core.probe import fit_logreg, select_probe
from domainbert.core.stats import macro_f1, mean_std, paired_bootstrap
from domainbert.errors import DomainBertError
from domainbert.pipeline.recipe import choose
from domainbert.pipeline.report import choice_why
from domainbert.pipeline.specs import TaskFiles
from domainbert.pipeline.strategies.base import Run


def test_macro_f1_equals_a_hand_computed_value():
    y = np.array([0, 0, 1, 1, 2])
    p = np.array([0, 1, 1, 1, 0])
    # class 0: tp1 fp1 fn1 -> 0.5; class 1: tp2 fp1 fn0 -> 0.8; class 2: tp0 fp0 fn1 -> 0
    assert macro_f1(y, p, 3) == pytest.approx((0.5 + 0.8 + 0.0) / 3)


def test_mean_std_of_seeds():
    assert mean_std([0.7, 0.8, 0.9]) == pytest.approx((0.8, 0.1))
    assert mean_std([0.5]) == (0.5, 0.0)


def test_bootstrap_of_a_model_better_on_every_row_is_significant_and_identical_models_are_not():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 300)
    worse = np.where(rng.random(300) < 0.5, y, (y + 1) % 3)  # half right
    better = np.where(rng.random(300) < 0.9, y, (y + 1) % 3)
    ci = paired_bootstrap(y, [worse], [better], 3, resamples=300)
    assert ci.low > 0 and ci.verdict().startswith("helped") and "one seed" in ci.verdict()
    assert ci.verdict("one model") == "helped (one model is not in the interval)"
    assert ci.diff == pytest.approx(macro_f1(y, better, 3) - macro_f1(y, worse, 3))
    same = paired_bootstrap(y, [worse], [worse], 3, resamples=200)
    assert same.diff == 0 and same.low == 0 and same.high == 0
    assert same.verdict().startswith("made no significant difference")
    assert paired_bootstrap(y, [better], [worse], 3, resamples=300).verdict().startswith("hurt")


def test_bootstrap_resamples_seeds_so_one_lucky_seed_is_not_significant():
    rng = np.random.default_rng(1)
    y = rng.integers(0, 3, 400)
    base = [np.where(rng.random(400) < 0.7, y, (y + 1) % 3) for _ in range(3)]
    lucky = base[:2] + [y.copy()]  # two seeds like the baseline, one perfect
    ci = paired_bootstrap(y, base, lucky, 3, resamples=400)
    assert ci.seeds_covered and ci.diff > 0.05
    assert ci.low <= 0.001, "a gain carried by one seed of three must not look certain"


def test_bootstrap_averages_seeds_and_rejects_misaligned_rows():
    y = np.array([0, 1, 0, 1])
    a = [[0, 1, 0, 1], [1, 0, 1, 0]]  # seed mean accuracy 0.5
    b = [[0, 1, 0, 1]]  # accuracy 1.0
    assert paired_bootstrap(y, a, b, 2, metric="acc", resamples=50).diff == pytest.approx(0.5)
    with pytest.raises(ValueError, match="predictions must be"):
        paired_bootstrap(y, [[0, 1]], b, 2)


def test_mean_pool_ignores_padding():
    h = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]]])
    assert torch.equal(mean_pool(h, torch.tensor([[1, 1, 0]])), torch.tensor([[2.0, 3.0]]))


def test_native_pooling_reads_a_sentence_transformers_folder(tmp_path):
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "modules.json").write_text(
        '[{"idx": 0, "path": "", "type": "sentence_transformers.models.Transformer"},'
        ' {"idx": 1, "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]'
    )
    (tmp_path / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}')
    assert native_pooling(tmp_path) == "mean"
    (tmp_path / "1_Pooling" / "config.json").write_text('{"pooling_mode_cls_token": true}')
    assert native_pooling(tmp_path) == "cls"
    assert native_pooling(tmp_path / "missing") is None


def test_probe_separates_separable_classes_and_picks_c_on_validation():
    g = torch.Generator().manual_seed(0)
    centers = torch.tensor([[3.0, 0.0], [0.0, 3.0], [-3.0, -3.0]])
    y = torch.arange(3).repeat(40)
    x = centers[y] + 0.3 * torch.randn(len(y), 2, generator=g)
    probe = fit_logreg(x, y, 3, c=1.0)
    assert torch.equal(probe.logits(x).argmax(-1), y)
    chosen = select_probe(x[:90], y[:90], x[90:], y[90:], 3, grid=(0.001, 1.0))
    assert set(chosen.val_scores) == {0.001, 1.0} and chosen.val_scores[chosen.c] == max(chosen.val_scores.values())


def test_nearest_documents_takes_each_task_texts_k_neighbours_nearest_first():
    corpus = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.9, 0.1], [-1.0, 0.0], [0.1, 0.9]])
    task = torch.tensor([[1.0, 0.05], [0.05, 1.0]])
    # task 0 -> docs 0 (0.9988), 2 (0.995); task 1 -> docs 1 (0.9988), 4 (0.995); doc 3 is far from both
    assert nearest_documents(task, corpus, k=2) == [0, 1, 2, 4]
    assert nearest_documents(task, corpus, k=1) == [0, 1]
    with pytest.raises(DomainBertError, match="k=0"):
        nearest_documents(task, corpus, k=0)


def _runs(val, test=None):
    return [Run(metrics={"val/f1_macro": v, **({"test/f1_macro": test} if test is not None else {})}) for v in val]


def test_choice_reads_validation_only_and_keeps_the_baseline_on_a_tie():
    results = {"baseline": _runs([0.80, 0.82], test=0.70), "dapt": _runs([0.79, 0.80], test=0.99)}
    choice = choose(results, "f1_macro")
    assert choice.name == "baseline" and "no adapted model beat it" in choice_why(choice)  # test is not looked at
    assert choice.run is results["baseline"][1]  # its run that validated best teaches
    results["dapt"] = _runs([0.81, 0.81])
    assert choose(results, "f1_macro").name == "baseline"  # a tie keeps the baseline
    results["tapt"] = _runs([0.83, 0.84])
    choice = choose(results, "f1_macro")
    assert choice.name == "tapt" and choice.scores["tapt"] == pytest.approx(0.835)
    assert "0.8350" in choice_why(choice) and "0.8100" in choice_why(choice)
    with pytest.raises(DomainBertError, match="validation split"):
        choose({"baseline": [Run()]}, "f1_macro")


def test_task_paths_and_columns_reach_the_data_options():
    values = TaskFiles("tr.jsonl", "va.jsonl", None, "body", None, "section").values()
    assert values == {
        "data": {
            "init_args": {
                "train": "tr.jsonl",
                "val": "va.jsonl",
                "test": None,
                "predict": None,
                "text_column": "body",
                "label_column": "section",
                "text_pair_column": None,
            }
        }
    }


def test_select_writes_the_nearest_unique_corpus_documents_as_a_corpus(tiny_bert, tmp_path):
    import json

    from domainbert.adapt.select import select
    from domainbert.data.corpus import documents
    from tests.helpers import FIX

    result = select(str(tiny_bert), str(FIX / "corpus.txt"), str(FIX / "cls_train.jsonl"), str(tmp_path), k=2)
    rows = [json.loads(line)["text"] for line in (tmp_path / "corpus.jsonl").read_text().splitlines()]
    corpus = list(dict.fromkeys(documents(str(FIX / "corpus.txt"))))
    assert result["documents"] == len(rows) == len(set(rows)) and result["of"] == len(corpus)
    assert set(rows) <= set(corpus) and 2 <= len(rows) <= 2 * 60  # at most k per training text
    assert json.loads((tmp_path / "result.json").read_text())["corpus"] == str(tmp_path / "corpus.jsonl")
    with pytest.raises(DomainBertError, match="k=0"):
        select(str(tiny_bert), str(FIX / "corpus.txt"), str(FIX / "cls_train.jsonl"), str(tmp_path / "b"), k=0)
