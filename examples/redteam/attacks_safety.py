"""The fork server, two pipelines on one folder, outputs over the user's data, caches that break or lie.

Items S1-S4 of the safety round: a long ``$TMPDIR``; a pipeline ended by a signal (its stage and server must end
with it, in one line); a same-user process talking to the stage server; two pipelines on one ``out``; ``--out`` on a
home, the root, a project, an input or a file, even with ``--overwrite true``; a tokenized split cut short or
replaced by another split's; a data file edited with its modification time restored; a broken or malformed
``--help`` cache entry. The rows that must stop a process mid-stage are short Python scripts (``python=True``) that
drive ``python -m domainbert pipeline`` themselves.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from examples.redteam.attacks_outputs import PIPE
from examples.redteam.verdict import Attack, Result

#: a stage that writes its pid to ``$SLEEPER_PIDS`` and sleeps when the stage builds its model (the pipeline itself
#: imports the class to resolve the stage's config); a config naming it as the model's class path
SLEEPER = (
    "import os, time\nimport lightning.pytorch as L\n\n\nclass Model(L.LightningModule):\n"
    "    def __init__(self, init_from: str = '', pooling: str = 'auto'):\n        super().__init__()\n"
    "        open(os.environ['SLEEPER_PIDS'], 'a').write(f'{os.getpid()}\\n')\n        time.sleep(600)\n"
)

#: the pipeline the scripts start: ``PIPE`` with the sleeper as the fine-tuning config
SLEEPY = [*PIPE[:-3], "--finetune.config", "c.yaml", "--out", "p"]

#: helpers of the scripts below: start the sleepy pipeline, wait for its stage, find its server, check pids
COMMON = """
import json, os, signal, socket, subprocess, sys, time
from pathlib import Path
ARGS = json.loads(sys.argv[1])
os.environ["SLEEPER_PIDS"] = str(Path("pids.txt").absolute())
def start():
    return subprocess.Popen([sys.executable, "-m", "domainbert", *ARGS], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
def stages(count=1, seconds=180):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        p = Path("pids.txt")
        if p.is_file() and len(p.read_text().split()) >= count:
            return [int(x) for x in p.read_text().split()]
        time.sleep(0.2)
    print("no stage started"); sys.exit(7)
def alive(pid):
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][:1] != "Z"
    except OSError:
        return False
def children(pid):
    found = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            if int(Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(name))
        except OSError:
            pass
    return found
def gone(pids, seconds=20):
    end = time.monotonic() + seconds
    while time.monotonic() < end and any(map(alive, pids)):
        time.sleep(0.2)
    return [p for p in pids if alive(p)]
def one_line(err):
    return [l for l in err.splitlines() if l.startswith("domainbert:")]
"""

#: the pipeline is sent ``argv[2]`` (TERM, INT, KILL) mid-stage, or its server is killed (SERVER)
SIGNALLED = (
    COMMON
    + """
how = sys.argv[2]
proc = start()
stage = stages()
server = [p for p in children(proc.pid) if p not in stage]
if how == "SERVER":
    os.kill(server[0], signal.SIGKILL)
else:
    proc.send_signal(getattr(signal, "SIG" + how))
out, err = proc.communicate(timeout=120)
left = gone(stage + server)
said = one_line(err)
print(f"pipeline rc {proc.returncode}; left running: {left or 'none'}; said: {said[-1][:150] if said else 'nothing'}")
if left or "Traceback" in err:
    print("the stage or the server outlived the pipeline" if left else "a traceback"); sys.exit(5)
if how in ("TERM", "INT"):
    from domainbert.pipeline.runner import read_state
    state = read_state(Path("p/state.json"))
    stopped = [s for s, r in state.items() if r.get("status") == "stopped"]
    fine = proc.returncode == 128 + getattr(signal, "SIG" + how) and len(said) == 1 and "stopped by" in said[0]
    print(f"state.json records as stopped: {stopped or 'nothing'}")
    sys.exit(0 if fine and stopped else 5)
if how == "SERVER":  # one error line; the log's last lines under it say why (the server ended)
    errors = [l for l in err.splitlines() if l.startswith("domainbert: error:")]
    print(f"error: {errors[0][:150] if errors else 'none'}")
    fine = proc.returncode == 2 and len(errors) == 1 and "failed" in errors[0] and "server ended" in err
    sys.exit(0 if fine else 5)
sys.exit(0 if proc.returncode == -9 else 5)
"""
)

#: a same-user process looks for the server's socket and sends it a pickle that would create ``CODE-RAN``
KNOCK = (
    COMMON
    + """
proc = start()
stage = stages()
mine = set(children(proc.pid)) | {proc.pid}
inodes = set()
for pid in mine:
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            inodes.add(os.stat(f"/proc/{pid}/fd/{fd}").st_ino)
        except OSError:
            pass
named = []
for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
    f = line.split()
    if len(f) > 7 and int(f[6]) in inodes:
        named.append("\\0" + f[7][1:] if f[7].startswith("@") else f[7])  # an abstract name, or a path
payload = b"cos\\nsystem\\n(S'touch " + str(Path("CODE-RAN").absolute()).encode() + b"'\\ntR."
for path in named:
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(5)
            s.connect(path)
            s.sendall(len(payload).to_bytes(4, "big") + payload)
            time.sleep(2)
    except OSError as err:
        print(f"{path}: {err}")
proc.terminate()
proc.communicate(timeout=120)
print(f"the pipeline's processes have {len(named)} named socket(s): {named}")
sys.exit(0 if not Path("CODE-RAN").exists() and not named else 5)
"""
)

#: a second pipeline started on the same ``out`` while the first runs a stage
TWICE = (
    COMMON
    + """
first = start()
stages()
second = start()
out, err = second.communicate(timeout=180)
first.terminate()
first.communicate(timeout=120)
said = one_line(err)
runs = len(Path("pids.txt").read_text().split())
print(f"second pipeline: rc {second.returncode}; stages run {runs}; said: {said[-1][:160] if said else 'nothing'}")
fine = second.returncode == 2 and len(said) == 1 and "in use by another pipeline" in said[0] and runs == 1
sys.exit(0 if fine and "Traceback" not in err else 5)
"""
)

#: a fit; its tokenized splits cut short (``cut``) or each replaced by another split's (``foreign``: a valid file of
#: other rows); the same fit again: it must tokenize again and say so
CUT_CACHE = """
import subprocess, sys, json
from pathlib import Path
args, how = json.loads(sys.argv[1]), sys.argv[2]
def fit():
    proc = subprocess.run([sys.executable, "-m", "domainbert", *args], capture_output=True, text=True)
    return proc.returncode, proc.stdout + proc.stderr
rc, out = fit()
if rc:
    print(out[-2000:]); sys.exit(6)
cut = sorted(p for p in Path("dsc").rglob("cache-*.arrow") if len(p.stem) == len("cache-") + 32)  # tokenized splits
data = [p.read_bytes() for p in cut]
for p, own, other in zip(cut, data, data[1:] + data[:1]):
    p.write_bytes(own[: len(own) // 2] if how == "cut" else other)
if how == "foreign" and (len(cut) < 2 or len(set(data)) < 2):
    print(f"{len(cut)} tokenized file(s): nothing to swap"); sys.exit(6)
rc, out = fit()
said = [l for l in out.splitlines() if "was cut short or replaced" in l]
print(f"{how} {len(cut)} tokenized file(s); second fit rc {rc}; said: {said[0] if said else 'nothing'}")
if "Traceback" in out:
    print(out.strip().splitlines()[-1]); sys.exit(5)
sys.exit(0 if rc == 0 and said and cut else 5)
"""

#: a fit on train.jsonl; the file cut to 30 rows, its modification time put back; the fit again must read 30 rows
EDITED = """
import os, subprocess, sys, json
from pathlib import Path
args = json.loads(sys.argv[1])
def fit():
    proc = subprocess.run([sys.executable, "-m", "domainbert", *args], capture_output=True, text=True)
    return proc.returncode, proc.stdout + proc.stderr
train = Path("train.jsonl")
rc, out = fit()
if rc:
    print(out[-2000:]); sys.exit(6)
st = train.stat()
rows = train.read_text().splitlines()
train.write_text("\\n".join(rows[:30]) + "\\n")
os.utime(train, ns=(st.st_atime_ns, st.st_mtime_ns))
rc, out = fit()
reused = [l for l in out.splitlines() if l.startswith("[cache] tokenized train.jsonl")]
print(f"train.jsonl cut from {len(rows)} to 30 rows, mtime restored; second fit rc {rc}; "
      f"{reused[0] if reused else 'tokenized anew'}")
stale = any(f"({len(rows)} rows" in l for l in reused)
sys.exit(0 if rc == 0 and not stale and "Traceback" not in out else 5)
"""

CLS_FIT = [
    "fit", "--config", "{cfg_cls}", "--model.init_from", "{bert}", "--data.train", "{train}", "--data.val", "{val}",
    "--data.test", "null", "--data.predict", "null", "--trainer.max_steps", "2",
]  # fmt: skip


def _script_args(args: list[str]) -> str:
    """``args`` as one JSON argument of a script, its ``{placeholders}`` kept for the replay to fill."""
    return json.dumps(args)


def _code(script: str) -> str:
    """A script as an attack's argument: its braces doubled (the replay fills ``{placeholders}`` in every one)."""
    return script.replace("{", "{{").replace("}", "}}")


def _sleeper(work: Path, values: dict) -> None:
    (work / "sleeper.py").write_text(SLEEPER)
    data = "domainbert.data.classification.ClassificationDataModule"
    (work / "c.yaml").write_text(f"model:\n  class_path: sleeper.Model\ndata:\n  class_path: {data}\n")
    (work / "pids.txt").unlink(missing_ok=True)
    shutil.rmtree(work / "p", ignore_errors=True)


def _long_tmpdir(work: Path, values: dict) -> None:
    long = work / ("t" * max(1, 109 - len(str(work)) - 1))
    long.mkdir(exist_ok=True)
    values["long_tmp"] = str(long)


def _home(work: Path, values: dict) -> None:
    (work / "home" / "docs").mkdir(parents=True, exist_ok=True)
    (work / "home" / "docs" / "thesis.tex").write_text("years of work\n")


def _own_model(work: Path, values: dict) -> None:
    if not (work / "mine-model").exists():
        shutil.copytree(values["bert"], work / "mine-model")


def _user_reports(work: Path, values: dict) -> None:
    (work / "deploy").mkdir(exist_ok=True)
    (work / "deploy" / "report.md").write_text("# my report\n")
    (work / "deploy" / "report.json").write_text('{"mine": true}\n')


def _project(work: Path, values: dict) -> None:
    (work / "pyproject.toml").write_text("[project]\nname = 'mine'\n")


def _notes(work: Path, values: dict) -> None:
    (work / "notes.txt").write_text("the user's notes\n")


def _help_entry(sources, text):
    """A ``fit --help`` cache entry with the current key (so it is read) and ``sources`` and ``text`` as given."""

    def setup(work: Path, values: dict) -> None:
        import os

        os.environ["DOMAINBERT_CACHE"] = str(work / "cache")
        try:
            from domainbert.cli import help_cache

            entry = help_cache.folder() / "fit.json"
            entry.parent.mkdir(parents=True, exist_ok=True)
            entry.write_text(json.dumps({"key": help_cache.key("fit"), "sources": sources, "text": text}))
        finally:
            del os.environ["DOMAINBERT_CACHE"]

    return setup


def _copy_train(work: Path, values: dict) -> None:
    shutil.copy(values["train"], work / "train.jsonl")
    shutil.rmtree(work / "dsc", ignore_errors=True)


def _script_ok(res: Result) -> tuple[bool, str]:
    lines = [line for line in res.out.strip().splitlines() if line.strip()]
    return res.rc == 0, " | ".join(lines[-2:])[:230] or f"rc {res.rc}"


def _served(res: Result) -> tuple[bool, str]:
    clean = "\x1b" not in res.out and "\x07" not in res.out
    shown = "usage shown" if "usage:" in res.out else "NO usage"
    note = f"rc {res.rc}; {shown}; escapes {'none' if clean else 'SHOWN'}"
    return res.rc == 0 and "usage:" in res.out and clean, note


def _pipeline_done(res: Result) -> tuple[bool, str]:
    from domainbert.pipeline.runner import read_state

    done = read_state(res.work / "p" / "state.json")
    ok = res.rc == 0 and any(r.get("status") == "done" for r in done.values())
    return ok, f"rc {res.rc}; stages done: {[s for s, r in done.items() if r.get('status') == 'done']}"


def safety() -> list[Attack]:
    """Items S1-S4 of the safety round."""
    sleepy = _script_args(SLEEPY)
    export = ["export", "--model", "{clsA}", "--latency_examples", "2", "--repeats", "1", "--out"]
    return [
        Attack("pipeline-long-tmpdir", "S1a", [*PIPE, "--out", "p"], "rc 0: the stages forked or started anew",
               expect="ok", check=_pipeline_done, setup=_long_tmpdir, env={"TMPDIR": "{long_tmp}"}),
        Attack("pipeline-sigterm-mid-stage", "S1b", ["-c", _code(SIGNALLED), sleepy, "TERM"],
               "rc 143, one line; stage and server end; state.json says stopped", expect="custom",
               check=_script_ok, python=True, setup=_sleeper),
        Attack("pipeline-sigint-mid-stage", "S1b", ["-c", _code(SIGNALLED), sleepy, "INT"],
               "rc 130, one line (no KeyboardInterrupt traceback); stage and server end", expect="custom",
               check=_script_ok, python=True, setup=_sleeper),
        Attack("pipeline-sigkill-mid-stage", "S1b", ["-c", _code(SIGNALLED), sleepy, "KILL"],
               "stage and server end with the pipeline", expect="custom", check=_script_ok, python=True,
               setup=_sleeper),
        Attack("server-sigkill-mid-stage", "S1b", ["-c", _code(SIGNALLED), sleepy, "SERVER"],
               "the stage ends with its server; the pipeline reports it failed", expect="custom", check=_script_ok,
               python=True, setup=_sleeper),
        Attack("server-pickle-from-same-user", "S1c", ["-c", _code(KNOCK), sleepy],
               "no socket to connect to; the pickle never runs", expect="custom", check=_script_ok, python=True,
               setup=_sleeper, absent=["{work}/CODE-RAN"]),
        Attack("pipeline-twice-on-one-out", "S2", ["-c", _code(TWICE), sleepy],
               "the second refused in one line; one stage ran", expect="custom", check=_script_ok, python=True,
               setup=_sleeper),
        Attack("vocab-out-home-overwrite", "S3",
               ["vocab", "extend", "--model", "{bert}", "--corpus", "{corpus}", "--top_k", "5", "--out", "~",
                "--overwrite", "true"], "refused: a home folder; the home untouched", names=["home folder"],
               setup=_home, env={"HOME": "{work}/home"}, protect=["{work}/home"]),
        Attack("vocab-out-its-model-overwrite", "S3",
               ["vocab", "extend", "--model", "mine-model", "--corpus", "{corpus}", "--top_k", "5", "--out",
                "mine-model", "--overwrite", "true"], "refused; the model untouched",
               names=["would overwrite the input mine-model"], setup=_own_model, protect=["{work}/mine-model"]),
        Attack("export-out-user-reports", "S3", [*export, "deploy"], "refused; report.md and report.json untouched",
               names=["deploy", "not written by domainbert"], setup=_user_reports, protect=["{work}/deploy"]),
        Attack("export-out-root", "S3", [*export, "/"], "refused: the root; nothing written in /",
               names=["root of the file system"], absent=["/report.md", "/report.json", "/student",
                                                          "/.domainbert-output"]),
        Attack("export-out-project-root", "S3", [*export, "."], "refused: a project folder",
               names=["project folder"], setup=_project,
               absent=["{work}/report.md", "{work}/student", "{work}/.domainbert-output"]),
        Attack("export-out-a-file", "S3", [*export, "notes.txt"], "refused before any work; the file untouched",
               names=["notes.txt"], setup=_notes, protect=["{work}/notes.txt"]),
        Attack("pipeline-out-home", "S3", [*PIPE, "--out", "{work}/home"], "refused: a home folder",
               names=["home folder"], setup=_home, env={"HOME": "{work}/home"}, protect=["{work}/home"],
               absent=["{work}/home/.domainbert-output", "{work}/home/state.json"]),
        Attack("fit-token-cache-cut-short", "S4a", ["-c", _code(CUT_CACHE), _script_args(CLS_FIT), "cut"],
               "the cut file tokenized again, in one line naming it", expect="custom", check=_script_ok,
               python=True, env={"HF_DATASETS_CACHE": "{work}/dsc"}, setup=_copy_train),
        Attack("fit-token-cache-foreign", "S4a", ["-c", _code(CUT_CACHE), _script_args(CLS_FIT), "foreign"],
               "a split's file replaced by another split's: tokenized again, in one line naming it",
               expect="custom", check=_script_ok, python=True, env={"HF_DATASETS_CACHE": "{work}/dsc"},
               setup=_copy_train),
        Attack("fit-data-edited-mtime-restored", "S4b",
               ["-c", _code(EDITED), _script_args([*CLS_FIT[:6], "train.jsonl", *CLS_FIT[7:]])],
               "the edited file read anew (its rows, not the old ones)", expect="custom", check=_script_ok,
               python=True, env={"HF_DATASETS_CACHE": "{work}/dsc"}, setup=_copy_train),
        Attack("fit-help-cache-empty-source", "S4c", ["fit", "--help"], "rc 0: the entry rebuilt, the help shown",
               expect="ok", check=_served, env={"DOMAINBERT_CACHE": "{work}/cache"},
               setup=_help_entry([[]], "stale\n")),
        Attack("fit-help-cache-escapes", "S4c", ["fit", "--help"], "rc 0: the kept text without escape sequences",
               expect="ok", check=_served, env={"DOMAINBERT_CACHE": "{work}/cache"},
               setup=_help_entry([], "usage: domainbert fit\x1b]0;owned\x07\x1b[2J\n")),
        Attack("fit-help-cache-malformed", "S4c", ["fit", "--help"], "rc 0: the entry rebuilt, the help shown",
               expect="ok", check=_served, env={"DOMAINBERT_CACHE": "{work}/cache"},
               setup=_help_entry("not a list", ["not", "text"])),
    ]  # fmt: skip
