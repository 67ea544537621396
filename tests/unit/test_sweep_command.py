"""``domainbert sweep``'s command line, its spawned workers, and the package's one-way imports."""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

import pytest

import domainbert.sweep
from domainbert.sweep import command as sweep


def test_spawned_workers_get_the_storage_url_from_the_environment(tmp_path, monkeypatch):
    url = "postgresql://bob:s3cret@db.example/optuna"
    started = []

    class Popen:
        def __init__(self, cmd, env=None, **kw):
            started.append((cmd, env))

    monkeypatch.setattr(sweep.subprocess, "Popen", Popen)
    argv = ["--config", "f.yaml", "--storage", url, "--n_jobs", "3", "--sweep", "s.yaml", f"--storage={url}"]
    sweep.spawn(argv, 3, tmp_path, url)
    assert len(started) == 2
    for i, (cmd, env) in enumerate(started, 1):
        assert not any("s3cret" in a or a.startswith("--storage") for a in cmd), cmd
        assert cmd[-4:] == ["--n_jobs", "1", "--worker_index", str(i)] and "f.yaml" in cmd and "s.yaml" in cmd
        assert env[sweep.STORAGE_ENV] == url
    monkeypatch.setenv(sweep.STORAGE_ENV, url)  # what the worker reads
    assert sweep.build_parser().parse_args(["--config", "f", "--sweep", "s"]).storage == url


def test_flags_use_underscores_and_keep_the_hyphen_aliases():
    names = ["n_trials", "n_jobs", "study_name", "heartbeat_interval", "grace_period", "max_retry"]
    values = ["5", "2", "st", "7", "9", "3"]
    under = sweep.build_parser().parse_args(
        ["--config", "f", "--sweep", "s", "--no_plots", *(x for n, v in zip(names, values) for x in (f"--{n}", v))]
    )
    hyphen = sweep.build_parser().parse_args(
        ["--config", "f", "--sweep", "s", "--no-plots"]
        + [x for n, v in zip(names, values) for x in (f"--{n.replace('_', '-')}", v)]
    )
    assert vars(under) == vars(hyphen)
    assert (under.n_trials, under.n_jobs, under.study_name, under.max_retry, under.no_plots) == (5, 2, "st", 3, True)
    text = sweep.build_parser().format_help()
    assert "--n_trials" in text and "--n-trials" in text


def test_help_documents_every_option():
    parser = sweep.build_parser()
    text = " ".join(parser.format_help().split())
    for action in parser._actions:
        assert action.help and action.help != argparse.SUPPRESS, action.option_strings
        for flag in action.option_strings:
            assert flag in text
        assert " ".join(action.help.split()) in text


def _sweep_imports(path: Path) -> set[str]:
    """The modules of ``domainbert.sweep`` that ``path`` imports anywhere (in functions and type checks too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found.update(n.split(".")[2] for n in names if n.startswith("domainbert.sweep.") and n.count(".") == 2)
    return found


def test_the_sweep_package_imports_one_way():
    folder = Path(domainbert.sweep.__file__).parent
    graph = {p.stem: _sweep_imports(p) for p in folder.glob("*.py") if p.stem != "__init__"}
    graph = {m: deps & set(graph) for m, deps in graph.items()}
    assert not any("command" in deps for deps in graph.values())
    done: list[str] = []
    while len(done) < len(graph):  # a topological order exists only when there is no cycle
        ready = [m for m, deps in graph.items() if m not in done and deps <= set(done)]
        if not ready:
            pytest.fail(f"import cycle among {sorted(set(graph) - set(done))}: { {m: graph[m] for m in graph} }")
        done += ready
