"""The ``domainbert`` commands of the README and the getting-started page, checked without training.

How each is checked (the training ones also run for real, on a tiny model, in
tests/integration/test_doc_commands_run.py):

- ``make demo`` / ``make test``: not ``domainbert`` commands; they are what ``.ci/run`` and the demo run.
- ``domainbert pipeline --config <file>``: the page's YAML block for that file is written into an empty folder,
  with small data files at every path it names (the fixture task, in its columns); the command line is parsed by
  the pipeline's own parser and goes through every check the pipeline makes before its first stage (paths,
  columns, configs, the strategies' needs). No stage runs.
- ``domainbert fit|validate|test|predict ...``: run in this process as written, with ``--print_config`` added,
  from an empty folder (a user's own project, not the clone: a config the command names must come with the
  package): every option must exist and parse (an unknown or misspelt one is an error).
"""

from __future__ import annotations

import io
import shlex
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import yaml

from tests.helpers.doc_commands import PAGES, bash_commands, data_files, domainbert_commands, yaml_block

LIGHTNING = {"fit", "validate", "test", "predict"}
CASES = [(page, args) for page in PAGES for args in domainbert_commands(page)]


def test_the_pages_show_the_two_commands_first_and_every_command_is_checked():
    for page in PAGES:
        commands = bash_commands(page)
        assert commands[:2] == ["make demo", "make test"], page
        for command in commands[2:]:
            words = shlex.split(command)
            assert words[0] == "domainbert", f"{page}: {command!r} is not checked by this test"
            assert words[1] in LIGHTNING | {"pipeline"}, f"{page}: no check for `domainbert {words[1]}`"


@pytest.mark.parametrize(("page", "args"), CASES, ids=[f"{p}:{' '.join(a)[:60]}" for p, a in CASES])
def test_a_documented_command_parses(page, args, tmp_path, monkeypatch):
    if args[0] == "pipeline":
        _check_pipeline(page, args, tmp_path, monkeypatch)
    else:
        _print_config(args, tmp_path, monkeypatch)


def _print_config(args: list[str], folder: Path, monkeypatch) -> None:
    from domainbert.cli import main

    monkeypatch.chdir(folder)  # the user's own folder: no configs/ of the clone
    out = io.StringIO()
    with redirect_stdout(out), pytest.raises(SystemExit) as stop:
        main([*args, "--print_config"])
    assert stop.value.code in (0, None), out.getvalue()[-2000:]
    config = yaml.safe_load(out.getvalue())
    pairs = dict(zip(args[1::2], args[2::2])) if args[1:2] == ["--config"] else {}
    config_file = config.get("config") or []
    assert all(Path(str(c)).is_absolute() or (folder / str(c)).is_file() for c in config_file), config_file
    for option in ("--data.text_column", "--data.label_column"):
        if option in pairs:  # the override reached the datamodule
            assert config["data"]["init_args"][option.split(".")[-1]] == pairs[option]


def _check_pipeline(page: str, args: list[str], tmp_path: Path, monkeypatch) -> None:
    from domainbert.pipeline.command import _plan, build_parser, check
    from domainbert.pipeline.specs import TaskFiles

    name = args[args.index("--config") + 1]
    text = yaml_block(page, name)
    config = yaml.safe_load(text)
    monkeypatch.chdir(tmp_path)
    (tmp_path / name).write_text(text, encoding="utf-8")
    data_files(config, tmp_path, config.get("text_column", "text"), config.get("label_column", "label"))
    parser = build_parser(args[1:])
    kwargs = parser.instantiate_classes(parser.parse_args(args[1:])).as_dict()
    kwargs.pop("config", None)
    task = TaskFiles(
        kwargs.pop("task_train"),
        kwargs.pop("task_val"),
        kwargs.pop("task_test"),
        kwargs.pop("text_column"),
        kwargs.pop("text_pair_column"),
        kwargs.pop("label_column"),
    )
    inputs = {k: kwargs.pop(k) for k in ("base_model", "corpus", "corpus_text_column", "seeds", "metric")}
    for key in ("out", "isolate", "probe", "export", "deploy"):
        kwargs.pop(key)
    distill, finetune = kwargs.pop("distill"), kwargs.pop("finetune")
    check(_plan(inputs, task, finetune, kwargs), distill)
