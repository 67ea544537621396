"""``--config <name>`` takes the package's built-in configs from any folder."""

from __future__ import annotations

import pytest

from domainbert.cli.lightning_cli import builtin_configs, resolve_builtin_configs
from domainbert.errors import DomainBertError


def test_a_built_in_name_is_the_packages_file_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    known = builtin_configs()
    assert {"finetune", "distill", "dapt"} <= set(known) and all(p.is_file() for p in known.values())
    args = resolve_builtin_configs(["fit", "--config", "finetune", "--config=distill", "--data.train", "finetune"])
    assert args == [
        "fit",
        "--config",
        str(known["finetune"]),
        f"--config={known['distill']}",
        "--data.train",
        "finetune",
    ]


def test_a_file_of_that_name_wins_and_paths_and_yaml_go_to_the_parser(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "finetune").write_text("trainer: {max_epochs: 1}\n")
    given = ["fit", "--config", "finetune", "--config", "configs/x.yaml", "--config", "{trainer: {max_epochs: 1}}"]
    assert resolve_builtin_configs(given) == given


def test_an_unknown_name_is_one_line_naming_the_built_in_ones(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DomainBertError, match=r"--config finetun: no such file, .*built-in: .*finetune"):
        resolve_builtin_configs(["fit", "--config", "finetun"])
