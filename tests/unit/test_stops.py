"""Every fit a user can copy stops: shipped configs, the commands in the README, the examples and config headers.

Lightning trains 1000 epochs when neither ``max_epochs`` nor ``max_steps`` is set; ``domainbert fit`` gives such a
command :data:`~domainbert.cli.lightning_cli.DEFAULT_MAX_EPOCHS` epochs and says so in one line.
"""

from __future__ import annotations

import logging
import re
import shlex

import pytest
import yaml

from domainbert.cli.lightning_cli import DEFAULT_MAX_EPOCHS, DomainBertCLI, give_a_stop, has_stop
from tests.helpers import ROOT, TINY_CLS

#: standalone fit configs: each must bound its training itself
FIT_CONFIGS = sorted(
    [p for d in ("pretrain", "finetune", "distill") for p in (ROOT / "configs" / d).glob("*.yaml")]
    + list((ROOT / "domainbert/pipeline/stages").glob("*.yaml"))
)

#: where users copy commands from: the README, config headers, the examples' READMEs, configs and pyproject files
SOURCES = [ROOT / "README.md", *sorted((ROOT / "configs").rglob("*.yaml"))] + sorted(
    p for p in (ROOT / "examples").rglob("*") if p.suffix in (".md", ".toml", ".yaml") and "data" not in p.parts
)


def fit_commands(text: str) -> list[str]:
    """The ``domainbert fit ...`` commands in ``text``: continued lines joined, comment marks dropped."""
    text = re.sub(r"\\\n\s*#?\s*", " ", text)  # shell line continuations, also inside a comment block
    found = re.findall(r"domainbert fit\b([^`\n]*)", text)
    return [" ".join(re.sub(r"\[[^\]]*\]", "", rest).split()) for rest in found]  # [optional parts] left out


def words(command: str) -> list[str]:
    """A command's words as the shell splits them, a trailing ``# comment`` dropped (prose: split on spaces)."""
    try:
        return shlex.split(command.replace("...", ""), comments=True)
    except ValueError:
        return command.split()


def resolved_trainer(args: list[str]) -> dict:
    """The trainer section a command resolves to: its ``--config`` files in order, then its ``--trainer.*`` options,
    then what ``domainbert fit`` adds when it has no stop."""
    trainer: dict = {}
    for i, arg in enumerate(args):
        if arg in ("--config", "-c") and i + 1 < len(args) and (ROOT / args[i + 1]).is_file():
            config = yaml.safe_load((ROOT / args[i + 1]).read_text(encoding="utf-8")) or {}
            trainer.update(config.get("trainer") or {})
        key, eq, value = arg.partition("=")
        if key.startswith("--trainer.max_"):
            value = value if eq else (args[i + 1] if i + 1 < len(args) else "")
            trainer[key.removeprefix("--trainer.")] = yaml.safe_load(value)
    give_a_stop(trainer)
    return trainer


def finite(trainer: dict) -> bool:
    epochs, steps = trainer.get("max_epochs"), trainer.get("max_steps")
    return (isinstance(epochs, int) and epochs > 0) or (isinstance(steps, int) and steps > 0)


@pytest.mark.parametrize("path", FIT_CONFIGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_shipped_fit_config_sets_its_own_stop(path):
    trainer = yaml.safe_load(path.read_text(encoding="utf-8")).get("trainer") or {}
    assert has_stop(trainer) and finite(trainer), f"{path}: set trainer.max_epochs or trainer.max_steps"


def test_every_copied_fit_command_resolves_a_finite_stop():
    commands = [(path, cmd) for path in SOURCES for cmd in fit_commands(path.read_text(encoding="utf-8"))]
    assert any("--data folder" in cmd for _, cmd in commands), "the plugin example's command is no longer found"
    unbounded = [
        f"{path.relative_to(ROOT)}: domainbert fit {cmd}"
        for path, cmd in commands
        if not finite(resolved_trainer(words(cmd)))
    ]
    assert not unbounded, "\n".join(unbounded)


def test_the_plugin_example_trains_the_default_epochs_and_says_so(caplog):
    trainer: dict = {"max_epochs": None, "max_steps": -1}
    with caplog.at_level(logging.INFO, logger="domainbert.cli.lightning_cli"):
        give_a_stop(trainer)
    assert trainer["max_epochs"] == DEFAULT_MAX_EPOCHS
    assert [r.getMessage() for r in caplog.records] == [
        f"trainer.max_epochs not set: training {DEFAULT_MAX_EPOCHS} epochs (--trainer.max_epochs or "
        "--trainer.max_steps sets the length)"
    ]


@pytest.mark.parametrize(
    "trainer",
    [{"max_steps": 5}, {"max_epochs": 1}, {"max_epochs": -1}, {"max_time": "00:01:00:00"}],
    ids=["max_steps", "max_epochs", "no limit asked", "max_time"],
)
def test_a_stop_the_user_gave_is_kept(trainer):
    before = dict(trainer)
    give_a_stop(trainer)
    assert trainer == before


class _Parsed(Exception):
    pass


class _ParseOnly(DomainBertCLI):
    """The CLI up to its parsed config (no model or trainer is built)."""

    def before_instantiate_classes(self) -> None:
        raise _Parsed(self.config)


@pytest.mark.parametrize(
    "args,expected",
    [
        (["--trainer.max_epochs", "null"], (DEFAULT_MAX_EPOCHS, -1)),
        (["--trainer.max_epochs", "null", "--trainer.max_steps", "5"], (None, 5)),
        ([], (3, -1)),  # the config's own max_epochs
    ],
)
def test_fit_without_a_stop_gets_the_default_epochs(tiny_bert, tmp_path, args, expected):
    argv = ["fit", "--config", TINY_CLS, "--model.init_from", str(tiny_bert), "--trainer.default_root_dir"]
    with pytest.raises(_Parsed) as parsed:
        _ParseOnly(args=[*argv, str(tmp_path), *args])
    trainer = parsed.value.args[0]["fit"]["trainer"]
    assert (trainer["max_epochs"], trainer["max_steps"]) == expected


def test_commands_are_found_across_continued_lines():
    text = "```bash\ndomainbert fit --data folder --data.root x \\\n  --model m --trainer.max_epochs 2\n```"
    assert fit_commands(text) == ["--data folder --data.root x --model m --trainer.max_epochs 2"]
    assert fit_commands("# domainbert fit --config a.yaml [--trainer.max_steps 50]") == ["--config a.yaml"]


def test_the_helper_resolves_configs_then_options():
    config = ["--config", "configs/pretrain/minilm_debian.yaml"]
    assert resolved_trainer(config)["max_steps"] == 400
    assert resolved_trainer([*config, "--trainer.max_steps=7"])["max_steps"] == 7
    assert resolved_trainer([*config, "--trainer.max_steps", "9"])["max_steps"] == 9
