"""MkDocs hook: the command-line reference page, generated from the parsers at build time.

``docs/reference/cli.md`` holds the marker ``<!-- cli-reference -->``; this hook replaces it with ``domainbert
--help`` and, for every command of :data:`domainbert.cli.COMMANDS`, the output of ``domainbert <command> --help``
(run as a subprocess of the same interpreter), so the page never disagrees with the parsers. Each text is
formatted :data:`WIDTH` columns wide, the width of the page's content column, and a line still wider (a table row
of ``domainbert --help``, a long option name) is wrapped under its description, so no help text is cut.

It also drops the Sphinx roles the docstrings use (``:class:`x``` becomes ``x`` in code), and the reST ``::``
that ends a docstring paragraph before a literal block, which mkdocstrings would otherwise print as they are in
the API reference.
"""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor

MARKER = "<!-- cli-reference -->"
PAGE = "reference/cli.md"
#: commands with subcommands of their own: each gets its own ``--help`` block
SUBCOMMANDS = {"vocab": ("extend", "train")}

#: the columns of a help text on the page: what the content column shows of a code block without scrolling
WIDTH = 80
#: ``domainbert <argv> --help`` at :data:`WIDTH` columns: the kept ``--help`` texts of the LightningCLI commands are
#: built at their own width (``domainbert.cli.help_cache.WIDTH``), so this one keeps its own, in a folder of its own
RUN = "import sys; from domainbert.cli import help_cache, main; help_cache.WIDTH = int(sys.argv[1]); main(sys.argv[2:])"

#: the LightningCLI commands' texts at :data:`WIDTH` columns, built in one process (one Lightning import for all)
WARM = "import sys; from domainbert.cli import help_cache; help_cache.WIDTH = int(sys.argv[1]); help_cache.warm()"

_texts: dict[tuple[str, ...], str] = {}


def _env() -> dict[str, str]:
    from domainbert.core.files import cache_root

    env = {**os.environ, "COLUMNS": str(WIDTH), "DOMAINBERT_LOG": "ERROR"}
    env["DOMAINBERT_CACHE"] = str(cache_root() / f"docs-{WIDTH}")
    return env


def _warm() -> None:
    """Keep the LightningCLI commands' texts first, so that each ``--help`` below serves its own at once."""
    proc = subprocess.run([sys.executable, "-c", WARM, str(WIDTH)], capture_output=True, text=True, env=_env())
    if proc.returncode != 0:
        raise RuntimeError(f"cli_reference: building the --help texts failed:\n{proc.stderr[-2000:]}")


def _help(argv: tuple[str, ...]) -> str:
    """The text ``domainbert <argv> --help`` prints (stdout), :data:`WIDTH` wide, or a build error naming it."""
    if argv not in _texts:
        env = _env()
        cmd = [sys.executable, "-c", RUN, str(WIDTH), *argv, "--help"]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
        if proc.returncode != 0 or not proc.stdout.strip():
            raise RuntimeError(f"cli_reference: `domainbert {' '.join(argv)} --help` failed:\n{proc.stderr[-2000:]}")
        _texts[argv] = fit_to_width(proc.stdout.rstrip(), WIDTH)
    return _texts[argv]


#: where a help line's description starts: after a name and a gap of two spaces or more
_COLUMN = re.compile(r"^(\s*\S(?:\S| (?! ))*\s{2,})\S")


def fit_to_width(text: str, width: int = WIDTH) -> str:
    """``text`` with every line wider than ``width`` wrapped, its continuation under the line's description.

    A line such as ``  fit   train: continued pretraining...`` continues under ``train:``; a paragraph of prose
    (lines of one indent, wrapped wider than ``width``) is wrapped again as a whole; any other line continues two
    spaces deeper than it starts. Words are never broken, so a single word wider than ``width`` stays whole.
    """
    lines = []
    for line, indent in _paragraphs(text.splitlines(), width):
        if len(line) <= width:
            lines.append(line)
            continue
        column = _COLUMN.match(line)
        if column and len(column.group(1)) <= width // 2:
            indent = len(column.group(1))
        lines += textwrap.wrap(
            line, width, subsequent_indent=" " * indent, break_long_words=False, break_on_hyphens=False
        )
    return "\n".join(lines)


def _paragraphs(lines: list[str], width: int) -> list[tuple[str, int]]:
    """``lines``, each with the indent its continuation takes; a too-wide paragraph of prose joined into one line.

    Prose: lines of the same indent, none an option (``-``), a usage line or a row with a description column. A
    joined paragraph continues at its own indent, any other line two spaces deeper.
    """
    out: list[tuple[str, int]] = []
    for line in lines:
        previous = out[-1][0] if out else ""
        if _prose(line) and _prose(previous) and _indent(previous) == _indent(line):
            if max(len(previous), len(line)) > width:
                out[-1] = (f"{previous} {line.strip()}", _indent(line))
                continue
        out.append((line, _indent(line) + 2))
    return out


def _prose(line: str) -> bool:
    """Whether ``line`` is a line of a paragraph (not blank, not an option, a usage line or a table row)."""
    words = line.lstrip()
    return bool(words) and not words.startswith(("-", "[", "usage:")) and not _COLUMN.match(line)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _block(argv: tuple[str, ...]) -> str:
    return f"```text\n$ {' '.join(['domainbert', *argv, '--help'])}\n{_help(argv)}\n```\n"


def reference() -> str:
    """The generated Markdown: ``domainbert --help``, then one section per command in the help's order."""
    from domainbert.cli import COMMANDS

    wanted = [()] + [(name,) for name in COMMANDS]
    wanted += [(name, sub) for name, subs in SUBCOMMANDS.items() for sub in subs]
    _warm()
    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(_help, wanted))
    parts = ["## domainbert\n", _block(())]
    for name, command in COMMANDS.items():
        parts += [f"## {name}\n", f"{html.escape(command.help)}\n", _block((name,))]
        for sub in SUBCOMMANDS.get(name, ()):
            parts += [f"### {name} {sub}\n", _block((name, sub))]
    return "\n".join(parts)


def on_page_markdown(markdown: str, page, config, files) -> str:
    """Replace the marker on the CLI page with the generated reference."""
    if page.file.src_uri != PAGE or MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, reference())


#: a Sphinx role before an inline code span, as the rendered HTML has it (``:meth:<code>~a.b</code>``)
ROLE = re.compile(r":(?:mod|func|class|meth|attr|data|exc|obj|const):(<code>)~?")


#: a paragraph that ends in reST's ``::`` (a literal block follows): ``text::`` reads ``text:``, a lone ``::`` goes
LITERAL = re.compile(r"(\s*)::</p>")


def on_page_content(html: str, page, config, files) -> str:
    """Drop the Sphinx roles and the reST ``::`` markers of the docstrings rendered on the API pages."""
    html = ROLE.sub(r"\1", html).replace("<p>::</p>", "")
    return LITERAL.sub(lambda m: "</p>" if m.group(1) else ":</p>", html)
