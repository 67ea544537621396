"""Training stages forked from the pipeline's server (domainbert.pipeline.forks) behave as new interpreters."""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from domainbert.pipeline import forks
from domainbert.pipeline.runner import Runner, read_state
from domainbert.pipeline.specs import TaskFiles
from domainbert.pipeline.stage import StageConfig, merge, model

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"

pytestmark = pytest.mark.skipif(not forks.enabled(), reason="stages are forked on Linux only")


@pytest.fixture(autouse=True, scope="module")
def _server_stopped_after():
    """The server these tests start (torch imported: about 1 GB) does not outlive them."""
    yield
    forks.stop()


def _server_pid() -> int | None:
    return forks.server_pid()


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
        "from domainbert.pipeline.stage import StageConfig, merge, model\n"
        f"values = merge(model(init_from={str(tiny_bert)!r}), task.values())\n"
        f"stage = StageConfig({str(ROOT / 'configs/finetune/tiny_classification.yaml')!r}, values)\n"
        "Runner(Path(" + repr(str(out)) + ")).fit('ft', stage, ['--trainer.max_epochs=1'])\n"
    )
    subprocess.run([sys.executable, str(script)], check=True, cwd=tmp_path, timeout=600)
    assert marker.read_text() == "ran\n"
    assert read_state(out / "state.json")["ft"]["status"] == "done"


@pytest.mark.slow
@pytest.mark.timeout(300)  # a relaunch of the wrong program would wait for its ranks until gloo's timeout
def test_a_two_process_ddp_stage_relaunches_the_worker_not_the_pipeline(tiny_bert, tmp_path):
    task = TaskFiles(str(FIX / "cls_train.jsonl"), str(FIX / "cls_val.jsonl"), str(FIX / "cls_test.jsonl"))
    args = ["--config", str(ROOT / "configs/trainer/ddp_cpu.yaml"), "--trainer.max_epochs=1"]
    values = merge(model(init_from=str(tiny_bert)), task.values())
    runner = Runner(tmp_path / "p", isolate="training")
    record = runner.fit("ddp", StageConfig(str(ROOT / "configs/finetune/tiny_classification.yaml"), values), args)
    assert runner.state["ddp"]["status"] == "done" and Path(record.hf, "config.json").is_file()
    assert json.loads((tmp_path / "p" / "ddp" / "result.json").read_text())["metrics"]


#: a stage that writes its pid to ``$SLEEPER_PIDS`` and sleeps: the worker imports it from the config's class path
SLEEPER = (  # sleeps when the stage builds it: the pipeline itself imports the class to resolve the stage's config
    "import os, time\nimport lightning.pytorch as L\n\n\nclass Model(L.LightningModule):\n"
    "    def __init__(self, init_from: str = '', pooling: str = 'auto'):\n        super().__init__()\n"
    "        open(os.environ['SLEEPER_PIDS'], 'a').write(f'{os.getpid()}\\n')\n        time.sleep(600)\n"
)


def _alive(pid: int) -> bool:
    from domainbert.core.files import pid_alive

    return pid_alive(pid)


def _gone(pids: list[int], seconds: float = 15.0) -> bool:
    """Whether every process of ``pids`` ended within ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(_alive(p) for p in pids):
            return True
        time.sleep(0.2)
    return False


def _pids(path: Path, count: int = 1, seconds: float = 120.0) -> list[int]:
    """The pids sleeper stages wrote to ``path`` (waiting for ``count`` of them)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.is_file() and len(path.read_text().split()) >= count:
            return [int(x) for x in path.read_text().split()]
        time.sleep(0.2)
    raise AssertionError(f"no stage wrote {path} within {seconds} s")


def _sleeper(tmp_path: Path, monkeypatch) -> tuple[Path, Path]:
    """A config whose class path is the sleeper, in the working directory; the pid file."""
    (tmp_path / "sleeper.py").write_text(SLEEPER)
    config = tmp_path / "c.yaml"
    data = "domainbert.data.classification.ClassificationDataModule"
    config.write_text(f"model:\n  class_path: sleeper.Model\ndata:\n  class_path: {data}\n")
    pids = tmp_path / "pids.txt"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SLEEPER_PIDS", str(pids))
    return config, pids


def test_a_long_tmpdir_still_forks_the_stages(tmp_path, monkeypatch):
    long = tmp_path / ("t" * max(1, 109 - len(str(tmp_path)) - 1))
    long.mkdir()
    assert len(str(long)) >= 109
    monkeypatch.setenv("TMPDIR", str(long))  # an AF_UNIX path there would be too long (108 bytes at most)
    forks.stop()
    log = tmp_path / "log.txt"
    assert forks.run(["--not-a-worker"], log) == 1
    assert "usage: python -m domainbert.pipeline --worker" in log.read_text()


def test_the_server_has_no_address_and_refuses_a_peer_without_the_key(tmp_path):
    forks.start()
    server = forks.server_pid()
    listening = Path("/proc/net/unix").read_text().splitlines()[1:]
    inodes = {os.stat(f"/proc/{server}/fd/{fd}").st_ino for fd in os.listdir(f"/proc/{server}/fd")}
    named = [line for line in listening if int(line.split()[6]) in inodes and len(line.split()) > 7]
    assert named == [], "the server's sockets have no name another process could connect to"

    # a peer on the server's own socket that does not hold the key: its pickle is never read, let alone run
    ours, theirs = socket.socketpair()
    cmd = [sys.executable, "-m", "domainbert.pipeline.forkserver", str(theirs.fileno()), str(os.getpid())]
    proc = subprocess.Popen(cmd, pass_fds=(theirs.fileno(),), stdin=subprocess.PIPE)
    theirs.close()
    proc.stdin.write(os.urandom(32))
    proc.stdin.close()
    from multiprocessing.connection import Connection

    conn = Connection(ours.detach())
    marker = tmp_path / "CODE-RAN"
    payload = f"cos\nsystem\n(S'touch {marker}'\ntR.".encode()  # pickle protocol 0: os.system("touch ...")
    conn.recv_bytes()  # the challenge
    conn.send_bytes(payload)
    assert proc.wait(60) == 1
    assert not marker.exists()


@pytest.mark.timeout(300)
def test_a_stage_whose_server_is_killed_ends_and_is_reported_failed(tmp_path, monkeypatch):
    config, pids = _sleeper(tmp_path, monkeypatch)
    forks.start()
    log, result = tmp_path / "log.txt", {}
    argv = ["--worker", "r.json", "--config", str(config)]
    runs = threading.Thread(target=lambda: result.update(code=forks.run(argv, log)))
    runs.start()
    stage = _pids(pids)
    os.kill(forks.server_pid(), signal.SIGKILL)
    runs.join(60)
    assert result["code"] == -9
    assert _gone(stage), "the stage trains on without its server"
    assert "stage server ended while this stage ran" in log.read_text()


def _pipeline(tmp_path: Path, tiny_bert) -> subprocess.Popen:
    args = ["--base_model", str(tiny_bert), "--task_train", str(FIX / "cls_train.jsonl"), "--task_val"]
    args += [str(FIX / "cls_val.jsonl"), "--probe.enabled", "false", "--dapt.enabled", "false", "--distill.enabled"]
    args += ["false", "--export.enabled", "false", "--finetune.config", "c.yaml", "--out", "p"]
    cmd = [sys.executable, "-m", "domainbert", "pipeline", *args]
    return subprocess.Popen(
        cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_as_from_a_terminal
    )


def _as_from_a_terminal() -> None:
    """Ctrl-C and hang-up act as on a terminal, also when the suite runs in the background (which ignores them)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _children(pid: int) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = Path(f"/proc/{name}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(name))
    return found


@pytest.mark.slow  # pipelines killed mid-stage: the multi-process tier
@pytest.mark.timeout(300)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_a_pipeline_ended_by_a_signal_takes_its_stage_and_server_with_it(tiny_bert, tmp_path, monkeypatch, sig):
    _sleeper(tmp_path, monkeypatch)
    proc = _pipeline(tmp_path, tiny_bert)
    stage = _pids(tmp_path / "pids.txt")
    server = [p for p in _children(proc.pid) if p not in stage]
    assert server, "the pipeline's stage server"
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert _gone([*stage, *server]), "the stage or the server outlived the pipeline"
    if sig == signal.SIGKILL:
        assert proc.returncode == -9
        return
    assert proc.returncode == 128 + sig
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("domainbert:")]
    name = signal.Signals(sig).name
    assert lines == [
        f"domainbert: pipeline stopped by {name} during stage 'finetune-baseline-seed0'; its stages and server ended "
        "with it. Run the same command again to resume p: finished stages are skipped"
    ]
    state = read_state(tmp_path / "p" / "state.json")
    assert (
        state["finetune-baseline-seed0"]["status"] == "stopped" and state["finetune-baseline-seed0"]["signal"] == name
    )
    if sig != signal.SIGTERM:  # the lock goes with the process whatever stopped it: one rerun shows it
        return
    again = _pipeline(tmp_path, tiny_bert)  # the folder is free again at once: the stopped stage runs again
    _pids(tmp_path / "pids.txt", count=len(stage) + 1)
    again.terminate()
    assert again.wait(60) == 143


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_second_pipeline_on_the_same_out_is_refused_in_one_line(tiny_bert, tmp_path, monkeypatch):
    _sleeper(tmp_path, monkeypatch)
    first = _pipeline(tmp_path, tiny_bert)
    try:
        _pids(tmp_path / "pids.txt")
        second = _pipeline(tmp_path, tiny_bert)
        out, err = second.communicate(timeout=120)
    finally:
        first.terminate()
        first.communicate(timeout=60)
    assert second.returncode == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1] == (
        f"domainbert: error: out: p is in use by another pipeline (pid {first.pid}); two pipelines never write one "
        "folder: wait for it to end, or choose another out"
    )
    assert len((tmp_path / "pids.txt").read_text().split()) == 1, "the second pipeline ran a stage"
