"""The pipeline's distillation: the corpus as transfer set, the seeds as an ensemble teacher, a larger teacher."""

from __future__ import annotations

import json

import yaml

from domainbert.pipeline import DistillSpec, StageSpec
from domainbert.pipeline.runner import read_state
from domainbert.pipeline.specs import TransferSpec
from tests.helpers.pipeline_tiny import FIX, tiny_pipeline
from tests.helpers.tiny import make_tiny

DISTILL = "configs/distill/tiny_debug.yaml"


def _config(out, stage: str) -> dict:
    """The stage's resolved config, as its worker read it."""
    return yaml.safe_load((out / stage / "config.yaml").read_text())


def _model(out, stage: str) -> dict:
    return _config(out, stage)["model"]["init_args"]


def _transfer(out, stage: str = "distill") -> dict | None:
    return _config(out, stage)["data"]["init_args"]["transfer"]


def test_the_student_learns_from_the_seeds_ensemble_on_the_task_and_corpus_documents(tiny_bert, tmp_path):
    out = tmp_path / "p"
    spec = DistillSpec(DISTILL, ["--trainer.max_steps=4"], teacher="ensemble", transfer=TransferSpec(documents=20))
    tiny_pipeline(tiny_bert, out, [0, 1], distill=spec, export=StageSpec(enabled=False), soup={"enabled": False})
    seeds = [read_state(out / "state.json")[f"finetune-baseline-seed{s}"]["hf"] for s in (0, 1)]
    assert _model(out, "distill")["teacher"] == seeds
    transfer = _transfer(out)
    assert {k: transfer[k] for k in ("path", "documents", "text_column")} == {
        "path": str(FIX / "corpus.txt"),
        "documents": 20,
        "text_column": "text",
    }
    trainer = _config(out, "distill")["trainer"]
    assert (trainer["max_epochs"], trainer["max_steps"]) == (2, 4)  # the transfer set's epochs, the stage's args
    log = (out / "distill" / "log.txt").read_text()
    assert "transfer set: 20 documents of" in log


def test_without_a_corpus_the_student_learns_from_the_task_alone(tiny_bert, tmp_path):
    out = tmp_path / "p"
    spec = DistillSpec(DISTILL, ["--trainer.max_steps=2"])
    tiny_pipeline(tiny_bert, out, [0], corpus=None, distill=spec, export=StageSpec(enabled=False))
    assert _transfer(out) is None
    assert _model(out, "distill")["teacher"] == read_state(out / "state.json")["finetune-baseline-seed0"]["hf"]


def test_a_larger_teacher_is_fine_tuned_distilled_into_the_base_size_and_competes(tiny_bert, tmp_path):
    """``larger_teacher.model``: a RoBERTa (its own tokenizer) fine-tuned, then teaching a copy of the baseline."""
    out = tmp_path / "p"
    larger = make_tiny("roberta", tmp_path / "roberta")
    spec = DistillSpec(DISTILL, ["--trainer.max_steps=2"], transfer=TransferSpec(documents=10))
    teacher = {"model": str(larger), "distill_args": ["--trainer.max_steps=2"]}
    report = tiny_pipeline(tiny_bert, out, [0], distill=spec, export=StageSpec(enabled=False), larger_teacher=teacher)
    state = read_state(out / "state.json")
    assert state["finetune-larger_teacher-seed0"]["status"] == "done"
    taught = _model(out, "distill-larger_teacher")
    assert taught["teacher"] == state["finetune-larger_teacher-seed0"]["hf"]
    assert taught["student"] == state["finetune-baseline-seed0"]["hf"]
    assert taught["student_layers"] is None
    assert "distilled from the larger teacher" in report.read_text()
    small = _model(out, "distill")
    tuned, base = state["finetune-larger_teacher-seed0"], state["finetune-baseline-seed0"]
    better = tuned["metrics"]["val/f1_macro"] > base["metrics"]["val/f1_macro"]
    assert (small["teacher"] == tuned["hf"]) is better  # the better of the two on validation


def test_nearest_documents_as_transfer_set_are_chosen_by_the_base_models_embeddings(tiny_bert, tmp_path):
    out = tmp_path / "p"
    spec = DistillSpec(DISTILL, ["--trainer.max_steps=2"], transfer=TransferSpec(documents=120, source="nearest"))
    tiny_pipeline(tiny_bert, out, [0], distill=spec, export=StageSpec(enabled=False))
    state = read_state(out / "state.json")
    select = state["select-transfer"]
    assert select["inputs"][select["inputs"].index("--k") + 1] == "2"  # 120 documents over 60 training texts
    assert _transfer(out)["path"] == select["corpus"]
    assert (out / "select-transfer" / "corpus.jsonl").is_file()


def test_the_whole_corpus_as_transfer_set(tiny_bert, tmp_path):
    out = tmp_path / "p"
    spec = DistillSpec(DISTILL, ["--trainer.max_steps=2"], transfer=TransferSpec(documents=None))
    tiny_pipeline(tiny_bert, out, [0], distill=spec, export=StageSpec(enabled=False))
    assert _transfer(out)["documents"] is None
    task = {
        json.loads(line)["text"].casefold()
        for f in ("cls_train", "cls_val", "cls_test")
        for line in (FIX / f"{f}.jsonl").open()
    }
    corpus = [line for line in (FIX / "corpus.txt").read_text().splitlines() if line.strip()]
    kept = [line for line in corpus if " ".join(line.split()).casefold() not in task]
    assert f"transfer set: {len(kept)} documents of" in (out / "distill" / "log.txt").read_text()
