"""Training stages forked from the pipeline's server (domainbert.pipeline.forks) behave as new interpreters."""

import json
import subprocess
import sys
from multiprocessing import forkserver
from pathlib import Path

import pytest

from domainbert.pipeline import forks
from domainbert.pipeline.runner import Runner
from domainbert.pipeline.specs import TaskFiles

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"

pytestmark = pytest.mark.skipif(not forks.enabled(), reason="stages are forked on Linux only")


@pytest.fixture(autouse=True, scope="module")
def _server_stopped_after():
    """The server these tests start (torch imported: about 1 GB) does not outlive them."""
    yield
    forks.stop()


def _server_pid() -> int | None:
    return forkserver._forkserver._forkserver_pid


def test_the_server_starts_once_per_environment(monkeypatch):
    forks.start()
    first = _server_pid()
    forks.start()
    assert _server_pid() == first  # the same environment: the same server
    monkeypatch.setenv("DOMAINBERT_FORKS_TEST", "1")  # a library may have read the old one at import
    forks.start()
    assert _server_pid() not in (None, first)


def test_a_forked_stage_has_the_workers_exit_status_and_output_in_its_log(tmp_path):
    log = tmp_path / "log.txt"
    assert forks.run(["--not-a-worker"], log) == 1
    assert "usage: python -m domainbert.pipeline --worker" in log.read_text()
    missing = tmp_path / "missing.yaml"
    code = forks.run(["--worker", str(tmp_path / "result.json"), "--config", str(missing)], log)
    assert code == 2 and str(missing) in log.read_text()  # a new log: the usage line is gone
    assert "usage: python -m domainbert.pipeline --worker" not in log.read_text()


def test_a_killed_stage_gives_the_signal(tmp_path, monkeypatch):
    # SIGKILL from the stage itself: the worker imports the config's class path, which kills its process; the
    # module lies in the working directory, which ``python -m`` puts first on sys.path, and so does a forked stage
    plugin = tmp_path / "killer.py"
    plugin.write_text("import os, signal\nos.write(2, b'fd 2\\n')\nos.kill(os.getpid(), signal.SIGKILL)\n")
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "c.yaml"
    config.write_text("model:\n  class_path: killer.Model\n")
    log = tmp_path / "log.txt"
    log.write_text("an earlier run's log\n")
    code = forks.run(["--worker", str(tmp_path / "r.json"), "--config", str(config)], log)
    assert code == -9
    assert log.read_text() == "fd 2\n"  # written below Python's streams, and the earlier run's log is gone


def test_a_users_unguarded_script_is_not_run_again_by_a_stage(tiny_bert, tmp_path):
    # a script without ``if __name__ == "__main__"``: a forked stage that prepared itself from it would run it again
    out, marker = tmp_path / "p", tmp_path / "runs.txt"
    script = tmp_path / "script.py"
    script.write_text(
        "from pathlib import Path\n"
        "from domainbert.pipeline.runner import Runner\n"
        "from domainbert.pipeline.specs import TaskFiles\n"
        f"Path({str(marker)!r}).open('a').write('ran\\n')\n"
        f"task = TaskFiles({str(FIX / 'cls_train.jsonl')!r}, {str(FIX / 'cls_val.jsonl')!r})\n"
        f"args = ['--model.init_from', {str(tiny_bert)!r}, *task.data_args(), '--trainer.max_epochs=1']\n"
        f"Runner(Path({str(out)!r})).fit('ft', {str(ROOT / 'configs/finetune/tiny_classification.yaml')!r}, args)\n"
    )
    subprocess.run([sys.executable, str(script)], check=True, cwd=tmp_path, timeout=600)
    assert marker.read_text() == "ran\n"
    assert json.loads((out / "state.json").read_text())["ft"]["status"] == "done"


@pytest.mark.slow
@pytest.mark.timeout(300)  # a relaunch of the wrong program would wait for its ranks until gloo's timeout
def test_a_two_process_ddp_stage_relaunches_the_worker_not_the_pipeline(tiny_bert, tmp_path):
    task = TaskFiles(str(FIX / "cls_train.jsonl"), str(FIX / "cls_val.jsonl"), str(FIX / "cls_test.jsonl"))
    args = ["--config", str(ROOT / "configs/trainer/ddp_cpu.yaml"), "--model.init_from", str(tiny_bert)]
    args += [*task.data_args(), "--trainer.max_epochs=1"]
    runner = Runner(tmp_path / "p", isolate="training")
    record = runner.fit("ddp", str(ROOT / "configs/finetune/tiny_classification.yaml"), args)
    assert record["status"] == "done" and Path(record["hf"], "config.json").is_file()
    assert json.loads((tmp_path / "p" / "ddp" / "result.json").read_text())["metrics"]
