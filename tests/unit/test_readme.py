"""The README's lists match the tree: commands, short names, shipped configs and the code layout."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from domainbert.cli import COMMANDS
from domainbert.data.registry import MODELS

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _section(title: str) -> str:
    """The README's text from the heading ``title`` to the next heading of the same level."""
    start = README.index(f"## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start : end if end != -1 else None]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_the_command_list_names_every_command(command):
    listed = re.search(r"`domainbert --help` lists every command \(([^)]*)\)", README)
    assert listed, "the README no longer says which commands `domainbert --help` lists"
    assert f"`{command}`" in listed.group(1), f"the README's command list leaves out {command}"


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_short_names_name_every_module(name):
    listed = re.search(r"`--model ([a-z|]+)`", README)
    assert listed, "the README no longer lists the modules' short names"
    assert name in listed.group(1).split("|"), f"the README's short names leave out {name}"


def test_the_config_layout_names_every_shipped_config():
    layout = _section("Config layout")
    shipped = sorted(p.relative_to(ROOT / "configs") for p in (ROOT / "configs").glob("*/*.yaml"))
    missing = [str(p) for p in shipped if p.name not in layout]
    assert not missing, f"the README's config layout leaves out {missing}"


def test_the_code_layout_names_only_files_that_exist_and_every_module():
    layout = _section("Code layout")
    package = ROOT / "domainbert"
    for line in layout.splitlines():
        m = re.match(r"  (\w+)/\s+(.*)", line)
        if not m or not (package / m.group(1)).is_dir():
            continue
        folder = package / m.group(1)
        modules = {p.stem for p in folder.glob("*.py") if not p.stem.startswith("__")}
        block = _block(layout, m.group(1))
        named = set(re.findall(r"\b([a-z_]+)\b", block))
        missing = sorted(modules - named)
        assert not missing, f"the README's code layout of {m.group(1)}/ leaves out {missing}"
    for name in re.findall(r"`?\b(\w+\.py)\b", layout):
        found = [p for top in ("domainbert", "tests", "examples") for p in (ROOT / top).rglob(name)]
        assert found, f"the README's code layout names {name}, which does not exist"


def _block(layout: str, folder: str) -> str:
    """The lines of ``layout`` that describe ``folder/`` (its line and the indented ones after it)."""
    lines = layout.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(rf"  {folder}/\s", line))
    out = [lines[start]]
    for line in lines[start + 1 :]:
        if re.match(r"  \S", line) or not line.strip() or line.startswith("```"):
            break
        out.append(line)
    return "\n".join(out)
