"""Outputs that are inputs or the user's, broken state, planted code.

Each attack is run as written in the issue; ``{name}`` placeholders are the shared fixtures (``fixtures.build``)
and ``{work}``, the attack's own folder (its working directory).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from examples.redteam import fixtures
from examples.redteam.verdict import Attack, Skip

#: ``fit``/``test`` of the tiny classification config on the shared data, two steps
CLS = [
    "--config", "{cfg_cls}", "--model.init_from", "{bert}", "--data.train", "{train}", "--data.val", "{val}",
    "--data.test", "{test}", "--data.predict", "null", "--trainer.max_steps", "2",
]  # fmt: skip
#: a pipeline with every stage off but a one-step fine-tuning: a regression costs seconds, not minutes
PIPE = [
    "pipeline", "--base_model", "{bert}", "--task_train", "{train}", "--task_val", "{val}",
    "--probe.enabled", "false", "--dapt.enabled", "false", "--distill.enabled", "false", "--export.enabled", "false",
    "--finetune.config", "{cfg_cls}", '--finetune.args=["--trainer.max_steps=1"]',
]  # fmt: skip
#: what a pipeline writes when it starts, which must not appear where it was refused
PIPE_OUTPUTS = ["state.json", "probe", "report.md", ".domainbert-output", "finetune"]


def _write(rel: str, text: str):
    """A setup writing ``text`` (placeholders filled) at ``<work>/<rel>``."""

    def setup(work: Path, values: dict) -> None:
        path = work / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.format(**values), encoding="utf-8")

    return setup


def _user_folder(work: Path, values: dict) -> None:
    """A folder of the user's holding ``probe/log.txt`` and ``probe/result.json`` (the issue's attack)."""
    (work / "mine" / "probe").mkdir(parents=True, exist_ok=True)
    (work / "mine" / "probe" / "log.txt").write_text("my own notes\n")
    (work / "mine" / "probe" / "result.json").write_text('{"mine": true}\n')


def _corpus_folder(work: Path, values: dict) -> None:
    lines = Path(values["corpus"]).read_text().splitlines()
    fixtures.jsonl(work / "data" / "corpus.jsonl", [{"text": t} for t in lines])


def _task_folder(work: Path, values: dict) -> None:
    (work / "task").mkdir(exist_ok=True)
    shutil.copy(values["train"], work / "task" / "train.jsonl")


def _state_not_json(work: Path, values: dict) -> None:
    (work / "p").mkdir(exist_ok=True)
    (work / "p" / ".domainbert-output").write_text("written by domainbert\n")
    (work / "p" / "state.json").write_text('{"probe": {"done": tr')


def _evil_ckpt(work: Path, values: dict) -> None:
    fixtures.plant_checkpoint(work / "evil.ckpt", work / "CODE-RAN")


def _evil_model(work: Path, values: dict) -> None:
    if not (work / "evil").exists():
        fixtures.plant_auto_map(Path(values["bert"]), work / "evil", work / "CODE-RAN")


def _mount_read_only(work: Path, values: dict) -> None:
    """A read-only file system at ``<work>/ro`` (a tmpfs mounted ro): EROFS even for root."""
    (work / "ro").mkdir(exist_ok=True)
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(work / "ro")], check=True,
                       capture_output=True)  # fmt: skip
    except (OSError, subprocess.CalledProcessError) as err:
        raise Skip(f"cannot mount a read-only file system here ({err})") from err


def _unmount(work: Path, values: dict) -> None:
    subprocess.run(["umount", str(work / "ro")], check=False, capture_output=True)


def _symlink_to_a(work: Path, values: dict) -> None:
    link = work / "A-link"
    if not link.is_symlink():
        os.symlink(values["clsA"], link)


def _user_file(name: str):
    return _write(name, "the user's notes\n")


def _export_user_folder(work: Path, values: dict) -> None:
    (work / "deploy").mkdir(exist_ok=True)
    (work / "deploy" / "notes.txt").write_text("keep me\n")
    (work / "deploy" / "int8").mkdir(exist_ok=True)
    (work / "deploy" / "int8" / "mine.bin").write_bytes(b"user bytes")


def item12() -> list[Attack]:
    """User files overwritten: a tool's output that is one of its inputs, a pipeline out of the user's."""
    soup = ["soup", "--models", '["{clsA}", "{clsB}"]']
    return [
        Attack("soup-out-A", "12", [*soup, "--out", "{clsA}"], "refused; A untouched",
               names=["would overwrite the input {clsA}"], protect=["{clsA}", "{clsB}"]),
        Attack("soup-out-parent", "12", [*soup, "--out", "{models}"], "refused; A, B untouched",
               names=["{models}"], protect=["{models}"]),
        Attack("soup-out-symlink-A", "new", [*soup, "--out", "A-link"], "refused; A untouched",
               names=["A-link"], setup=_symlink_to_a, protect=["{clsA}"]),
        Attack("select-out-corpus-folder", "12",
               ["select", "--model", "{bert}", "--corpus", "data/corpus.jsonl", "--task", "{train}", "--out", "data",
                "--k", "2"], "refused; corpus untouched",
               names=["would overwrite the input data/corpus.jsonl"], setup=_corpus_folder, protect=["{work}/data"]),
        Attack("pseudolabel-out-task-folder", "12",
               ["pseudolabel", "--model", "{clsA}", "--corpus", "{corpus}", "--task", "task/train.jsonl", "--out",
                "task"], "refused; train.jsonl untouched",
               names=["would overwrite the input task/train.jsonl"], setup=_task_folder, protect=["{work}/task"]),
        Attack("pipeline-out-user-folder", "12", [*PIPE, "--out", "mine"], "refused; probe/* untouched",
               names=["mine", "not written by domainbert"], setup=_user_folder, protect=["{work}/mine"]),
        Attack("pipeline-out-empty", "12", ["pipeline", "--config", "p.yaml", *PIPE[1:]],
               "refused; nothing written in the working folder", names=["out"],
               setup=_write("p.yaml", "out: ''\n"), absent=[f"{{work}}/{p}" for p in PIPE_OUTPUTS]),
        Attack("pipeline-out-root", "12", ["pipeline", "--config", "p.yaml", *PIPE[1:]],
               "refused; nothing written in /", names=["/"], setup=_write("p.yaml", "out: /\n"),
               absent=[f"/{p}" for p in PIPE_OUTPUTS]),
        Attack("select-out-user-file", "new",
               ["select", "--model", "{bert}", "--corpus", "{corpus}", "--task", "{train}", "--out", "notes.txt"],
               "refused; notes.txt untouched", names=["notes.txt"], setup=_user_file("notes.txt"),
               protect=["{work}/notes.txt"]),
        Attack("export-out-user-folder", "new",
               ["export", "--model", "{clsA}", "--out", "deploy", "--int8", "true", "--latency_examples", "4",
                "--repeats", "1"], "refused, or the user's files kept", expect="any", names=["deploy"],
               setup=_export_user_folder, protect=["{work}/deploy/notes.txt", "{work}/deploy/int8/mine.bin"]),
        Attack("vocab-out-its-model", "new",
               ["vocab", "extend", "--model", "{clsA}", "--corpus", "{corpus}", "--top_k", "5", "--out", "{clsA}"],
               "refused; the model untouched", names=["{clsA}"], protect=["{clsA}"]),
    ]  # fmt: skip


def item13() -> list[Attack]:
    """Tracebacks instead of one line: broken state, missing stage config, read-only disk, planted code."""
    return [
        Attack("pipeline-state-not-json", "13", [*PIPE, "--out", "p"], "one line naming state.json",
               names=["state.json"], setup=_state_not_json, protect=["{work}/p/state.json"]),
        Attack("pipeline-missing-stage-config", "13", [*PIPE[:-3], "--finetune.config", "nope.yaml", "--out", "p"],
               "one line naming nope.yaml before any stage", names=["nope.yaml"],
               absent=["{work}/p/probe", "{work}/p/finetune"]),
        Attack("probe-out-read-only", "13",
               ["probe", "--model", "{bert}", "--train", "{train}", "--out", "ro/out"], "one line: read-only",
               names=["Read-only file system", "ro/out"], setup=_mount_read_only, teardown=_unmount),
        Attack("fit-root-read-only", "13", ["fit", *CLS, "--trainer.default_root_dir", "ro/runs"],
               "one line: read-only", names=["Read-only file system"], setup=_mount_read_only, teardown=_unmount),
        Attack("pipeline-out-read-only", "13", [*PIPE, "--out", "ro/p"], "one line: read-only",
               names=["Read-only file system"], setup=_mount_read_only, teardown=_unmount),
        Attack("ckpt-file-url", "13", ["test", *CLS, "--ckpt_path", "file://{work}/evil.ckpt"],
               "one line naming the file; the payload never runs", names=["evil.ckpt"], setup=_evil_ckpt,
               absent=["{work}/CODE-RAN"]),
        Attack("ckpt-planted-path", "new", ["test", *CLS, "--ckpt_path", "evil.ckpt"],
               "one line; the payload never runs", names=["evil.ckpt"], setup=_evil_ckpt,
               absent=["{work}/CODE-RAN"]),
        Attack("fit-auto-map-model", "13", ["fit", *CLS[:2], "--model.init_from", "evil", *CLS[4:]],
               "one line naming auto_map; its code never imported", names=["auto_map"], setup=_evil_model,
               absent=["{work}/CODE-RAN"]),
        Attack("probe-auto-map-model", "13", ["probe", "--model", "evil", "--train", "{train}", "--out", "o"],
               "one line naming auto_map; its code never imported", names=["auto_map"], setup=_evil_model,
               absent=["{work}/CODE-RAN"], folder="fit-auto-map-model"),
        Attack("export-auto-map-model", "new", ["export", "--model", "evil", "--out", "dep"],
               "one line naming auto_map; its code never imported", names=["auto_map"], setup=_evil_model,
               absent=["{work}/CODE-RAN"], folder="fit-auto-map-model"),
        Attack("probe-out-existing-file", "13",
               ["probe", "--model", "{bert}", "--train", "{train}", "--out", "results.txt"],
               "one line before embedding; file untouched", names=["results.txt"],
               setup=_user_file("results.txt"), protect=["{work}/results.txt"]),
        Attack("fit-truncated-gz", "13",
               ["fit", "--config", "{cfg_mlm}", "--model.init_from", "{bert}", "--data.train", "c.txt.gz"],
               "one line: truncated, naming the file", names=["c.txt.gz", "truncated"],
               setup=lambda w, v: fixtures.truncated_gzip(w / "c.txt.gz")),
        Attack("select-truncated-gz", "13",
               ["select", "--model", "{bert}", "--corpus", "c.txt.gz", "--task", "{train}", "--out", "o"],
               "one line: truncated, naming the file", names=["c.txt.gz", "truncated"],
               setup=lambda w, v: fixtures.truncated_gzip(w / "c.txt.gz")),
    ]  # fmt: skip
