"""The shell commands the README and the getting-started page show, read from their fenced ``bash`` blocks."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: the pages whose commands must run as written
PAGES = ("README.md", "docs/getting-started.md")


def bash_commands(page: str) -> list[str]:
    """Every command of ``page``'s ```bash blocks: continuation lines joined, comments dropped."""
    text = (ROOT / page).read_text(encoding="utf-8")
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words:
                commands.append(shlex.join(words))
    return commands


def domainbert_commands(page: str) -> list[list[str]]:
    """The ``domainbert ...`` commands of ``page``, each as its arguments after ``domainbert``."""
    return [shlex.split(c)[1:] for c in bash_commands(page) if c.startswith("domainbert ")]


def yaml_block(page: str, name: str) -> str:
    """The ```yaml block of ``page`` whose first line is the comment ``# <name>`` (optionally followed by more)."""
    text = (ROOT / page).read_text(encoding="utf-8")
    for block in re.findall(r"```yaml\n(.*?)```", text, re.S):
        if re.match(rf"# {re.escape(name)}\b", block):
            return block
    raise AssertionError(f"{page} has no yaml block for {name}")


def data_files(config: dict, out: Path, text_column: str, label_column: str) -> None:
    """Write small files at every data path a pipeline config names, with its columns (from the fixture task)."""
    import csv
    import gzip
    import json

    rows = [json.loads(line) for line in (ROOT / "tests/fixtures/cls_train.jsonl").read_text().splitlines()]
    for key in ("task_train", "task_val", "task_test"):
        path = out / config[key]
        path.parent.mkdir(parents=True, exist_ok=True)
        table = [{text_column: r["text"], label_column: r["label"]} for r in rows]
        if path.suffix == ".csv":
            with open(path, "w", newline="", encoding="utf-8") as f:
                writer = csv.DictWriter(f, fieldnames=[text_column, label_column])
                writer.writeheader()
                writer.writerows(table)
        else:
            path.write_text("".join(json.dumps(r) + "\n" for r in table), encoding="utf-8")
    corpus = out / config["corpus"]
    corpus.parent.mkdir(parents=True, exist_ok=True)
    lines = (ROOT / "tests/fixtures/corpus.txt").read_text(encoding="utf-8")
    if corpus.suffix == ".gz":
        corpus.write_bytes(gzip.compress(lines.encode("utf-8")))
    else:
        corpus.write_text(lines, encoding="utf-8")
