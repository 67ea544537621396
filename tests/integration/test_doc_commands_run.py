"""The getting-started page's fine-tuning commands run as written, on a tiny model: fit, test, then predict.

Each command is the page's own, run as a ``domainbert`` process in a folder that holds the page's data layout
(``data/train.csv``... with the page's columns, made from the fixture task) and nothing of the repository: the
config the page names comes with the package.
Substitutions, each appended so that the page's options stay as written: ``fit`` and ``test`` get
``--model.init_from <tiny model>`` (in place of all-MiniLM-L6-v2) and ``fit`` one epoch; ``predict`` runs exactly
as written, on the export the ``fit`` made. The unit test tests/unit/test_doc_commands.py parses every command.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import yaml

from tests.helpers.doc_commands import data_files, domainbert_commands, yaml_block

PAGE = "docs/getting-started.md"


def _run(args: list[str], cwd) -> subprocess.CompletedProcess:
    env = {**os.environ, "DOMAINBERT_LOG": "WARNING"}
    cmd = [sys.executable, "-m", "domainbert", *args]
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"domainbert {' '.join(args)}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return proc


def test_fit_test_and_predict_run_as_the_page_writes_them(tiny_bert, tmp_path):
    commands = {args[0]: args for args in domainbert_commands(PAGE) if args[0] in ("fit", "test", "predict")}
    assert set(commands) == {"fit", "test", "predict"}
    config = yaml.safe_load(yaml_block(PAGE, "my_domain.yaml"))  # the page's data layout and columns
    data_files(config, tmp_path, config["text_column"], config["label_column"])
    (tmp_path / "texts.txt").write_text("The tool draws images.\nThe client calls the remote api.\n")
    tiny = ["--model.init_from", str(tiny_bert)]

    _run([*commands["fit"], *tiny, "--trainer.max_epochs", "1"], tmp_path)
    export = tmp_path / "runs" / "finetune" / "version_0" / "hf"
    assert (export / "config.json").is_file()
    tested = _run([*commands["test"], *tiny], tmp_path)
    assert "test/f1_macro" in tested.stdout + tested.stderr
    _run(commands["predict"], tmp_path)
    written = sorted((tmp_path / "runs").rglob("predictions.jsonl"))
    assert written, "predict wrote no predictions.jsonl"
    rows = [json.loads(line) for line in written[-1].read_text().splitlines()]
    assert [r["text"] for r in rows] == ["The tool draws images.", "The client calls the remote api."]
    assert all(r["label"] in ("api", "graphics", "network") for r in rows)
