"""The tool subcommands' parser: a function's signature and docstring become its options and ``--help``."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


def run_function(fn: Callable[..., Any], argv: list[str] | None, prog: str, description: str) -> Any:
    """Parse ``argv`` (default: ``sys.argv[1:]``) into ``fn``'s arguments and call it.

    Every parameter of ``fn`` is an option (``--name value``, never positional); its ``Args:`` entry is the help.
    A misspelt or abbreviated option is an error, not a guess.

    Args:
        fn: the command's function.
        argv: the arguments after the subcommand's name.
        prog: the name shown in usage lines (``domainbert probe``).
        description: the first line of ``--help``.

    Returns:
        What ``fn`` returns.
    """
    from jsonargparse import ArgumentParser

    parser = ArgumentParser(prog=prog, description=description, allow_abbrev=False)
    parser.add_function_arguments(fn, as_positional=False)
    cfg = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    return fn(**cfg.as_dict())


def wants_docs(args: Any) -> bool:
    """Whether ``args`` ask for a help text or a printed config: the only outputs docstrings feed.

    That is any option whose name holds ``help`` (``-h``, ``--help``, ``--model.help``...) or ``print_config``.
    Parsers read attribute docstrings (a field's docstring below it) only then: jsonargparse reads the source of
    every class in their MROs for them, the slowest part of building a parser.
    """
    if not isinstance(args, list | tuple):
        return False
    names = (str(a).split("=", 1)[0] for a in args if str(a).startswith("-"))
    return any(n == "-h" or "help" in n or "print_config" in n for n in names)
