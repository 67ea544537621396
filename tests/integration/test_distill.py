"""DistillationModule: a short fit on tiny models lowers the loss and leaves the teacher untouched."""

from __future__ import annotations

import json
from pathlib import Path

import lightning.pytorch as L
import pytest
import torch
from torch.utils.data import DataLoader
from transformers import AutoModelForSequenceClassification

from domainbert.distill.losses import AttentionLoss, HardLabelLoss, HiddenStateLoss, KLDivergenceLoss
from domainbert.distill.module import DistillationModule
from domainbert.distill.teacher_cache import TeacherCache
from domainbert.errors import DomainBertError
from tests.helpers import FIX
from tests.helpers.distill_tiny import LABELS, batches, make_teacher
from tests.helpers.tiny import make_tiny

#: the default terms and a hidden-state term, as a command line gives them
HIDDEN_TOO = (
    "[{class_path: KLDivergenceLoss, init_args: {weight: 0.5}}, {class_path: HardLabelLoss, init_args: {weight: 0.5}}, "
    "{class_path: HiddenStateLoss, init_args: {weight: 0.1}}]"
)


def _terms(kl: float = 0.5, hard: float = 0.5, hidden: float = 0.0, attention: float = 0.0) -> list:
    """Fresh loss terms of these weights (0: left out), as ``model.losses`` lists them."""
    made = {"kl": KLDivergenceLoss, "hard": HardLabelLoss, "hidden": HiddenStateLoss, "attention": AttentionLoss}
    weights = {"kl": kl, "hard": hard, "hidden": hidden, "attention": attention}
    return [made[name](weight=w) for name, w in weights.items() if w]


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    return make_teacher("bert", tmp_path_factory.mktemp("t") / "bert", layers=4)


def _trainer(steps: int, **kw) -> L.Trainer:
    settings = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False, "limit_val_batches": 0}
    return L.Trainer(max_steps=steps, accelerator="cpu", enable_model_summary=False, **{**settings, **kw})


class LossLog(L.Callback):
    def __init__(self):
        self.losses = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.losses.append(float(outputs["loss"]))


def _loader(module, with_idx=False):
    data = batches(module.tokenizer, "train", batch_size=12, with_idx=with_idx)
    return DataLoader(data, batch_size=None, shuffle=False)


def test_fit_lowers_the_loss_and_keeps_the_teacher(teacher):
    torch.manual_seed(0)
    module = DistillationModule(
        teacher=str(teacher),
        student_layers=2,
        losses=_terms(kl=1.0, hard=0.0, hidden=0.5, attention=0.5),
        learning_rate=2e-3,
        warmup_ratio=0.0,
    )
    before = {k: v.clone() for k, v in module.teacher.state_dict().items()}
    student_before = module.model.bert.encoder.layer[0].attention.self.query.weight.clone()
    log = LossLog()
    trainer = _trainer(30, callbacks=[log])
    trainer.fit(module, train_dataloaders=_loader(module))
    first, last = sum(log.losses[:5]) / 5, sum(log.losses[-5:]) / 5
    assert last < 0.7 * first, (first, last)
    for k, v in module.teacher.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert not module.teacher.training
    assert not torch.equal(module.model.bert.encoder.layer[0].attention.self.query.weight, student_before)
    assert set(trainer.callback_metrics) >= {"train/loss_kl", "train/loss_hidden", "train/loss_attention"}


def test_export_writes_the_student(teacher, tmp_path):
    module = DistillationModule(teacher=str(teacher), student_layers=1)
    module.export_hf(tmp_path / "hf")
    loaded = AutoModelForSequenceClassification.from_pretrained(tmp_path / "hf")
    assert loaded.config.num_hidden_layers == 1 and loaded.config.id2label[0] == LABELS[0]
    assert (tmp_path / "hf" / "tokenizer.json").exists()


def test_checkpoint_leaves_the_teacher_out(teacher, tmp_path):
    module = DistillationModule(teacher=str(teacher), student_layers=1)
    trainer = _trainer(2, default_root_dir=tmp_path)
    trainer.fit(module, train_dataloaders=_loader(module))
    trainer.save_checkpoint(tmp_path / "c.ckpt")
    state = torch.load(tmp_path / "c.ckpt", weights_only=True)["state_dict"]
    assert state and not any(k.startswith("teacher.") for k in state)
    fresh = DistillationModule(teacher=str(teacher), student_layers=1)
    fresh.load_state_dict(state)  # strict, although the teacher's weights are not in it
    key = "model.bert.encoder.layer.0.attention.self.query.weight"
    assert torch.equal(fresh.state_dict()[key], state[key])


def test_teacher_cache_is_built_once_and_read(teacher, tmp_path):
    cache_dir = tmp_path / "cache"
    module = DistillationModule(
        teacher=str(teacher), student_layers=2, losses=_terms(hidden=0.5), teacher_cache=str(cache_dir)
    )
    trainer = _trainer(10)
    trainer.fit(module, train_dataloaders=_loader(module, with_idx=True))
    built = [p for p in cache_dir.iterdir() if not p.name.startswith(".")]
    assert len(built) == 1
    meta = json.loads((built[0] / "meta.json").read_text())
    assert meta["rows"] == 60 and meta["layers"] == [0, 2, 4]
    # cached outputs equal the teacher's own
    cache = TeacherCache.open(cache_dir, built[0].name)
    batch = batches(module.tokenizer, "train", batch_size=12, with_idx=True)[1]
    got = cache.lookup(batch)
    with torch.no_grad():
        ref = module.teacher(
            **{k: v for k, v in batch.items() if k not in ("labels", "idx")}, output_hidden_states=True
        )
    torch.testing.assert_close(got.logits, ref.logits, rtol=1e-5, atol=1e-5)
    m = batch["attention_mask"].bool()
    torch.testing.assert_close(got.hidden_states[4][m], ref.hidden_states[4][m], rtol=2e-3, atol=2e-3)  # float16
    # a changed example misses (so the teacher runs), it never reads stale outputs
    batch["input_ids"][0, 1] = (batch["input_ids"][0, 1] + 1) % 100 + 5
    assert cache.lookup(batch) is None
    # a second run reuses the cache without running the teacher over the data again
    module2 = DistillationModule(
        teacher=str(teacher), student_layers=2, losses=_terms(hidden=0.5), teacher_cache=str(cache_dir)
    )
    calls = _count_teacher_runs(module2)
    _trainer(3).fit(module2, train_dataloaders=_loader(module2, with_idx=True))
    assert not calls and module2.cache.hits == 3 and module2.cache.misses == 0
    assert module2.cache.path == built[0]


def test_a_student_of_another_size_reads_the_logits_an_earlier_student_kept(teacher, tmp_path):
    # the pipeline's larger teacher teaches a base-size copy and a small student over the same rows: one pass
    cache_dir = tmp_path / "cache"
    first = DistillationModule(teacher=str(teacher), student_layers=2, teacher_cache=str(cache_dir))
    _trainer(5).fit(first, train_dataloaders=_loader(first, with_idx=True))
    second = DistillationModule(teacher=str(teacher), student_layers=1, teacher_cache=str(cache_dir))
    calls = _count_teacher_runs(second)
    _trainer(5).fit(second, train_dataloaders=_loader(second, with_idx=True))
    assert not calls and second.cache.hits == 5 and second.cache.misses == 0
    assert len(_cache_folders(cache_dir)) == 1  # one fingerprint: the students' sizes are not part of it


def _count_teacher_runs(module) -> list[int]:
    """Record the batch size of every teacher forward pass of ``module`` (cache hits run none)."""
    calls, forward = [], module._teacher_forward

    def counted(batch, input_ids, selected, hidden=None, chunks=None):
        calls.append(int(input_ids.shape[0]))
        return forward(batch, input_ids, selected, hidden, chunks)

    module._teacher_forward = counted
    return calls


def _cache_folders(root: Path) -> list[Path]:
    return sorted(root.iterdir()) if root.exists() else []


def test_a_short_run_runs_the_teacher_only_on_the_batches_it_trains_on_and_a_longer_run_adds_the_rest(
    teacher, tmp_path
):
    """``max_steps 3`` ran the teacher over the whole training set first to fill the cache."""
    cache_dir = tmp_path / "cache"
    module = DistillationModule(
        teacher=str(teacher), student_layers=1, losses=_terms(hidden=0.5), teacher_cache=str(cache_dir)
    )
    calls = _count_teacher_runs(module)
    _trainer(2).fit(module, train_dataloaders=_loader(module, with_idx=True))  # 5 batches of 12 in an epoch
    assert calls == [12, 12]
    (built,) = _cache_folders(cache_dir)  # no temporary folder left beside it
    assert json.loads((built / "meta.json").read_text())["rows"] == 24
    # a full epoch reads the two cached batches and runs the teacher on the three others, which join the cache
    longer = DistillationModule(
        teacher=str(teacher), student_layers=1, losses=_terms(hidden=0.5), teacher_cache=str(cache_dir)
    )
    calls = _count_teacher_runs(longer)
    _trainer(5).fit(longer, train_dataloaders=_loader(longer, with_idx=True))
    assert calls == [12, 12, 12]
    assert _cache_folders(cache_dir) == [built]
    assert json.loads((built / "meta.json").read_text())["rows"] == 60
    cache = TeacherCache.open(cache_dir, built.name)
    for batch in batches(longer.tokenizer, "train", batch_size=12, with_idx=True):
        got = cache.lookup(batch)
        with torch.no_grad():
            ref = longer.teacher(**{k: v for k, v in batch.items() if k not in ("labels", "idx")})
        torch.testing.assert_close(got.logits, ref.logits, rtol=1e-5, atol=1e-5)


class _Interrupt(L.Callback):
    """Stops ``fit`` after its second training batch: by SIGTERM to this process, or by Ctrl-C."""

    def __init__(self, how: str):
        self.how = how

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if batch_idx < 1:
            return
        if self.how == "ctrl-c":
            raise KeyboardInterrupt
        import os
        import signal

        handler = signal.getsignal(signal.SIGTERM)
        assert callable(handler), handler  # Lightning's: it records the signal (else this would kill the tests)
        os.kill(os.getpid(), signal.SIGTERM)


@pytest.mark.parametrize("how", ["sigterm", "ctrl-c"])
def test_an_interrupted_fill_stops_at_the_next_batch_and_leaves_the_cache_as_it_was(teacher, tmp_path, how):
    """SIGTERM (Lightning stops at the next batch) or Ctrl-C during a fill: no half-written cache, none changed."""
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    cache_dir = tmp_path / "cache"
    first = DistillationModule(teacher=str(teacher), student_layers=1, teacher_cache=str(cache_dir))
    _trainer(1).fit(first, train_dataloaders=_loader(first, with_idx=True))
    (built,) = _cache_folders(cache_dir)
    before = {p.name: p.read_bytes() for p in built.iterdir()}
    module = DistillationModule(teacher=str(teacher), student_layers=1, teacher_cache=str(cache_dir))
    calls = _count_teacher_runs(module)
    with pytest.raises(SIGTERMException if how == "sigterm" else SystemExit):
        _trainer(50, callbacks=[_Interrupt(how)]).fit(module, train_dataloaders=_loader(module, with_idx=True))
    assert calls == [12]  # the first batch was cached; the second ran the teacher, then the run stopped
    assert _cache_folders(cache_dir) == [built]  # nothing half-written beside it
    assert {p.name: p.read_bytes() for p in built.iterdir()} == before


def test_smaller_width_student_gets_a_trained_projection(teacher):
    module = DistillationModule(
        teacher=str(teacher),
        student_config={"num_hidden_layers": 1, "hidden_size": 16, "num_attention_heads": 2, "intermediate_size": 32},
        losses=_terms(hidden=1.0),
    )
    proj = module.losses["hidden"].projection
    assert proj is not None and proj.weight.shape == (32, 16)
    assert module.losses["hidden"].layer_map == {0: 0, 1: 4}  # uniform: the student's only layer <- the teacher's top
    names = {n for g in module.trainable_groups() for n in g["names"]}
    assert "losses.hidden.projection.weight" in names and not any(n.startswith("teacher.") for n in names)
    batch = batches(module.tokenizer, "train", 6)[0]
    input_ids, _, view = module.prepare(batch, 0)
    s = module._run(module.model, batch, input_ids, None, True, False)
    loss, parts = module.distill_loss(s, module._teacher_forward(batch, input_ids, None), view)
    loss.backward()
    assert proj.weight.grad is not None and set(parts) == {"kl", "hard", "hidden"}


def test_mlm_distillation_runs(tmp_path):
    mlm = make_tiny("bert", tmp_path / "mlm")
    module = DistillationModule(teacher=str(mlm), student_layers=1, task="mlm", losses=_terms(hidden=0.1))
    log = LossLog()
    trainer = _trainer(4, callbacks=[log])
    data = [{k: v for k, v in b.items() if k != "labels"} for b in batches(module.tokenizer, "train", 12)]
    trainer.fit(module, train_dataloaders=DataLoader(data, batch_size=None))
    assert len(log.losses) == 4 and all(torch.isfinite(torch.tensor(log.losses)))
    with pytest.raises(DomainBertError, match="masked-LM"):
        DistillationModule(teacher=str(mlm), student_layers=1, task="mlm", teacher_cache=str(tmp_path))


def test_user_errors(teacher, tmp_path):
    with pytest.raises(DomainBertError, match="give one of model.student"):
        DistillationModule(teacher=str(teacher))
    with pytest.raises(DomainBertError, match="drop model.student_layers beside it"):
        DistillationModule(teacher=str(teacher), student_layers=1, student_config={"num_hidden_layers": 1})
    with pytest.raises(DomainBertError, match="has 3"):
        DistillationModule(teacher=str(teacher), student_layers=1, num_labels=5)
    with pytest.raises(DomainBertError, match="differ from the teacher's"):
        DistillationModule(teacher=str(teacher), student_layers=1, label_names=["video", "network", "database"])
    mlm = make_tiny("bert", tmp_path / "mlm")
    with pytest.raises(DomainBertError, match="no trained sequence-classification head"):
        DistillationModule(teacher=str(mlm), student_layers=1)
    roberta = make_tiny("roberta", tmp_path / "rob")
    with pytest.raises(DomainBertError, match="no common token positions.*drop HiddenStateLoss and AttentionLoss"):
        DistillationModule(teacher=str(teacher), student=str(roberta), losses=_terms(hidden=0.1))
    with pytest.raises(DomainBertError, match="vocabulary|tokenizer"):  # per-token tasks need one tokenizer
        DistillationModule(teacher=str(teacher), student=str(roberta), task="tagging")
    with pytest.raises(DomainBertError, match="attention maps"):
        DistillationModule(
            teacher=str(teacher), student_layers=1, losses=_terms(attention=1.0), teacher_cache=str(tmp_path)
        )


DISTILL_TINY = str(Path(__file__).resolve().parents[2] / "configs/distill/tiny_debug.yaml")


def test_a_distillation_runs_checkpoint_validates_in_a_new_process(tiny_bert, tmp_path, capsys):
    """``validate --ckpt_path last`` on a distillation run's own checkpoint ("41 weights missing")."""
    from domainbert.cli import main
    from domainbert.modules.classification import SequenceClassificationModule

    teacher = SequenceClassificationModule(str(tiny_bert), label_names=["api", "graphics", "network"])
    teacher.export_hf(tmp_path / "teacher")
    common = ["--config", DISTILL_TINY, "--model.teacher", str(tmp_path / "teacher")]
    common += ["--model.teacher_cache", str(tmp_path / "cache"), "--trainer.default_root_dir", str(tmp_path)]
    main(["fit", *common, "--trainer.max_steps", "4", "--trainer.val_check_interval", "4"])
    ckpt = next((tmp_path / "tiny_debug" / "version_0" / "checkpoints").glob("*.ckpt"))
    assert not any(k.startswith("teacher.") for k in torch.load(ckpt, weights_only=True)["state_dict"])
    capsys.readouterr()
    main(["validate", *common, "--ckpt_path", "last"])
    out = capsys.readouterr().out
    assert "val/acc" in out and "val/f1_macro" in out


def test_tagging_distillation_checks_the_tag_set_and_scores_tokens(tiny_bert, tmp_path):
    from domainbert.data.tagging import TaggingDataModule
    from domainbert.modules.tagging import TokenClassificationModule

    dm = TaggingDataModule(train=str(FIX / "tag_train.jsonl"), val=str(FIX / "tag_val.jsonl"), batch_size=8)
    TokenClassificationModule(str(tiny_bert), label_names=dm.label_names).export_hf(tmp_path / "teacher")
    teacher = str(tmp_path / "teacher")
    with pytest.raises(DomainBertError, match="differ from the teacher's"):
        DistillationModule(teacher=teacher, task="tagging", student_layers=1, label_names=dm.label_names[::-1])
    module = DistillationModule(
        teacher=teacher,
        task="tagging",
        student_layers=1,
        losses=_terms(hidden=0.1),
        num_labels=dm.num_labels,
        label_names=dm.label_names,
    )
    dm.connect(module.tokenizer)
    trainer = _trainer(4, limit_val_batches=None, val_check_interval=4)
    trainer.fit(module, datamodule=dm)
    assert {"val/loss", "val/acc", "val/f1_macro", "train/loss_kl", "train/loss_hidden"} <= set(
        trainer.callback_metrics
    )


def test_qa_distillation_runs_from_the_cli_with_a_teacher_cache(tiny_bert, tmp_path):
    """QA: start and end logits are distilled; the student is scored by SQuAD EM/F1 over whole questions."""
    from transformers import AutoModelForQuestionAnswering

    from domainbert.cli.lightning_cli import cli_main
    from domainbert.modules.qa import QuestionAnsweringModule

    QuestionAnsweringModule(str(tiny_bert)).export_hf(tmp_path / "teacher")
    args = ["fit", "--model", "distill", "--model.teacher", str(tmp_path / "teacher"), "--model.task", "qa"]
    args += [
        "--model.student_layers",
        "1",
        "--model.losses",
        HIDDEN_TOO,
        "--model.teacher_cache",
        str(tmp_path / "cache"),
    ]
    args += ["--data", "qa", "--data.train", str(FIX / "qa_train.jsonl"), "--data.val", str(FIX / "qa_val.jsonl")]
    args += ["--data.max_length", "48", "--data.stride", "16", "--trainer.max_steps", "4"]
    args += ["--trainer.val_check_interval", "4", "--trainer.accelerator", "cpu", "--trainer.enable_progress_bar"]
    args += ["false", "--trainer.default_root_dir", str(tmp_path), "--run_name", "qa"]
    cli = cli_main(args)
    metrics = cli.trainer.callback_metrics
    assert {"val/loss", "val/em", "val/f1", "train/loss_kl", "train/loss_hard", "train/loss_hidden"} <= set(metrics)
    assert 0.0 <= float(metrics["val/f1"]) <= 1.0
    assert cli.model.cache is not None and cli.model.cache.per_token  # start/end logits cached per token
    student = AutoModelForQuestionAnswering.from_pretrained(tmp_path / "qa" / "version_0" / "hf")
    assert student.config.num_hidden_layers == 1


def test_distillation_refuses_soft_targets_in_the_data(teacher, tmp_path):
    """The KL term is the soft target; ``data.soft_label_column`` would reach the hard-label term as multi-hot."""
    from types import SimpleNamespace

    from domainbert.data.classification import ClassificationDataModule

    module = DistillationModule(teacher=str(teacher), student_layers=1)
    dm = ClassificationDataModule(labels=LABELS, soft_label_column="probabilities")
    module._trainer = SimpleNamespace(datamodule=dm)
    with pytest.raises(DomainBertError, match="unset data.soft_label_column"):
        module.setup("fit")
    dm.soft_label_column = None
    module.setup("fit")  # the same data without soft targets is accepted


def test_distillation_refuses_windowed_data(teacher, tmp_path):
    """Distillation reads each text once; windows in its data are refused in one line naming the option."""
    from types import SimpleNamespace

    from domainbert.data.classification import ClassificationDataModule

    module = DistillationModule(teacher=str(teacher), student_layers=1)
    dm = ClassificationDataModule(labels=LABELS, long_text="windows")
    module._trainer = SimpleNamespace(datamodule=dm)
    with pytest.raises(DomainBertError, match="data.long_text=windows: distillation reads each text once"):
        module.setup("fit")
    module._trainer = SimpleNamespace(datamodule=ClassificationDataModule(labels=LABELS, long_text="truncate"))
    module.setup("fit")  # the same data truncated is accepted


def test_a_transfer_set_is_labelled_by_the_teacher_and_skipped_by_the_hard_loss(tiny_bert, tmp_path):
    """``data.transfer``: corpus documents join the training rows; the teacher's cache holds them all."""
    from domainbert.cli.lightning_cli import cli_main
    from domainbert.distill.teacher_cache import cached_rows
    from domainbert.modules.classification import SequenceClassificationModule

    teacher = SequenceClassificationModule(str(tiny_bert), label_names=["api", "graphics", "network"])
    teacher.export_hf(tmp_path / "teacher")
    args = ["fit", "--config", DISTILL_TINY, "--model.teacher", str(tmp_path / "teacher")]
    args += ["--model.teacher_cache", str(tmp_path / "cache"), "--trainer.default_root_dir", str(tmp_path)]
    args += ["--data.transfer.path", str(FIX / "corpus.txt"), "--data.transfer.documents", "20"]
    args += ["--trainer.max_steps", "20", "--trainer.val_check_interval", "10"]  # 80 rows: 10 batches an epoch
    cli = cli_main(args)
    train = cli.datamodule.datasets["train"]
    assert len(train) == 60 + 20 and train["labels"][60:] == [-100] * 20
    (key,) = [p.name for p in (tmp_path / "cache").iterdir() if p.is_dir()]
    distinct = len({tuple(ids) for ids in train["input_ids"]})  # the cache keeps one row per distinct input
    assert cached_rows(str(tmp_path / "cache"), key) == distinct > 60  # the transfer set's rows are among them
    metrics = (tmp_path / "tiny_debug" / "version_0" / "metrics.csv").read_text()
    assert "train/loss_hard" in metrics and "val/f1_macro" in metrics


def test_fine_tuning_refuses_a_transfer_set(tiny_bert, tmp_path):
    from domainbert.cli.lightning_cli import cli_main

    args = ["fit", "--model", "classification", "--model.init_from", str(tiny_bert), "--data", "classification"]
    args += ["--data.train", str(FIX / "cls_train.jsonl"), "--data.transfer.path", str(FIX / "corpus.txt")]
    args += ["--trainer.max_steps", "1", "--trainer.default_root_dir", str(tmp_path)]
    with pytest.raises(DomainBertError, match="data.transfer .* distillation"):
        cli_main(args)


def test_an_ensemble_of_teachers_teaches_their_mean_probabilities(tmp_path):
    from domainbert.distill.teacher import TeacherEnsemble

    first = make_teacher("bert", tmp_path / "a", layers=4, seed=0)
    second = make_teacher("bert", tmp_path / "b", layers=4, seed=1)
    torch.manual_seed(0)
    module = DistillationModule(
        teacher=[str(first), str(second)], student_layers=2, losses=_terms(hidden=0.1), learning_rate=2e-3
    )
    assert isinstance(module.teacher, TeacherEnsemble) and len(module.teacher.members) == 2
    batch = next(iter(_loader(module)))
    with torch.no_grad():
        a = AutoModelForSequenceClassification.from_pretrained(first).eval()
        b = AutoModelForSequenceClassification.from_pretrained(second).eval()
        inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in batch}
        mean = (a(**inputs).logits.softmax(-1) + b(**inputs).logits.softmax(-1)) / 2
        got = module.teacher_outputs(batch, batch["input_ids"], None).logits.softmax(-1)
    assert torch.allclose(got, mean, atol=1e-5)
    log = LossLog()
    _trainer(30, callbacks=[log]).fit(module, train_dataloaders=_loader(module))
    assert sum(log.losses[-5:]) < 0.85 * sum(log.losses[:5])  # 0.82 on a GPU in fp32


def test_a_teacher_of_another_family_teaches_a_student_with_its_own_tokenizer(tmp_path):
    """A RoBERTa teacher (its own BPE tokenizer, another width) and a BERT student: logits only."""
    from transformers import AutoTokenizer

    teacher = make_teacher("roberta", tmp_path / "teacher", layers=4, seed=3)
    student = make_teacher("bert", tmp_path / "student", layers=4, seed=4)
    torch.manual_seed(0)
    module = DistillationModule(
        teacher=str(teacher),
        student=str(student),
        student_layers=2,
        losses=_terms(kl=1.0, hard=0.0),
        learning_rate=2e-3,
    )
    assert module.tokenizer.get_vocab() == AutoTokenizer.from_pretrained(student).get_vocab()
    log = LossLog()
    _trainer(30, callbacks=[log]).fit(module, train_dataloaders=_loader(module))
    assert sum(log.losses[-5:]) < 0.7 * sum(log.losses[:5])
    module.export_hf(tmp_path / "hf")
    exported = AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert exported.get_vocab() == AutoTokenizer.from_pretrained(student).get_vocab()
    assert AutoModelForSequenceClassification.from_pretrained(tmp_path / "hf").config.num_hidden_layers == 2


class ModeAtStart(L.Callback):
    def on_train_start(self, trainer, pl_module):
        self.student_eval = sum(1 for m in pl_module.model.modules() if not m.training)
        self.teacher_training = sum(1 for m in pl_module.teacher.modules() if m.training)


def test_a_student_loaded_from_a_folder_trains_with_dropout_on_and_the_teacher_stays_frozen(teacher, tmp_path):
    """from_pretrained returns eval mode; the student must still train in train mode (dropout on)."""
    student = make_teacher("bert", tmp_path / "student", layers=2, seed=4)
    module = DistillationModule(
        teacher=str(teacher), student=str(student), losses=_terms(kl=1.0, hard=0.0), learning_rate=2e-3
    )
    seen = ModeAtStart()
    _trainer(1, callbacks=[seen]).fit(module, train_dataloaders=_loader(module))
    assert seen.student_eval == 0
    assert seen.teacher_training == 0
