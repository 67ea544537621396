"""MkDocs hook: the command-line reference page, generated from the parsers at build time.

``docs/reference/cli.md`` holds the marker ``<!-- cli-reference -->``; this hook replaces it with ``domainbert
--help`` and, for every command of :data:`domainbert.cli.COMMANDS`, the output of ``domainbert <command> --help``
(run as a subprocess of the same interpreter, 100 columns wide), so the page never disagrees with the parsers.

It also drops the Sphinx roles the docstrings use (``:class:`x``` becomes ``x`` in code), which mkdocstrings would
otherwise print as they are in the API reference.
"""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

MARKER = "<!-- cli-reference -->"
PAGE = "reference/cli.md"
#: commands with subcommands of their own: each gets its own ``--help`` block
SUBCOMMANDS = {"vocab": ("extend", "train")}

_texts: dict[tuple[str, ...], str] = {}


def _help(argv: tuple[str, ...]) -> str:
    """The text ``domainbert <argv> --help`` prints (stdout), or a build error naming the command."""
    if argv not in _texts:
        env = {**os.environ, "COLUMNS": "100", "DOMAINBERT_LOG": "ERROR"}
        cmd = [sys.executable, "-m", "domainbert", *argv, "--help"]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
        if proc.returncode != 0 or not proc.stdout.strip():
            raise RuntimeError(f"cli_reference: `domainbert {' '.join(argv)} --help` failed:\n{proc.stderr[-2000:]}")
        _texts[argv] = proc.stdout.rstrip()
    return _texts[argv]


def _block(argv: tuple[str, ...]) -> str:
    return f"```text\n$ {' '.join(['domainbert', *argv, '--help'])}\n{_help(argv)}\n```\n"


def reference() -> str:
    """The generated Markdown: ``domainbert --help``, then one section per command in the help's order."""
    from domainbert.cli import COMMANDS

    wanted = [()] + [(name,) for name in COMMANDS]
    wanted += [(name, sub) for name, subs in SUBCOMMANDS.items() for sub in subs]
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


def on_page_content(html: str, page, config, files) -> str:
    """Drop the Sphinx roles of the docstrings rendered on the API pages."""
    return ROLE.sub(r"\1", html)
