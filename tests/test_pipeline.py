"""``domainbert pipeline``: stages are skipped when done with the same inputs, rerun when not, and failures name
their log; the whole recipe runs end to end on the tiny models."""

import json
from pathlib import Path

import pytest

from domainbert.errors import DomainBertError
from domainbert.pipeline import ExportSpec, Runner, StageSpec, VocabSpec, pipeline

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures"


def test_runner_skips_done_stages_reruns_changed_ones_and_names_the_log_of_a_failure(tmp_path, capsys):
    runner = Runner(tmp_path)
    assert runner.tool("list", ["datamodules"], result="listed") == "listed"
    assert "classification" in (tmp_path / "list" / "log.txt").read_text()
    state = json.loads((tmp_path / "state.json").read_text())
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
    assert json.loads((tmp_path / "state.json").read_text())["bad"]["status"] == "failed"


@pytest.mark.slow
def test_tiny_pipeline_runs_every_stage_writes_the_report_and_a_rerun_skips_them(tiny_bert, tmp_path, capsys):
    common = ["--trainer.enable_progress_bar=false"]
    kwargs = dict(
        out=str(tmp_path / "p"),
        base_model=str(tiny_bert),
        corpus=str(FIX / "corpus.txt"),
        task_train=str(FIX / "cls_train.jsonl"),
        task_test=str(FIX / "cls_test.jsonl"),
        seeds=[0, 1],
        vocab=VocabSpec(enabled=False),
        dapt=StageSpec(
            "configs/pretrain/tiny_debug.yaml", ["--trainer.max_steps=4", "--trainer.log_every_n_steps=1", *common]
        ),
        finetune=StageSpec("configs/finetune/tiny_classification.yaml", ["--trainer.max_epochs=1", *common]),
        distill=StageSpec(
            "configs/distill/tiny_debug.yaml",
            ["--trainer.max_steps=4", "--model.init_args.teacher_cache=null", "--model.init_args.student_layers=1"],
        ),
        export=ExportSpec(args=["--int8", "true", "--bf16", "false", "--latency_examples", "4", "--repeats", "1"]),
    )
    report = pipeline(**kwargs)
    text = report.read_text()
    state = json.loads((tmp_path / "p" / "state.json").read_text())
    stages = ["dapt", "finetune-baseline-seed0", "finetune-baseline-seed1", "finetune-dapt-seed0"]
    stages += ["finetune-dapt-seed1", "distill", "export"]
    assert [s for s in stages if state.get(s, {}).get("status") == "done"] == stages
    assert "mean ± std over 2 seed(s)" in text and "| baseline |" in text and "| dapt |" in text
    assert "| int8 |" in text and "| student |" in text
    assert all((tmp_path / "p" / "plots" / f"{s}.png").is_file() for s in stages if s != "export")
    card = Path(state["finetune-dapt-seed0"]["hf"], "README.md").read_text()
    assert "test/f1_macro" in card and "domainbert fit --config configs/finetune/tiny_classification.yaml" in card

    capsys.readouterr()
    pipeline(**kwargs)
    out = capsys.readouterr().out
    assert out.count("done earlier: skipped") == len(stages) and "running:" not in out
