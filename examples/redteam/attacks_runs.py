"""Silent nonsense, exports, distillation and metrics.csv, and two more
(the sweep's doubled line, ``test``'s empty ``version_N/``), replayed from the command line."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

from examples.redteam import fixtures
from examples.redteam.attacks_outputs import CLS, PIPE, PIPE_OUTPUTS
from examples.redteam.verdict import Attack, Result

MLM = ["--config", "{cfg_mlm}", "--model.init_from", "{bert}", "--data.train", "{corpus}", "--trainer.max_steps", "3"]
RUNS = "runs/tiny_classification"

#: plain transformers on an export, without remote code: it must refuse, naming trust_remote_code
PLAIN = """
import sys
from transformers import AutoModelForSequenceClassification, pipeline
said = []
for load in (lambda p: AutoModelForSequenceClassification.from_pretrained(p),
             lambda p: pipeline("text-classification", model=p)):
    try:
        load(sys.argv[1])
    except Exception as err:
        named = " (names trust_remote_code)" if "trust_remote_code" in str(err) else ""
        said.append(type(err).__name__ + named + ": " + " ".join(str(err).split())[:120])
    else:
        print("loaded without trust_remote_code: it would answer wrong"); sys.exit(0)
print(" | ".join(said)); sys.exit(3)
"""
#: with trust_remote_code=True, transformers must give domainbert's own logits
REMOTE = """
import sys, torch
from transformers import AutoModelForSequenceClassification as A
from domainbert.core.hf import load_model, load_tokenizer
out = sys.argv[1]
tok = load_tokenizer(out)
enc = tok(["graphical images here", "secure sockets using threads"], padding=True, return_tensors="pt")
batch = {{k: v for k, v in enc.items() if k in tok.model_input_names}}
with torch.no_grad():
    remote = A.from_pretrained(out, trust_remote_code=True).eval()(**batch).logits
    own = load_model(A, out)[0].eval()(**batch).logits
diff = float((remote - own).abs().max())
print(f"max |logit difference| {{diff:.2e}}"); sys.exit(0 if diff < 1e-5 else 4)
"""


def _csv_rows(path: Path) -> int:
    with path.open() as fh:
        return sum(1 for _ in csv.DictReader(fh))


def metrics_written(run: str):
    """A check: ``<run>/metrics.csv`` exists and holds at least one row."""

    def check(res: Result) -> tuple[bool, str]:
        path = res.work / run / "metrics.csv"
        if not path.is_file():
            return False, f"rc 0 but no {run}/metrics.csv"
        rows = _csv_rows(path)
        return rows > 0, f"{run}/metrics.csv: {rows} row(s) ({res.seconds:.0f} s)"

    return check


def _exported(res: Result) -> tuple[bool, str]:
    hf, ok = res.work / RUNS / "version_0" / "hf", metrics_written(f"{RUNS}/version_0")(res)
    return ok[0] and (hf / "config.json").is_file(), f"{ok[1]}; export {'in' if hf.is_dir() else 'NOT in'} hf/"


def _refused_naming_trust(res: Result) -> tuple[bool, str]:
    said = res.out.strip().splitlines()[-1] if res.out.strip() else "(no output)"
    return res.rc == 3 and said.count("trust_remote_code") >= 2, f"rc {res.rc}: {said[:150]}"


def _same_logits(res: Result) -> tuple[bool, str]:
    return res.rc == 0, (res.out.strip().splitlines() or ["(no output)"])[-1]


def finite_or_refused(res: Result) -> tuple[bool, str]:
    """A run at an absurd learning rate: refused in one line, or every exported weight and final metric finite, and
    a final training loss that blew up (over 100) said in the last lines and in every export's model card."""
    if res.rc != 0:
        lines = res.error_lines()
        return len(lines) == 1, (lines or ["no error line"])[0]
    from safetensors.torch import load_file

    final = [line for line in res.out.splitlines() if line.startswith("Final metrics")]
    weights = sorted(res.work.rglob("model.safetensors"))
    bad = [str(w) for w in weights if not all(t.isfinite().all() for t in load_file(w).values())]
    nan = any(w in line.lower() for line in final for w in ("nan", "inf"))
    note = f"rc 0; {len(weights)} export(s); {final[-1] if final else 'no final metrics'}"
    loss = re.search(r"train/loss ([0-9.e+-]+)", final[-1]) if final else None
    if loss and float(loss.group(1)) > 100:  # diverged: the end of the output and the cards must say so
        # the output is stdout then stderr: the run's last printed lines are those after its final metrics
        printed = res.out.splitlines()
        tail = printed[printed.index(final[-1]) :][:4]
        cards = [w.parent / "README.md" for w in weights]
        unsaid = [str(c) for c in cards if "training diverged" not in (c.read_text() if c.is_file() else "")]
        if not any("training diverged" in line.lower() for line in tail):
            return False, note + "; the divergence is not said in the last lines"
        if unsaid:
            return False, note + f"; the card {unsaid[0]} does not say the training diverged"
        note += "; the divergence said in the last lines and the card"
    return not bad and not nan, note + (f"; NON-FINITE weights in {bad[0]}" if bad else "")


def _cache_small(res: Result) -> tuple[bool, str]:
    metas = sorted((res.work / "tcache").rglob("meta.json"))
    rows = [json.loads(m.read_text()).get("rows", 0) for m in metas]
    fine = res.rc == 0 and all(r <= 3 * 8 for r in rows)
    return fine, f"rc {res.rc} in {res.seconds:.0f} s; teacher rows cached {rows} of 2400 (3 steps x 8 allowed)"


def item14() -> list[Attack]:
    """Silent nonsense: a head-less teacher, an absurd learning rate, no seeds, a missing corpus, a half config."""
    return [
        Attack("pseudolabel-headless-teacher", "14",
               ["pseudolabel", "--model", "{bert}", "--corpus", "{corpus}", "--task", "{train}", "--out", "o"],
               "refused: no trained head", absent=["{work}/o/train.jsonl"]),
        Attack("fit-lr-1e3-cls", "14", ["fit", *CLS, "--model.learning_rate", "1e3", "--trainer.max_steps", "6"],
               "refused, or nothing non-finite exported and a divergence said", expect="custom",
               check=finite_or_refused),
        Attack("fit-lr-1e3-mlm", "14", ["fit", *MLM, "--model.learning_rate", "1e3", "--trainer.max_steps", "6"],
               "refused, or nothing non-finite exported and a divergence said", expect="custom",
               check=finite_or_refused),
        Attack("pipeline-seeds-empty", "14", ["pipeline", "--config", "p.yaml", *PIPE[1:], "--out", "p"],
               "one line: seeds is empty", names=["seeds"], setup=_write_yaml("seeds: []\n"),
               absent=[f"{{work}}/p/{p}" for p in PIPE_OUTPUTS]),
        Attack("pipeline-missing-corpus", "14",
               ["pipeline", *PIPE[1:7], "--dapt.enabled", "true", "--corpus", "nope/corpus.txt", "--out", "p"],
               "one line naming the corpus before the probe runs", names=["nope/corpus.txt"],
               absent=["{work}/p/probe"]),
        Attack("fit-half-written-config", "14", ["fit", *CLS[:2], "--model.init_from", "half", *CLS[4:]],
               "one line naming config.json", names=["config.json"],
               setup=lambda w, v: None if (w / "half").exists() else fixtures.half_config(Path(v["bert"]), w / "half")),
        Attack("sweep-storage-at-password", "14",
               ["sweep", "--config", "{cfg_cls}", "--sweep", "{sweep_lr}", "--n_trials", "1", "--out", "sw",
                "--storage", "postgresql://bob:s3cr@tpw@localhost:5432/db", *CLS[2:]],
               "one line naming the storage URL's unencoded @; the password never printed", names=["@"],
               secrets=["s3cr", "tpw"]),
    ]  # fmt: skip


def _write_yaml(text: str):
    def setup(work: Path, values: dict) -> None:
        (work / "p.yaml").write_text(text)

    return setup


def items_1_3_8() -> list[Attack]:
    """A mean-pooling export in plain transformers, a short distillation, metrics.csv of a 3-step fit."""
    return [
        Attack("fit-3-steps-metrics-csv", "8", ["fit", *MLM], "rc 0; metrics.csv holds the steps", expect="ok",
               check=metrics_written("runs/tiny_debug/version_0")),
        Attack("fit-mean-pooling-3-steps", "1,8",
               ["fit", *CLS, "--model.pooling", "mean", "--trainer.max_steps", "3"],
               "rc 0; metrics.csv and hf/ export", expect="ok", check=_exported),
        Attack("plain-transformers-mean-export", "1",
               ["-c", PLAIN, f"{RUNS}/version_0/hf"], "both loads refused, naming trust_remote_code",
               expect="custom", check=_refused_naming_trust, python=True, phase=1, folder="fit-mean-pooling-3-steps"),
        Attack("trust-remote-code-mean-export", "1",
               ["-c", REMOTE, f"{RUNS}/version_0/hf"], "transformers' logits equal domainbert's", expect="custom",
               check=_same_logits, python=True, phase=1, folder="fit-mean-pooling-3-steps"),
        Attack("distill-max-steps-3", "3",
               ["fit", "--config", "{cfg_distill}", "--model.teacher", "{clsA}", "--data.train", "{big_train}",
                "--data.val", "{val}", "--data.test", "{test}", "--trainer.max_steps", "3",
                "--trainer.val_check_interval", "3", "--model.teacher_cache", "tcache"],
               "rc 0, fast; the teacher runs on the 3 steps' rows only", expect="custom", check=_cache_small),
    ]  # fmt: skip


def _no_empty_version(res: Result) -> tuple[bool, str]:
    runs = res.work / RUNS
    versions = sorted(p for p in runs.glob("version_*") if p.is_dir())
    empty = [p.name for p in versions if not any(p.iterdir())]
    return not empty, f"rc {res.rc}; {[p.name for p in versions]}" + (f"; EMPTY {empty}" if empty else "")


def _one_stop_line(trials: int):
    def check(res: Result) -> tuple[bool, str]:
        stops = res.out.count("`Trainer.fit` stopped")
        noise = [w for w in ("💡", "_pytree", "litlogger", "GPU available: False") if w in res.out]
        fine = res.rc == 0 and stops <= trials and not noise
        note = f"rc {res.rc}; 'Trainer.fit stopped' x{stops} for {trials} trials"
        return fine, note + (f"; noise {noise}" if noise else "")

    return check


def leftovers() -> list[Attack]:
    """``test`` leaves no empty ``version_N/``; a sweep prints each trial's stop once."""
    fit = ["fit", *CLS[:-2], "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2"]
    test = ["test", *CLS[:-2]]
    return [
        Attack("fit-one-epoch-for-test", "11", fit, "rc 0; a best checkpoint", expect="ok",
               check=metrics_written(f"{RUNS}/version_0")),
        Attack("test-ckpt-best", "11", [*test, "--ckpt_path", "best"], "rc 0; no empty version_N/",
               expect="custom", check=_no_empty_version, phase=1, folder="fit-one-epoch-for-test"),
        Attack("test-ckpt-bad-file", "11", [*test, "--ckpt_path", "junk.ckpt"], "one line; no empty version_N/",
               expect="custom", check=lambda r: _refused_no_version(r), phase=2, folder="fit-one-epoch-for-test",
               setup=lambda w, v: (w / "junk.ckpt").write_bytes(b"\x00not a checkpoint" * 64)),
        Attack("sweep-stop-line-once", "9",
               ["sweep", "--config", "{cfg_cls}", "--sweep", "{sweep_lr}", "--n_trials", "2", "--out", "sw",
                "--no_plots", *CLS[2:], "--trainer.max_steps", "3", "--trainer.val_check_interval", "3"],
               "rc 0; one stop line per trial, no library tips", expect="custom", check=_one_stop_line(2)),
    ]  # fmt: skip


def _refused_no_version(res: Result) -> tuple[bool, str]:
    ok, note = _no_empty_version(res)
    lines = res.error_lines()
    return ok and res.rc != 0 and len(lines) == 1, f"{(lines or ['no error line'])[0][:110]}; {note}"
