"""The documentation matches the tree: its lists, its links, its figures' provenance, and no development diary.

The pages themselves are built by ``mkdocs build --strict`` (``make docs``, and ``.ci/run``); these checks need no
build and no network.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from domainbert.cli.short_names import MODELS

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = (ROOT / "README.md").read_text(encoding="utf-8")
LAYOUT = (DOCS / "reference" / "layout.md").read_text(encoding="utf-8")
#: where the tree may point into the docs, and what it must not mention
TREE = ["domainbert", "configs", "tests", "examples", "docs"]
TOP_FILES = ["README.md", "Makefile", "pyproject.toml", "mkdocs.yml", ".ci/run", ".gitignore"]
TEXT = {".py", ".md", ".yaml", ".yml", ".toml", ".txt", ".sh", ".cfg", ""}
#: a development diary's words followed by a number (spelt apart so that this file does not match itself)
DIARY = re.compile(r"\b(" + "sess" + "ion|iss" + "ue)s? [0-9]+", re.IGNORECASE)
OLD_FIGURES = "FIGURES" + ".md"


def _section(text: str, title: str) -> str:
    """The text from the heading ``## title`` to the next heading of the same level."""
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def _tree_files() -> list[Path]:
    """The project's text files (sources, configs, tests, examples, docs and the top-level files)."""
    skip = {".venv", "__pycache__", "site", ".git", "runs"}
    files = [ROOT / name for name in TOP_FILES if (ROOT / name).is_file()]
    for top in TREE:
        for path in (ROOT / top).rglob("*"):
            if path.is_file() and path.suffix in TEXT and not skip & set(path.relative_to(ROOT).parts):
                files.append(path)
    return files


def test_the_readme_is_short_and_starts_with_the_two_commands():
    lines = README.splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines; the details belong in docs/"
    first_block = re.search(r"```bash\n(.*?)```", README, re.S).group(1)
    assert [line.split()[:2] for line in first_block.splitlines()] == [["make", "demo"], ["make", "test"]]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_short_names_name_every_module(name):
    listed = re.search(r"`--model ([a-z|]+)`", (DOCS / "reference" / "cli.md").read_text(encoding="utf-8"))
    assert listed, "docs/reference/cli.md no longer lists the modules' short names"
    assert name in listed.group(1).split("|"), f"the short names leave out {name}"


def test_the_config_layout_names_every_shipped_config():
    layout = _section(LAYOUT, "Config layout")
    shipped = sorted(p.relative_to(ROOT / "configs") for p in (ROOT / "configs").glob("*/*.yaml"))
    missing = [str(p) for p in shipped if p.name not in layout]
    assert not missing, f"the config layout (docs/reference/layout.md) leaves out {missing}"


def test_the_code_layout_names_only_files_that_exist_and_every_module():
    layout = _section(LAYOUT, "Code layout")
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
        assert not missing, f"the code layout of {m.group(1)}/ leaves out {missing}"
    for name in re.findall(r"`?\b(\w+\.py)\b", layout):
        found = [p for top in ("domainbert", "tests", "examples") for p in (ROOT / top).rglob(name)]
        assert found, f"the code layout names {name}, which does not exist"


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


def test_the_api_reference_has_a_page_for_every_module():
    pages = "\n".join(p.read_text(encoding="utf-8") for p in (DOCS / "reference" / "api").glob("*.md"))
    documented = set(re.findall(r"^::: (domainbert[\w.]*)$", pages, re.M))
    for path in (ROOT / "domainbert").rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__main__" or len(parts) < 3:  # the top-level modules are re-exports and the CLI
            continue
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        assert name in documented, f"{name} has no ::: entry under docs/reference/api/"


def _nav_pages(nav) -> list[str]:
    out = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        out += _nav_pages(value) if isinstance(value, list) else [value]
    return out


def test_every_page_is_in_the_navigation_and_every_navigation_entry_exists():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    nav = _nav_pages(config["nav"])
    assert len(nav) == len(set(nav))
    missing = [page for page in nav if not (DOCS / page).is_file()]
    assert not missing, f"mkdocs.yml names pages that do not exist: {missing}"
    pages = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    assert not [p for p in pages if p not in nav], "every page of docs/ is reached from the navigation"


def test_the_readme_links_resolve():
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README):
        if not target.startswith("http"):
            assert (ROOT / target).exists(), f"README.md links to {target}, which does not exist"


def test_references_from_the_tree_into_the_docs_resolve():
    for path in _tree_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        for target in re.findall(r"(?<![\w/.-])(docs/[\w/.-]+\.md)\b", text):
            assert (ROOT / target).is_file(), f"{path.relative_to(ROOT)} points to {target}, which does not exist"


def test_no_development_diary_outside_the_changelog():
    found = []
    for path in _tree_files():
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if DIARY.search(line) or OLD_FIGURES in line:
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert not found, "what changed and when goes into CHANGELOG.md:\n" + "\n".join(found)


@pytest.mark.parametrize("page", sorted(p.name for p in (DOCS / "benchmarks").glob("*.md") if p.name != "index.md"))
def test_every_benchmark_page_dates_its_figures_and_names_their_commits(page):
    text = (DOCS / "benchmarks" / page).read_text(encoding="utf-8")
    assert re.search(r"\b20\d\d-\d\d-\d\d\b", text), f"{page}: no measurement date"
    assert re.search(r"`[0-9a-f]{7}`", text), f"{page}: no commit"
    assert re.search(r"avx2|AVX2|AVX512-BF16|AMX", text), f"{page}: no CPU"
    assert re.search(r"python examples/|domainbert |bash \.ci/run", text), f"{page}: no command"


def test_the_version_follows_the_changelog():
    from packaging.version import Version

    import domainbert

    version = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(encoding="utf-8"), re.M).group(1)
    assert domainbert.__version__ == version
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    releases = re.findall(r"^## \[([^\]]+)\]", changelog, re.M)
    assert releases[0] == "Unreleased" and ".dev" in version, "an Unreleased section goes with a .dev version"
    assert Version(version) > Version(releases[1]), f"{version} must come after the last release, {releases[1]}"
