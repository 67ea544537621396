"""Start-up pins, not timings: when docstrings are read, and what the LightningCLI builds for one command.

What a fresh interpreter imports for ``fit`` is checked in tests/integration/test_import_footprint.py.
"""

from __future__ import annotations

import pytest

from domainbert.cli.tool_cli import wants_docs


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["fit", "--help"], True),
        (["fit", "-h"], True),
        (["fit", "--model.help", "SequenceClassificationModule"], True),
        (["fit", "--trainer.callbacks.help=EarlyStopping"], True),
        (["fit", "--config", "a.yaml", "--print_config"], True),
        (["fit", "--config", "help.yaml", "--trainer.max_steps", "1"], False),
        (["validate", "--config", "a.yaml", "--ckpt_path", "best"], False),
        ({"fit": {"help": True}}, False),
        (None, False),
    ],
)
def test_docstrings_are_read_only_for_help_and_printed_configs(args, expected):
    assert wants_docs(args) is expected


class _Built(Exception):
    def __init__(self, cli) -> None:
        self.cli = cli


def _build(args: list[str], **kwargs):
    """The DomainBertCLI for ``args``, stopped before it parses them."""
    from domainbert.cli.lightning_cli import DomainBertCLI

    class Stop(DomainBertCLI):
        def parse_arguments(self, parser, args):
            raise _Built(self)

    with pytest.raises(_Built) as built:
        Stop(args=args, **kwargs)
    return built.value.cli


def test_only_the_named_subcommand_gets_a_parser_and_no_attribute_docstrings_are_read():
    from jsonargparse._optionals import get_docstring_parse_options
    from lightning.pytorch.cli import LightningCLI

    from domainbert.cli.lightning_cli import DomainBertCLI

    every = LightningCLI.subcommands()
    cli = _build(["validate", "--config", "x.yaml"], parser_kwargs={"fit": {"description": "x"}})
    assert set(cli._subcommand_parsers) == {"validate"}
    assert cli.subcommands() == {"validate": every["validate"]}
    assert DomainBertCLI.subcommands() == every  # the class keeps all four
    assert get_docstring_parse_options()["attribute_docstrings"] is False
    cli = _build(["--config", "x.yaml", "fit", "--help"])  # no subcommand first: all four, as before
    assert set(cli._subcommand_parsers) == set(every)
    assert get_docstring_parse_options()["attribute_docstrings"] is True
