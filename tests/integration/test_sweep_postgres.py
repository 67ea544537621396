"""Distributed sweep on a real PostgreSQL: three independent workers complete one study, nothing duplicated or lost.

The server is the one named by ``DOMAINBERT_TEST_POSTGRES`` (``.ci/postgres.sh`` starts one and exports it), else a
throwaway cluster started here in a temporary folder from the OS package (``initdb``/``pg_ctl`` under
``/usr/lib/postgresql/*/bin``; as root they run as the ``postgres`` user). Without either the test is skipped,
with the reason.

The workers are three separate ``domainbert sweep`` commands, each with its own ``--out`` folder, as on three
machines: they share nothing but the storage URL.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests.helpers.faults_summary import record

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
FIT = TESTS / "fixtures" / "sweep_fit.yaml"
SPACE = TESTS / "fixtures" / "sweep_toy_space.yaml"
WORKERS, TRIALS = 3, 6

pytestmark = [pytest.mark.postgres, pytest.mark.faults, pytest.mark.slow]


def _pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def with_driver(url: str) -> str:
    """``url`` naming an installed driver: SQLAlchemy 2.1 maps ``postgresql://`` to psycopg 3, not psycopg2."""
    import importlib.util

    if not url.startswith("postgresql://"):
        return url
    if importlib.util.find_spec("psycopg") is not None:
        return url
    if importlib.util.find_spec("psycopg2") is not None:
        return "postgresql+psycopg2://" + url[len("postgresql://") :]
    pytest.skip("no PostgreSQL driver: pip install 'psycopg[binary]' (or psycopg2-binary)")


@pytest.fixture(scope="module")
def postgres_url():
    """A PostgreSQL URL: the given server, or a throwaway cluster started (and stopped) here."""
    url = os.environ.get("DOMAINBERT_TEST_POSTGRES")
    if url:
        yield with_driver(url)
        return
    with_driver("postgresql://")  # skips without a driver
    bin_dir = _pg_bin()
    if bin_dir is None:
        pytest.skip("no PostgreSQL server: set DOMAINBERT_TEST_POSTGRES, or install it (apt-get install postgresql)")
    run: list[str] = []
    if os.geteuid() == 0:
        if shutil.which("runuser") is None:
            pytest.skip("running as root, and no runuser to start PostgreSQL as the postgres user")
        run = ["runuser", "-u", "postgres", "--"]
    # not under pytest's tmp folder: it is private to the user, and the server may run as another one
    base = Path(tempfile.mkdtemp(prefix="domainbert-pg-"))
    if run:
        shutil.chown(base, user="postgres")
    data, port = base / "data", _free_port()

    def pg(*cmd: str) -> subprocess.CompletedProcess:
        return subprocess.run([*run, *cmd], capture_output=True, text=True, timeout=120)

    init = pg(str(bin_dir / "initdb"), "-D", str(data), "-U", "domainbert", "--auth=trust", "-E", "UTF8")
    if init.returncode:
        pytest.skip(f"initdb failed: {init.stderr.strip()[-300:]}")
    opts = f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off"
    start = pg(str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(base / "log"), "-w", "-t", "30", "-o", opts, "start")
    if start.returncode:
        pytest.skip(f"the PostgreSQL server did not start: {start.stderr.strip()[-300:]}")
    try:
        made = pg(str(bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "domainbert", "domainbert")
        assert made.returncode == 0, made.stderr
        yield with_driver(f"postgresql://domainbert@127.0.0.1:{port}/domainbert")
    finally:
        pg(str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop")
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.faults
def test_three_workers_on_postgres_complete_one_study_without_duplicates_or_losses(postgres_url, tmp_path):
    name = f"pg-{os.getpid()}-{time.time_ns()}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env["OMP_NUM_THREADS"] = "1"
    barrier = tmp_path / "barrier"  # each worker's first trial waits for the other two: real concurrency
    procs = []
    for i in range(WORKERS):
        cmd = [sys.executable, "-m", "domainbert", "sweep", "--config", str(FIT), "--sweep", str(SPACE)]
        cmd += ["--n-trials", str(TRIALS), "--storage", postgres_url, "--study-name", name]
        cmd += ["--out", str(tmp_path / f"worker{i}"), "--no-plots", "--heartbeat-interval", "5"]
        cmd += [f"--model.init_args.barrier_dir={barrier}", f"--model.init_args.barrier_n={WORKERS}"]
        log = open(tmp_path / f"worker{i}.log", "wb")  # noqa: SIM115 - closed below
        procs.append((subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT), log))
    try:
        codes = [p.wait(timeout=300) for p, _ in procs]
    finally:
        for p, log in procs:
            if p.poll() is None:
                p.kill()
            log.close()
    logs = "\n".join((tmp_path / f"worker{i}.log").read_text()[-1500:] for i in range(WORKERS))
    assert codes == [0] * WORKERS, logs
    for i in range(WORKERS):  # the password-less URL is printed as given; nothing else leaks
        assert "[sweep] study" in (tmp_path / f"worker{i}.log").read_text()

    study = optuna.load_study(study_name=name, storage=postgres_url)
    trials = study.get_trials()
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    lost = sum(t.state != TrialState.COMPLETE for t in trials)  # failed, pruned or left running
    record("data_lost", lost)
    record("postgres_trials", len(trials))
    assert lost == 0, [(t.number, t.state) for t in trials]
    assert [t.number for t in trials] == list(range(len(trials)))  # no gap in the numbering
    # The study reaches its target; independent workers (no shared lock file) may each start at most one
    # trial past it when they check the count at the same moment.
    assert TRIALS <= len(complete) <= TRIALS + WORKERS - 1
    assert len({tuple(sorted(t.params.items())) for t in complete}) == len(complete)  # no trial ran twice
    assert len({t.user_attrs["worker"] for t in complete}) == WORKERS, logs  # all three shared the work
    for t in complete:  # each trial's result sits in the folder of the worker that ran it
        assert Path(t.user_attrs["run_dir"], "config.yaml").is_file()
    optuna.delete_study(study_name=name, storage=postgres_url)


def test_workers_opening_a_fresh_database_at_once_all_succeed(postgres_url):
    import threading

    import sqlalchemy

    from domainbert.sweep.storage import open_storage

    fresh = f"fresh_{os.getpid()}_{time.time_ns()}"
    admin = sqlalchemy.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sqlalchemy.text(f"CREATE DATABASE {fresh}"))
    url = postgres_url.rsplit("/", 1)[0] + "/" + fresh
    errors, start = [], threading.Barrier(WORKERS)

    def worker():
        start.wait()
        try:
            open_storage(url, 60, None, 1).engine.dispose()
        except Exception as err:  # noqa: BLE001 - collected and asserted below
            errors.append(err)

    threads = [threading.Thread(target=worker) for _ in range(WORKERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    with admin.connect() as conn:
        conn.execute(sqlalchemy.text(f"DROP DATABASE {fresh} WITH (FORCE)"))
    admin.dispose()
    assert not errors, errors
