"""This replay's own attacks: what a careless or hostile user would obviously try on the same commands."""

from __future__ import annotations

import gzip
import io
import json
import os
import random
from pathlib import Path

from examples.redteam import fixtures
from examples.redteam.attacks_outputs import CLS, PIPE, PIPE_OUTPUTS
from examples.redteam.attacks_runs import RUNS, metrics_written
from examples.redteam.verdict import Attack, Result

#: ``fit`` with the shared data but the training file replaced by ``--data.train``
FIT = ["fit", *CLS[:4], *CLS[6:]]


def _write(rel: str, data: str | bytes):
    def setup(work: Path, values: dict) -> None:
        path = work / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))

    return setup


def _rows(n: int = 12, labels: str = "abc") -> list[dict]:
    return [{"text": f"text number {i} about sockets", "label": labels[i % len(labels)]} for i in range(n)]


def _bom_csv(work: Path, values: dict) -> None:
    lines = Path(values["train"]).read_text().splitlines()
    body = "".join(f'"{json.loads(x)["text"]}",{json.loads(x)["label"]}\n' for x in lines)
    (work / "bom.csv").write_bytes(b"\xef\xbb\xbf" + f"text,label\n{body}".encode())


def _bad_line(work: Path, values: dict) -> None:
    rows = [json.dumps(r) for r in _rows()]
    rows[2] = '{"text": "broken row", "label": '
    (work / "bad.jsonl").write_text("\n".join(rows) + "\n")


def _loop(work: Path, values: dict) -> None:
    link = work / "loop.jsonl"
    if not link.is_symlink():
        os.symlink(link, link)


def _unicode(work: Path, values: dict) -> None:
    folder = work / "données é 日本"
    folder.mkdir(exist_ok=True)
    (folder / "train ü.jsonl").write_bytes(Path(values["train"]).read_bytes())


def _predictions(expected_rows: int):
    """A check: one ``predictions.jsonl`` under the runs, one row per non-empty input line, labels known."""

    def check(res: Result) -> tuple[bool, str]:
        found = sorted(res.work.rglob("predictions.jsonl"))
        if not found:
            return False, "rc 0 but no predictions.jsonl"
        rows = [json.loads(line) for line in found[-1].read_text().splitlines()]
        labels = {r.get("label") for r in rows}
        fine = len(rows) == expected_rows and labels <= set(fixtures.LABELS)
        return fine, f"{len(rows)} predictions for {expected_rows} lines; labels {sorted(map(str, labels))}"

    return check


def _cut(name: str):
    """A setup: ``name`` (``.jsonl.gz``, ``.csv.gz`` or ``.parquet``) of labelled rows, cut off half-way."""

    def setup(work: Path, values: dict) -> None:
        rows = fixtures.labelled_rows()
        if name.endswith(".parquet"):
            import pyarrow as pa
            import pyarrow.parquet as pq

            buf = io.BytesIO()
            pq.write_table(pa.Table.from_pylist(rows), buf)
            data = buf.getvalue()
        elif ".csv" in name:
            data = gzip.compress(("text,label\n" + "".join(f'"{r["text"]}",{r["label"]}\n' for r in rows)).encode())
        else:
            data = gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode())
        fixtures.cut(work / name, data)

    return setup


#: 30 corpus lines: with 3 held out and one document an example, 4 batches of 8, fewer than val_check_interval 10
SHORT_CORPUS = "".join(f"document {i} about sockets and packages\n" for i in range(30))


def data_files() -> list[Attack]:
    """Hostile data files: empty, wrong columns, unseen labels, a BOM, a broken line, a folder, a loop, unicode."""
    return [
        Attack("train-empty-file", "new", [*FIT, "--data.train", "empty.jsonl"], "one line naming the file",
               names=["empty.jsonl"], setup=_write("empty.jsonl", "")),
        Attack("train-dev-null", "new", [*FIT, "--data.train", "/dev/null"], "one line naming /dev/null",
               names=["/dev/null"]),
        Attack("train-wrong-columns", "new", [*FIT, "--data.train", "x.csv"], "one line: no column 'label'",
               names=["x.csv", "label"], setup=_write("x.csv", "body,category\na b,x\nc d,y\n")),
        Attack("val-label-unseen", "new", [*FIT, "--data.train", "{train}", "--data.val", "v.jsonl"],
               "one line naming the row and label", names=["v.jsonl", "firmware"],
               setup=_write("v.jsonl", json.dumps({"text": "flash the chip", "label": "firmware"}) + "\n")),
        Attack("train-csv-with-bom", "new", [*FIT, "--data.train", "bom.csv"], "rc 0: the BOM is not part of 'text'",
               expect="ok", setup=_bom_csv),
        Attack("train-jsonl-broken-line", "new", [*FIT, "--data.train", "bad.jsonl"], "one line naming line 3",
               names=["bad.jsonl", "line 3"], setup=_bad_line),
        Attack("train-random-bytes", "new", [*FIT, "--data.train", "junk.jsonl"], "one line naming the file",
               names=["junk.jsonl"], setup=_write("junk.jsonl", random.Random(0).randbytes(3000))),
        Attack("train-one-class", "new", [*FIT, "--data.train", "one.jsonl"], "one line: a single class",
               names=["one.jsonl"], setup=_write("one.jsonl", "".join(json.dumps(r) + "\n" for r in _rows(8, "a")))),
        Attack("train-empty-folder", "new", [*FIT, "--data.train", "emptydir"], "one line naming the folder",
               names=["emptydir"], setup=lambda w, v: (w / "emptydir").mkdir(exist_ok=True)),
        Attack("train-symlink-loop", "new", [*FIT, "--data.train", "loop.jsonl"], "one line naming the file",
               names=["loop.jsonl"], setup=_loop),
        Attack("unicode-paths", "new",
               [*FIT, "--data.train", "données é 日本/train ü.jsonl", "--trainer.default_root_dir", "runs ü 日本"],
               "rc 0", expect="ok", setup=_unicode),
        Attack("train-truncated-jsonl-gz", "new", [*FIT, "--data.train", "t.jsonl.gz"],
               "one line: truncated, naming the file", names=["t.jsonl.gz", "truncated"], setup=_cut("t.jsonl.gz")),
        Attack("train-truncated-csv-gz", "new", [*FIT, "--data.train", "t.csv.gz"],
               "one line: truncated, naming the file", names=["t.csv.gz", "truncated"], setup=_cut("t.csv.gz")),
        Attack("train-cut-parquet", "new", [*FIT, "--data.train", "t.parquet"],
               "one line: truncated, naming the file", names=["t.parquet", "truncated"], setup=_cut("t.parquet")),
        Attack("fit-corpus-shorter-than-val-check", "new",
               ["fit", "--config", "{cfg_mlm}", "--model.init_from", "{bert}", "--data.train", "short.txt",
                "--data.packing", "false"],
               "one line: what to change", names=["val_check_interval", "4 or less", "check_val_every_n_epoch"],
               setup=_write("short.txt", SHORT_CORPUS)),
        Attack("predict-empty-txt", "new",
               ["predict", "--model", "classification", "--model.init_from", "{clsA}", "--data", "classification",
                "--data.predict", "empty.txt"], "one line naming empty.txt", names=["empty.txt"],
               setup=_write("empty.txt", "\n\n")),
        Attack("predict-raw-txt-from-export", "new",
               ["predict", "--model", "classification", "--model.init_from", "{clsA}", "--data", "classification",
                "--data.predict", "t.txt"], "rc 0; one prediction per non-empty line", expect="ok",
               setup=_write("t.txt", "graphical images here\n\nsecure sockets\nparse the api\n"),
               check=_predictions(3)),
    ]  # fmt: skip


def options() -> list[Attack]:
    """Hostile options and configs."""
    return [
        Attack("config-missing", "new", ["fit", "--config", "nope.yaml"], "one line naming nope.yaml",
               names=["nope.yaml"]),
        Attack("config-yaml-syntax", "new", ["fit", "--config", "b.yaml"], "one line naming the file and line",
               names=["b.yaml", "line"], setup=_write("b.yaml", "trainer:\n  max_steps: 3\n  callbacks: [a, b\n")),
        Attack("ckpt-best-without-run", "new", ["test", *CLS, "--ckpt_path", "best"], "one line naming the folder",
               names=["best", "runs/tiny_classification"]),
        Attack("ckpt-a-folder", "new", ["test", *CLS, "--ckpt_path", "{work}"], "one line: is a folder",
               names=["is a folder"]),
        Attack("max-length-huge", "new", [*FIT, "--data.train", "{train}", "--data.max_length", "100000"],
               "one line, or rc 0 with max_length capped", expect="any", names=["max_length"]),
        Attack("batch-size-negative", "new", [*FIT, "--data.train", "{train}", "--data.batch_size", "-3"],
               "one line naming batch_size", names=["batch_size"]),
        Attack("max-steps-negative", "new", [*FIT, "--data.train", "{train}", "--trainer.max_steps", "-5"],
               "one line naming max_steps", names=["max_steps"]),
        Attack("max-steps-1e99", "new", [*FIT, "--data.train", "{train}", "--trainer.max_steps", "1e99"],
               "one line naming max_steps", names=["max_steps"]),
        Attack("learning-rate-abc", "new", [*FIT, "--data.train", "{train}", "--model.learning_rate", "abc"],
               "one line naming learning_rate", names=["learning_rate"]),
        Attack("init-from-a-file", "new", [*FIT[:3], "--model.init_from", "{bert}/config.json", *FIT[5:],
                                            "--data.train", "{train}"],
               "one line naming the path", names=["config.json"]),
        Attack("run-name-escape", "new", [*FIT, "--data.train", "{train}", "--run_name", "../../x"],
               "one line naming run_name", names=["run_name"], absent=["{work}/../../x"]),
        Attack("root-dir-is-a-file", "new",
               [*FIT, "--data.train", "{train}", "--trainer.default_root_dir", "notes.txt"],
               "one line; notes.txt untouched", names=["notes.txt"], setup=_write("notes.txt", "keep\n"),
               protect=["{work}/notes.txt"]),
        Attack("unknown-command", "new", ["fitt", "--config", "{cfg_cls}"], "one line naming the command",
               names=["fitt"]),
        Attack("lora-bias-sideways", "new", [*FIT, "--data.train", "{train}", "--model.lora", "{{bias: sideways}}"],
               "one line naming lora bias and its choices", names=["bias", "sideways", "lora_only"]),
        *(Attack(f"pipeline-watch-{key.replace('_', '-')}-{name}", "new", [*PIPE, f"--dapt.watch.{key}", value,
                 "--out", "p"], f"one line naming dapt.watch.{key}", names=[f"dapt.watch.{key}"],
                 absent=[f"{{work}}/p/{p}" for p in PIPE_OUTPUTS])
          for key, value, name in (("every_n_steps", "0", "0"), ("every_n_steps", "-3", "negative"),
                                   ("patience", "0", "0"), ("margin", ".nan", "nan"))),
        Attack("fit-logger-csv-short-name", "new", [*FIT, "--data.train", "{train}", "--trainer.logger", "CSVLogger"],
               "rc 0: save_dir the run's root, metrics.csv in the run folder", expect="ok",
               check=metrics_written(f"{RUNS}/version_0")),
        Attack("fit-logger-tensorboard-missing", "new",
               [*FIT, "--data.train", "{train}", "--trainer.logger", "TensorBoardLogger"],
               "one line: pip install tensorboard (rc 0 where it is installed)", expect="any",
               names=["pip install tensorboard"], check=metrics_written(f"{RUNS}/version_0")),
    ]  # fmt: skip


def tools() -> list[Attack]:
    """Hostile arguments to the tools."""
    return [
        Attack("soup-mixed-labels", "new", ["soup", "--models", '["{clsA}", "other"]', "--out", "s"],
               "one line: the label sets differ", names=["label"], setup=_other_labels),
        Attack("soup-one-model", "new", ["soup", "--models", '["{clsA}"]', "--out", "s"],
               "one line: at least two models", names=["two"]),
        Attack("pseudolabel-ratio-negative", "new",
               ["pseudolabel", "--model", "{clsA}", "--corpus", "{corpus}", "--task", "{train}", "--out", "o",
                "--ratio", "-1"], "one line naming ratio", names=["ratio"]),
        Attack("select-k-zero", "new",
               ["select", "--model", "{bert}", "--corpus", "{corpus}", "--task", "{train}", "--out", "o", "--k", "0"],
               "one line naming k", names=["k"]),
        Attack("probe-one-class", "new", ["probe", "--model", "{bert}", "--train", "one.jsonl", "--out", "o"],
               "one line: a single class", names=["one.jsonl"],
               setup=_write("one.jsonl", "".join(json.dumps(r) + "\n" for r in _rows(8, "a")))),
        Attack("export-missing-model", "new", ["export", "--model", "nowhere", "--out", "d"],
               "one line naming the folder", names=["nowhere"]),
        Attack("sweep-zero-trials", "new",
               ["sweep", "--config", "{cfg_cls}", "--sweep", "{sweep_lr}", "--n_trials", "0", "--out", "sw"],
               "one line naming n_trials", names=["n_trials"]),
        Attack("sweep-missing-data", "new",
               ["sweep", "--config", "{cfg_cls}", "--sweep", "{sweep_lr}", "--n_trials", "2", "--out", "sw",
                "--model.init_from", "{bert}"], "one line naming the missing file, before any trial",
               names=["tests/fixtures/cls_train.jsonl"]),
        Attack("pipeline-unknown-key", "new", [*PIPE, "--finetune.epochs", "3", "--out", "p"],
               "one line naming the key", names=["finetune.epochs"]),
    ]  # fmt: skip


def _other_labels(work: Path, values: dict) -> None:
    if not (work / "other").exists():
        fixtures._tiny_builders().tiny_classifier(Path(values["bert"]), work / "other", 2, ["x", "y"])


#: a distribution whose datamodule exits at import, another under a built-in short name, a strategy named like an
#: option of the pipeline's parser
PLUGINS = (
    "[domainbert.datamodules]\nevil = evil_exits:DataModule\nclassification = evil_taken:DataModule\n\n"
    "[domainbert.strategies]\nprint_config = evil_strategy:Printer\n"
)
EVIL_STRATEGY = """
from dataclasses import dataclass
from domainbert.pipeline.strategies.base import Strategy

@dataclass
class Spec:
    enabled: bool = False

class Printer(Strategy, name="print_config", settings=Spec):
    \"\"\"Named like an option of the pipeline's parser.\"\"\"
"""


def _plugins(work: Path, values: dict) -> None:
    taken = "import pathlib\npathlib.Path(__file__).with_name('imported').touch()\nDataModule = object\n"
    fixtures.plugin(work / "site", PLUGINS, evil_exits="import sys\nsys.exit(3)\n", evil_taken=taken,
                    evil_strategy=EVIL_STRATEGY)  # fmt: skip


def _warned(*needles: str, check=None):
    """A check: rc 0, every needle in the output (the plugins' warnings), and ``check`` when given."""

    def judge(res: Result) -> tuple[bool, str]:
        missing = [n for n in needles if n not in res.out]
        if res.rc != 0 or missing:
            return False, f"rc {res.rc}" + (f"; does not say {missing[0]!r}" if missing else "")
        return check(res) if check else (True, f"rc 0; warned: {', '.join(needles)}")

    return judge


def plugins() -> list[Attack]:
    """Plugins that exit at import, take a built-in short name, or are named like a pipeline option."""
    exits = "'evil' (evilplug: evil_exits:DataModule) failed to import and is skipped: SystemExit: 3"
    taken = "'classification' (evilplug: evil_taken:DataModule; kept: domainbert: "
    return [
        Attack("plugin-exits-datamodules", "new", ["datamodules"], "rc 0; the listing, one warning per plugin",
               expect="custom", check=_warned(exits, taken, "classification  domainbert.data.classification."),
               setup=_plugins, path=["{work}/site"], absent=["{work}/site/imported"]),
        Attack("plugin-exits-fit", "new", [*FIT, "--data.train", "{train}"], "rc 0; the broken plugin named",
               expect="custom", check=_warned(exits, taken, check=metrics_written(f"{RUNS}/version_0")),
               setup=_plugins, path=["{work}/site"], absent=["{work}/site/imported"]),
        Attack("plugin-strategy-print-config", "new", ["pipeline", "--help"], "rc 0; the plugin named, skipped",
               expect="custom", check=_warned("'print_config' (evilplug: evil_strategy:Printer; reserved: a pipeline",
                                              "usage: domainbert pipeline"),
               setup=_plugins, path=["{work}/site"]),
    ]  # fmt: skip
