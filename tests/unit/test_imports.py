"""Start-up pins, not timings: what the ``fit`` path imports, and what the LightningCLI builds for one command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from domainbert.core.tool_cli import wants_docs

ROOT = Path(__file__).resolve().parents[2]

#: Packages and domainbert parts that ``domainbert fit`` never needs: tools, deployment, sweeps, other stages.
NOT_ON_THE_FIT_PATH = (
    "optuna",
    "onnx",
    "onnxruntime",
    "peft",
    "sklearn",
    "torchao",
    "domainbert.deploy",
    "domainbert.sweep",
    "domainbert.pipeline",
    "domainbert.distill",
    "domainbert.adapt.vocab",
    "domainbert.adapt.probe",
    "domainbert.adapt.select",
    "domainbert.adapt.pseudo",
)

# `domainbert fit --help` in a fresh interpreter, then the modules a fine-tuning config names; the imported
# modules after each step, as JSON
_SCRIPT = """
import contextlib, io, json, sys
from domainbert.cli import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    try:
        main(["fit", "--help"])
    except SystemExit as exc:
        assert exc.code == 0, exc.code
assert "--trainer.max_steps" in out.getvalue()
after_help = sorted(sys.modules)
import domainbert.modules.classification, domainbert.prediction, domainbert.callbacks
print(json.dumps({"help": after_help, "fit": sorted(sys.modules)}))
"""


def _imported(names: list[str], wanted: str) -> bool:
    return any(n == wanted or n.startswith(wanted + ".") for n in names)


@pytest.fixture(scope="module")
def imported() -> dict[str, list[str]]:
    proc = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, cwd=ROOT, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", NOT_ON_THE_FIT_PATH)
def test_the_fit_path_imports_no_tool_or_optional_package(imported, name):
    assert not _imported(imported["fit"], name)


def test_fit_help_loads_no_model_code(imported):
    # the parser needs the classes' signatures, not transformers' model loading (core.hf pulls it in)
    assert "domainbert.core.hf" not in imported["help"]
    assert not _imported(imported["help"], "domainbert.modules")
    assert "domainbert.data.classification" in imported["help"]  # the plugins stay known subclasses of --data


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
    from domainbert.core.lightning_cli import DomainBertCLI

    class Stop(DomainBertCLI):
        def parse_arguments(self, parser, args):
            raise _Built(self)

    with pytest.raises(_Built) as built:
        Stop(args=args, **kwargs)
    return built.value.cli


def test_only_the_named_subcommand_gets_a_parser_and_no_attribute_docstrings_are_read():
    from jsonargparse._optionals import get_docstring_parse_options
    from lightning.pytorch.cli import LightningCLI

    from domainbert.core.lightning_cli import DomainBertCLI

    every = LightningCLI.subcommands()
    cli = _build(["validate", "--config", "x.yaml"], parser_kwargs={"fit": {"description": "x"}})
    assert set(cli._subcommand_parsers) == {"validate"}
    assert cli.subcommands() == {"validate": every["validate"]}
    assert DomainBertCLI.subcommands() == every  # the class keeps all four
    assert get_docstring_parse_options()["attribute_docstrings"] is False
    cli = _build(["--config", "x.yaml", "fit", "--help"])  # no subcommand first: all four, as before
    assert set(cli._subcommand_parsers) == set(every)
    assert get_docstring_parse_options()["attribute_docstrings"] is True
