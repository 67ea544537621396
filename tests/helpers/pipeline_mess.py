"""A stand-in ``domainbert`` tool for the tests of in-process stages: it changes the process's global state, writes
to every output, then ends as its first argument says (``ok``, ``user``, ``bug``, ``exit``, ``message``)."""

from __future__ import annotations

import logging
import os
import sys
import warnings

from domainbert.errors import DomainBertError


def main(argv: list[str]) -> None:
    """Change cwd, argv, the environment, logging, warnings and torch's threads; print; end as ``argv[0]`` says."""
    import torch

    os.chdir(argv[1])
    sys.argv.append("--changed")
    os.environ["DOMAINBERT_TEST_MESS"] = "1"
    torch.set_num_threads(max(1, torch.get_num_threads() + 1))
    logging.getLogger().addHandler(logging.StreamHandler(sys.stderr))
    logging.getLogger().setLevel(logging.ERROR)
    warnings.simplefilter("error")
    print("mess: to stdout")
    print("mess: to stderr", file=sys.stderr)
    logging.getLogger("tests.mess").error("mess: logged")
    how = argv[0]
    if how == "user":
        raise DomainBertError("mess: a user error")
    if how == "bug":
        raise KeyError("mess: a bug")
    if how == "exit":
        sys.exit(3)
    if how == "message":
        sys.exit("mess: exit with a message")
