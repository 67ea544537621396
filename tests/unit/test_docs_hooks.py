"""The docs build's hook: help texts that fit the page's column, and no reST markup left on the API pages."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("cli_reference", ROOT / "docs" / "hooks" / "cli_reference.py")
hook = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hook)


def test_a_help_line_wider_than_the_column_continues_under_its_description():
    row = "  datamodules  list the datamodules registered by plugins (entry points) and the tasks they serve well"
    text = hook.fit_to_width(f"commands:\n{row}\n  short  fits", 60)
    assert text.splitlines() == [
        "commands:",
        "  datamodules  list the datamodules registered by plugins",
        "               (entry points) and the tasks they serve well",
        "  short  fits",
    ]
    usage = "usage: domainbert [options] fit [-c CONFIG] [--seed_everything SEED_EVERYTHING] [--trainer.x X]"
    assert all(len(line) <= 60 for line in hook.fit_to_width(usage, 60).splitlines())
    assert (
        hook.fit_to_width("  --a_single_option_name_wider_than_the_column_itself", 20).strip().startswith("--a_single")
    )


def test_the_page_is_built_at_the_columns_the_content_shows():
    assert hook.WIDTH <= 80


def test_a_docstrings_literal_block_marker_is_not_shown():
    html = "<p>Classifying texts from Python::</p><pre>x</pre><p>Wire it in ::</p><p>::</p><p>a::b</p>"
    assert hook.on_page_content(html, None, None, None) == (
        "<p>Classifying texts from Python:</p><pre>x</pre><p>Wire it in</p><p>a::b</p>"
    )


def test_a_paragraph_wrapped_wider_is_wrapped_again_as_a_whole():
    text = (
        "`domainbert <command> --help` lists a command's options. Options are written with underscores\n"
        "(--ckpt_path, --top_k, --n_trials); any config value can be set as --<key>.<key> (--model.learning_rate).\n"
        "\n"
        "usage: domainbert fit [-h]"
    )
    lines = hook.fit_to_width(text, 80).splitlines()
    assert lines[:3] == [
        "`domainbert <command> --help` lists a command's options. Options are written",
        "with underscores (--ckpt_path, --top_k, --n_trials); any config value can be set",
        "as --<key>.<key> (--model.learning_rate).",
    ]
    assert lines[3:] == ["", "usage: domainbert fit [-h]"]


@pytest.mark.parametrize("page", ["README.md", "docs/index.md", "docs/getting-started.md"])
def test_the_code_a_new_user_reads_first_fits_the_column(page):
    text = (ROOT / page).read_text(encoding="utf-8")
    wide = [line for block in re.findall(r"```\w*\n(.*?)```", text, re.S) for line in block.splitlines()]
    wide = [line for line in wide if len(line) > hook.WIDTH]
    assert not wide, f"{page}: code lines wider than the page's {hook.WIDTH} columns are cut: {wide}"
