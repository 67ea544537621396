"""``domainbert pipeline``: stages are skipped when done with the same inputs, rerun when not, and failures name
their log; the whole recipe runs end to end on the tiny models."""

import importlib.util
import json
import re
from pathlib import Path

import numpy as np
import pytest

from domainbert.errors import DomainBertError
from domainbert.pipeline import (
    DaptSpec,
    ExportSpec,
    FinetuneSpec,
    PretrainSpec,
    ProbeSpec,
    SelectSpec,
    SoupSpec,
    StageSpec,
    VocabSpec,
    WatchSpec,
    main,
    pipeline,
)
from domainbert.pipeline.runner import Runner, read_state
from domainbert.pipeline.specs import TaskFiles
from domainbert.pipeline.stage import StageConfig, merge, model
from tests.helpers.pipeline_tiny import OPEN_GATE, tiny_pipeline

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"


def test_a_fit_records_the_best_checkpoints_validation_metrics_without_validating_it_again(tiny_bert, tmp_path):
    """The worker's validation metrics are those of the pass that chose the best checkpoint: a fresh validation of
    the exported model gives the same, and the fit's evaluation passes are its sanity check, one validation per epoch
    and the one test pass."""
    runner = Runner(tmp_path / "p", isolate="none")
    task = TaskFiles(str(FIX / "cls_train.jsonl"), str(FIX / "cls_val.jsonl"), str(FIX / "cls_test.jsonl"))
    config = str(ROOT / "configs/finetune/tiny_classification.yaml")
    stage = StageConfig(config, task.values()).then(["--trainer.max_epochs=3", "--model.learning_rate=3e-3"])
    record = runner.fit("ft", stage.but(model(init_from=str(tiny_bert))), test=True)
    marks = json.loads((tmp_path / "p" / "ft" / "marks.json").read_text())
    assert len(marks["eval"]) == 1 + 3 + 1
    again = runner.evaluate("ev", stage.but(model(init_from=record.hf)))
    val = {k: v for k, v in record.metrics.items() if k.startswith("val/")}
    assert set(val) == {"val/loss", "val/acc", "val/f1_macro"}
    assert val == pytest.approx({k: again.metrics[k] for k in val}, abs=1e-6)
    assert record.metric("test/f1_macro") == pytest.approx(again.metric("test/f1_macro"), abs=1e-6)


def test_runner_skips_done_stages_reruns_changed_ones_and_names_the_log_of_a_failure(tmp_path, capsys):
    runner = Runner(tmp_path)
    assert runner.tool("list", ["datamodules"], result="listed").result == "listed"
    assert "classification" in (tmp_path / "list" / "log.txt").read_text()
    state = read_state(tmp_path / "state.json")
    assert state["list"]["status"] == "done" and state["list"]["inputs"] == ["datamodules"]

    capsys.readouterr()
    again = Runner(tmp_path)  # a new run of the pipeline reads state.json
    again.tool("list", ["datamodules"], result="listed")
    assert "[list] done earlier: skipped" in capsys.readouterr().out
    again.tool("list", ["datamodules", "--help"], result="listed")
    assert "done earlier with other inputs" in capsys.readouterr().out
    assert "usage: domainbert datamodules" in (tmp_path / "list" / "log.txt").read_text()

    with pytest.raises(DomainBertError) as err:
        again.tool("bad", ["vocab", "extend", "--model", str(tmp_path / "missing"), "--corpus", "x", "--out", "y"], "")
    log = tmp_path / "bad" / "log.txt"
    assert f"stage 'bad' failed (exit 2); its log is {log}" in str(err.value)
    assert "domainbert: error: x: no such file" in str(err.value)  # the last lines of the log
    assert read_state(tmp_path / "state.json")["bad"]["status"] == "failed"


def test_stages_in_processes_of_their_own_record_their_results_and_a_failure_names_its_log(tiny_bert, tmp_path, capsys):
    """``isolate="all"``, the one test of the process boundary (the other pipeline tests run every stage in the
    test's process): a fine-tuning worker's record and test predictions come back from its process, and a stage whose
    process fails is recorded as failed, its message naming its log and quoting the error."""
    from domainbert.core.stats import macro_f1

    runner = Runner(tmp_path / "p", isolate="all")
    task = TaskFiles(str(FIX / "cls_train.jsonl"), str(FIX / "cls_val.jsonl"), str(FIX / "cls_test.jsonl"))
    config = str(ROOT / "configs/finetune/tiny_classification.yaml")
    args = ["--trainer.max_epochs=1"]
    record = runner.fit("ft", StageConfig(config, merge(model(init_from=str(tiny_bert)), task.values())), args, True)
    assert {"val/f1_macro", "test/f1_macro"} <= set(record.metrics) and Path(record.hf).is_dir()
    preds = json.loads(Path(record.predictions).read_text())
    assert len(preds["gold"]) == len(preds["pred"]) == 15 and preds["labels"] == ["api", "graphics", "network"]
    assert macro_f1(np.array(preds["gold"]), np.array(preds["pred"]), 3) == pytest.approx(
        record.metric("test/f1_macro"), abs=1e-4
    )
    printed = capsys.readouterr().out
    assert "[ft] running: python -m domainbert.pipeline --worker" in printed and "pipeline's process" not in printed

    with pytest.raises(DomainBertError) as err:
        runner.fit("bad", StageConfig(config, merge(model(init_from=str(tmp_path / "no-model")), task.values())), args)
    log = tmp_path / "p" / "bad" / "log.txt"
    assert f"stage 'bad' failed (exit 2); its log is {log}" in str(err.value)
    assert "domainbert: error:" in str(err.value) and "no-model" in log.read_text()
    state = read_state(tmp_path / "p" / "state.json")
    assert state["ft"]["status"] == "done" and state["bad"]["status"] == "failed"


def test_a_rerun_reruns_a_stage_whose_resolved_config_changed_and_what_follows_an_upstream_rerun(tmp_path):
    runner = Runner(tmp_path / "p")
    first = runner.fingerprint("trainer:\n  max_epochs: 1\n")
    assert runner.fingerprint("# a comment\ntrainer: {max_epochs: 1}\n") == first  # the values count, not the layout
    assert runner.fingerprint("trainer:\n  max_epochs: 2\n") != first  # a changed value is a changed input
    runner.tool("vocab", ["datamodules"], result="x")
    after_vocab = runner.fingerprint("a: 1\n", after=("vocab",))
    runner.state["vocab"]["status"] = "failed"  # force the upstream tool stage to run again
    runner.tool("vocab", ["datamodules"], result="x")
    assert runner.fingerprint("a: 1\n", after=("vocab",)) != after_vocab


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"metric": "accuracy"}, "expected one of"),
        ({"select": SelectSpec(enabled=True), "dapt": StageSpec(enabled=False)}, "select curates the DAPT data"),
        ({"vocab": VocabSpec(enabled=True), "dapt": StageSpec(enabled=False)}, "new vocabulary rows need"),
        ({"corpus": None, "dapt": DaptSpec(enabled=True)}, "read the domain corpus"),  # auto: off, no error
    ],
)
def test_a_pipeline_that_cannot_work_is_refused_before_any_training(tiny_bert, tmp_path, kwargs, message):
    base = dict(base_model=str(tiny_bert), task_train="t.jsonl", task_val="v.jsonl", corpus="c.txt", out=str(tmp_path))
    base.update(probe=ProbeSpec(enabled=False))
    with pytest.raises(DomainBertError, match=message):
        pipeline(**{**base, **kwargs})
    assert not (tmp_path / "state.json").exists() or "probe" not in (tmp_path / "state.json").read_text()


def test_a_new_domain_is_only_paths_and_every_stage_reads_them(tiny_bert, tmp_path, capsys):
    """A pipeline config that names only the model, the corpus and the task files (plus short stages) runs; DAPT
    reads the corpus given to the pipeline, fine-tuning reads the task's files and columns, and the report has the
    probe row, the paired interval and the choice."""
    data = tmp_path / "data"
    data.mkdir()
    corpus = data / "my_corpus.txt"
    corpus.write_text((FIX / "corpus.txt").read_text())
    for split, src in (("train", "cls_train"), ("val", "cls_val"), ("test", "cls_test")):  # other column names
        rows = [json.loads(line) for line in (FIX / f"{src}.jsonl").read_text().splitlines() if line.strip()]
        (data / f"{split}.jsonl").write_text(
            "".join(json.dumps({"body": r["text"], "section": r["label"]}) + "\n" for r in rows)
        )
    config = tmp_path / "domain.yaml"
    config.write_text(
        f"""base_model: {tiny_bert}
corpus: {corpus}
task_train: {data / "train.jsonl"}
task_val: {data / "val.jsonl"}
task_test: {data / "test.jsonl"}
text_column: body
label_column: section
out: {tmp_path / "p"}
isolate: none
dapt: {{args: ["--trainer.max_steps=4", "--trainer.val_check_interval=2"], watch: {{margin: -1.0}}}}
finetune: {{args: ["--trainer.max_epochs=1"]}}
distill: {{enabled: false}}
"""
    )
    main(["--config", str(config)])
    state = read_state(tmp_path / "p" / "state.json")
    done = sorted(s for s, e in state.items() if e["status"] == "done")
    assert done == ["dapt", "finetune-baseline-seed0", "finetune-dapt-seed0", "probe"]
    import yaml

    dapt = yaml.safe_load((Path(state["dapt"]["run"]) / "config.yaml").read_text())
    assert dapt["data"]["init_args"]["train"] == str(corpus)  # the pipeline's corpus, not the stage config's
    watch = next(c["init_args"] for c in dapt["trainer"]["callbacks"] if c["class_path"].endswith("ProbeWatch"))
    assert (watch["train"], watch["text_column"], watch["label_column"]) == (
        str(data / "train.jsonl"),
        "body",
        "section",
    )
    assert (Path(state["dapt"]["run"]) / "probe_watch.json").is_file()  # the task watched while DAPT trained
    ft = yaml.safe_load((Path(state["finetune-dapt-seed0"]["run"]) / "config.yaml").read_text())["data"]["init_args"]
    assert (ft["train"], ft["val"], ft["test"]) == tuple(str(data / f"{s}.jsonl") for s in ("train", "val", "test"))
    assert (ft["text_column"], ft["label_column"]) == ("body", "section")
    assert ft["val"] and state["finetune-dapt-seed0"]["metrics"]["val/f1_macro"] >= 0
    report = (tmp_path / "p" / "report.md").read_text()
    assert "| frozen embeddings + logistic regression |" in report and "| dapt |" in report
    dapt_row = next(line for line in report.splitlines() if line.startswith("| dapt |"))
    assert re.search(r"[+-]\d+\.\d{2} \[[+-]\d+\.\d{2}, [+-]\d+\.\d{2}\]", dapt_row), dapt_row
    assert re.search(r"\*\*dapt\*\*: adaptation (helped|made no significant difference|hurt)", report)
    preds = json.loads(Path(state["finetune-dapt-seed0"]["predictions"]).read_text())
    from domainbert.core.stats import macro_f1

    assert macro_f1(np.array(preds["gold"]), np.array(preds["pred"]), 3) == pytest.approx(
        state["finetune-dapt-seed0"]["metrics"]["test/f1_macro"], abs=1e-4
    )
    assert "## The chosen fine-tuned model" in report and (tmp_path / "p" / "plots" / "comparison.png").is_file()
    probe = json.loads((tmp_path / "p" / "probe" / "result.json").read_text())
    assert set(probe) >= {"val", "test", "c"} and probe["labels"] == ["api", "graphics", "network"]


def test_tiny_pipeline_runs_every_stage_writes_the_report_and_a_rerun_skips_them(tiny_bert, tmp_path, capsys):
    common = ["--trainer.enable_progress_bar=false"]
    kwargs = dict(
        out=str(tmp_path / "p"),
        base_model=str(tiny_bert),
        corpus=str(FIX / "corpus.txt"),
        task_train=str(FIX / "cls_train.jsonl"),
        task_val=str(FIX / "cls_val.jsonl"),
        task_test=str(FIX / "cls_test.jsonl"),
        seeds=[0, 1],
        vocab=VocabSpec(enabled=False),
        dapt=PretrainSpec(
            "configs/pretrain/tiny_debug.yaml",
            ["--trainer.max_steps=4", "--trainer.log_every_n_steps=1", *common],
            watch=WatchSpec(**OPEN_GATE),  # the fixture's probe scores 1.0 on the base: nothing could beat it
        ),
        finetune=FinetuneSpec(
            "configs/finetune/tiny_classification.yaml", ["--trainer.max_epochs=1", *common], all_seeds=True
        ),
        distill=StageSpec(
            "configs/distill/tiny_debug.yaml",
            ["--trainer.max_steps=4", "--model.init_args.teacher_cache=null", "--model.init_args.student_layers=1"],
        ),
        export=ExportSpec(args=["--int8", "true", "--bf16", "false", "--latency_examples", "4", "--repeats", "1"]),
    )
    kwargs["isolate"] = "none"
    report = pipeline(**kwargs)
    text = report.read_text()
    state = read_state(tmp_path / "p" / "state.json")
    stages = ["probe", "dapt", "finetune-baseline-seed0", "finetune-baseline-seed1", "finetune-dapt-seed0"]
    stages += ["finetune-dapt-seed1", "distill", "export"]
    soups = ["soup-baseline", "finetune-baseline-soup", "soup-dapt", "finetune-dapt-soup"]  # on by default
    assert [s for s in stages + soups if state.get(s, {}).get("status") == "done"] == stages + soups
    assert "over seeds [0, 1]" in text and "| baseline |" in text and "| dapt |" in text
    assert "| baseline soup |" in text and "| dapt soup |" in text
    assert "| student int8 |" in text and "| student |" in text and "| teacher int8 |" in text and "| probe |" in text
    if importlib.util.find_spec("onnxruntime"):  # the pipeline test whose export writes the ONNX variants too
        assert "| student onnx_int8 |" in text and "| teacher onnx_int8 |" in text
    assert "## What to ship" in text and "**Ship: " in text and "export/tradeoff.png" in text
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("Ship: ")
    assert all((tmp_path / "p" / "plots" / f"{s}.png").is_file() for s in stages if s not in ("export", "probe"))
    stages += soups
    card = Path(state["finetune-dapt-seed0"]["hf"], "README.md").read_text()
    assert "test/f1_macro" in card

    capsys.readouterr()
    pipeline(**kwargs)
    out = capsys.readouterr().out
    assert out.count("done earlier: skipped") == len(stages) and "running:" not in out


def _self_train(tiny_bert, out: Path, seeds: list[int], spec) -> None:
    """The tiny pipeline with only the baselines and self-training (``spec``) enabled, writing to ``out``; no seed
    soups (test_pipeline_soup.py has them: here they would average and evaluate two more models per run)."""
    tiny_pipeline(tiny_bert, out, seeds, self_train=spec, soup=SoupSpec(enabled=False))


@pytest.mark.parametrize("teachers", ["seed", "ensemble"])
def test_self_training_labels_the_corpus_with_the_baselines_and_fine_tunes_on_task_plus_pseudo_rows(
    tiny_bert, tmp_path, teachers
):
    """The self-training stage: each seed's baseline labels the corpus (``seed``), or both seeds' baselines label
    it once, together, their probabilities averaged (``ensemble``); for each seed a fresh run reads the task's rows
    plus, per class, ``ratio`` x that class's rows of pseudo-labelled corpus documents; its export is fine-tuned on
    the task's rows alone, and competes on validation."""
    from domainbert.pipeline import SelfTrainSpec

    out = tmp_path / "p"
    _self_train(tiny_bert, out, [0, 1], SelfTrainSpec(enabled=True, teachers=teachers, ratio=0.5, max_documents=100))
    state = read_state(out / "state.json")
    labels = {s: "pseudo-ensemble" if teachers == "ensemble" else f"pseudo-seed{s}" for s in (0, 1)}
    assert set(labels.values()) == {s for s in state if s.startswith("pseudo-")}
    stages = (labels[0], "finetune-self-training-seed0-mixed", "finetune-self-training-seed0")
    assert [state[s]["status"] for s in stages] == ["done"] * 3
    assert state["finetune-self-training-seed1"]["status"] == "done"
    pseudo = json.loads((out / labels[0] / "result.json").read_text())
    taught = json.loads((out / labels[1] / "result.json").read_text())["teachers"]
    if teachers == "ensemble":
        assert pseudo["teachers"] == taught == [state[f"finetune-baseline-seed{s}"]["hf"] for s in (0, 1)]
    else:
        assert [pseudo["teachers"], taught] == [[state[f"finetune-baseline-seed{s}"]["hf"]] for s in (0, 1)]
    task = [json.loads(line) for line in (FIX / "cls_train.jsonl").read_text().splitlines() if line.strip()]
    counts = {label: sum(r["label"] == label for r in task) for label in ("api", "graphics", "network")}
    assert pseudo["labelled_documents"] == 100 and pseudo["task_rows"] == len(task)
    assert all(pseudo["per_class"][k] <= round(0.5 * n) for k, n in counts.items())
    rows = [json.loads(line) for line in Path(pseudo["train"]).read_text().splitlines()]
    assert rows[: len(task)] == [{"text": r["text"], "label": r["label"]} for r in task]
    assert len(rows) == len(task) + pseudo["pseudo_rows"] and pseudo["pseudo_rows"] > 0
    corpus = set((FIX / "corpus.txt").read_text().splitlines())
    assert all(r["text"] in corpus for r in rows[len(task) :])
    import yaml

    def config(stage):
        return yaml.safe_load((Path(state[stage]["run"]) / "config.yaml").read_text())

    mixed, final = config(stages[1]), config(stages[2])
    assert mixed["data"]["init_args"]["train"] == pseudo["train"]
    seed1 = json.loads((out / labels[1] / "result.json").read_text())["train"]
    assert config("finetune-self-training-seed1-mixed")["data"]["init_args"]["train"] == seed1
    assert mixed["model"]["init_args"]["init_from"] == str(tiny_bert)  # a fresh model, not the teacher
    assert final["model"]["init_args"]["init_from"] == state[stages[1]]["hf"]
    assert final["data"]["init_args"]["train"] == str(FIX / "cls_train.jsonl")  # the gold rows have the last word
    assert "test/f1_macro" in state[stages[2]]["metrics"]
    assert "| self-training |" in (out / "report.md").read_text()


def test_soft_self_training_starts_from_each_seeds_baseline_and_learns_the_ensembles_probabilities(tiny_bert, tmp_path):
    """``soft: true, start: baseline``: the ensemble labels ``ratio`` x the task's rows of corpus documents with its
    class probabilities, none filtered out, and each seed's baseline goes on learning from them (``spec.args``
    last), with no gold-only phase."""
    from domainbert.pipeline import SelfTrainSpec

    out = tmp_path / "p"
    spec = SelfTrainSpec(
        enabled=True, teachers="ensemble", soft=True, start="baseline", then_task=False, ratio=0.5, max_documents=100
    )
    spec.args = ["--model.learning_rate=3e-5"]
    _self_train(tiny_bert, out, [0], spec)
    state = read_state(out / "state.json")
    pseudo = json.loads((out / "pseudo-ensemble" / "result.json").read_text())
    task = [json.loads(line) for line in (FIX / "cls_train.jsonl").read_text().splitlines() if line.strip()]
    assert pseudo["soft"] and pseudo["pseudo_rows"] == pseudo["labelled_documents"] == round(0.5 * len(task))
    rows = [json.loads(line) for line in Path(pseudo["train"]).read_text().splitlines()]
    added = rows[len(task) :]
    assert all(sum(r["probabilities"].values()) == pytest.approx(1.0, abs=1e-4) for r in added)
    assert all(r["label"] == max(r["probabilities"], key=r["probabilities"].get) for r in added)
    import yaml

    run = state["finetune-self-training-seed0"]
    assert "finetune-self-training-seed0-mixed" not in state  # no gold-only phase
    config = yaml.safe_load((Path(run["run"]) / "config.yaml").read_text())
    assert config["model"]["init_args"]["init_from"] == state["finetune-baseline-seed0"]["hf"]
    assert config["model"]["init_args"]["learning_rate"] == 3e-5
    assert config["data"]["init_args"]["soft_label_column"] == "probabilities"
    assert config["data"]["init_args"]["train"] == pseudo["train"]
    assert "test/f1_macro" in run["metrics"]
