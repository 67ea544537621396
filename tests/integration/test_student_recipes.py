"""``examples/benchmarks/student_recipes.py --quick``: the distillation arms run, resume and give their table."""

from __future__ import annotations

from tests.helpers.scripts import BENCH, script_module


def test_the_quick_run_gives_every_arm_its_row_and_a_rerun_reads_the_runs_back(tmp_path, capsys):
    argv = ["--quick", "--out", str(tmp_path), "--arms", "corpus,task", "--seeds", "0"]
    with script_module(BENCH / "student_recipes.py") as script:
        figures = script.main(argv)
        first = capsys.readouterr().out
        assert set(figures) == {"teacher_test", "task_test", "corpus_test", "task_gap", "corpus_gap"}
        log = (tmp_path / "debian" / "corpus-seed0.log").read_text()
        assert "transfer set: 20 documents of" in log  # the corpus arm read its transfer set
        runs = sorted(p.name for p in (tmp_path / "debian").iterdir() if (p / "result.json").is_file())
        assert runs == ["corpus-seed0", "task-seed0", "teacher-eval"]
        mtimes = {p: (tmp_path / "debian" / p / "result.json").stat().st_mtime for p in runs}
        assert script.main(argv) == figures  # read back, not run again
        assert all((tmp_path / "debian" / p / "result.json").stat().st_mtime == t for p, t in mtimes.items())
    rows = {
        line.split()[0]: line for line in first.splitlines() if line.split()[:1] in (["teacher"], ["task"], ["corpus"])
    }
    assert set(rows) == {"teacher", "task", "corpus"}
    assert rows["corpus"].count("[") == 2  # intervals against the teacher and against the task arm
