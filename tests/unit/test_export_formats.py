"""The export formats are one table: the flags pick from it, load_variant dispatches through it, a plugin adds one."""

from __future__ import annotations

import copy
import importlib.metadata
import json

import pytest
import torch

from domainbert.deploy import formats
from domainbert.deploy.folders import VARIANT_FILE, hf_model
from domainbert.deploy.formats import ExportFormat, Written, enabled
from domainbert.deploy.load import load_variant
from domainbert.errors import DomainBertError
from tests.helpers.distill_tiny import make_teacher


class Half(ExportFormat, name="fp16", order=15):
    """float16 weights: a format from another package."""

    def write(self, model, folder, ctx):
        half = copy.deepcopy(model).half().eval()
        half.save_pretrained(folder)
        return Written(half, info={"dtype": "float16"})

    def load(self, folder, config, info, trust_pickle=False):
        return hf_model(folder, config, dtype=torch.float16)


class Fake(ExportFormat, name="int8"):
    """A format under a built-in's name."""


class Scaled(ExportFormat, name="scaled", options={"scale": 2.0}):
    """A plugin's format with an option of its own."""


#: not a format at all
JUNK = object()


@pytest.fixture
def plugins(monkeypatch):
    """Register objects of this module under ``domainbert.export_formats`` (``{name: attribute}``) for one test."""

    def install(found: dict[str, str]):
        eps = [importlib.metadata.EntryPoint(name, f"{__name__}:{attr}", formats.GROUP) for name, attr in found.items()]
        installed = importlib.metadata.entry_points
        monkeypatch.setattr(
            importlib.metadata,
            "entry_points",
            lambda group: [*installed(group=group), *(eps if group == formats.GROUP else [])],
        )
        formats.FORMATS.refresh()

    yield install
    monkeypatch.undo()
    formats.FORMATS.refresh()


def test_the_built_in_table_names_each_format_once_with_its_flag():
    table = {name: (f.option, f.teacher) for name, f in formats.built_in().items()}
    assert table == {
        "fp32": (None, False),
        "bf16": ("bf16", True),
        "int8": ("int8", True),
        "onnx": ("onnx", False),
        "onnx_int8": ("int8", True),
    }


def test_the_flags_pick_formats_in_their_order_and_names_add_more():
    assert [f.name for f in enabled({"int8": True})] == ["int8", "onnx_int8"]
    assert [f.name for f in enabled({"onnx": True, "bf16": True})] == ["bf16", "onnx"]
    assert [f.name for f in enabled({"int8": False}, ["onnx", "bf16"])] == ["bf16", "onnx"]
    assert enabled({}, ["fp32"]) == []  # the model's own folder is written anyway, as student/
    with pytest.raises(DomainBertError, match=r"--formats: 'fp8' is not an export format; known: fp32, bf16"):
        enabled({}, ["fp8"])


def test_a_plugin_format_is_written_by_name_and_loads_through_load_variant(plugins, tmp_path):
    plugins({"fp16": "Half"})
    assert list(formats.table())[-1] == "fp16" and [f.name for f in enabled({}, ["fp16"])] == ["fp16"]
    model, tokenizer, _ = load_variant(make_teacher("bert", tmp_path / "model", layers=1))
    folder = tmp_path / "fp16"
    folder.mkdir()
    written = Half().write(model, folder, ctx=None)
    tokenizer.save_pretrained(folder)
    (folder / VARIANT_FILE).write_text(json.dumps({"variant": "fp16", **written.info}))
    loaded, _, info = load_variant(folder)
    assert info == {"variant": "fp16", "dtype": "float16"} and next(loaded.parameters()).dtype == torch.float16


def test_a_plugin_may_not_replace_a_built_in_format_nor_be_anything_else(plugins):
    plugins({"int8": "Fake", "junk": "JUNK", "half": "Half"})
    with pytest.warns(UserWarning) as caught:
        table = formats.table()
    assert table["int8"] is formats.built_in()["int8"] and not {"junk", "half", "fp16"} & set(table)
    text = " ".join(str(w.message) for w in caught)
    assert f"'int8' (unknown distribution: {__name__}:Fake; kept: domainbert: domainbert.deploy.formats.int8:" in text
    assert "'junk' (unknown distribution: " in text and "is not a domainbert.deploy.formats.ExportFormat" in text
    assert "'half' (unknown distribution: " in text and "its name 'fp16' is not the name it is registered under" in text


def test_a_folder_naming_an_unknown_format_is_refused_in_one_line(tmp_path):
    folder = make_teacher("bert", tmp_path / "model", layers=1)
    (folder / VARIANT_FILE).write_text(json.dumps({"variant": "fp16"}))
    with pytest.raises(DomainBertError, match=r"field 'variant': expected one of fp32, bf16, int8, onnx, onnx_int8"):
        load_variant(folder)


def test_a_format_declares_only_known_attributes():
    with pytest.raises(TypeError, match=r"\['flag'\] are not ExportFormat attributes"):

        class Bad(ExportFormat, name="bad", flag="x"):
            pass


def test_a_formats_options_are_its_own_and_a_plugin_adds_its_own(plugins):
    from domainbert.deploy.formats import option_defaults, option_values

    assert formats.get("int8").options == {"int8_backend": "auto", "int8_per_channel": True}
    assert formats.get("onnx").options == {"onnx_opset": None, "onnx_fuse": True}

    plugins({"scaled": "Scaled"})
    assert option_defaults()["scale"] == 2.0
    assert option_values({"scale": 3.0, "onnx_fuse": False}) | {} == {
        **option_defaults(),
        "scale": 3.0,
        "onnx_fuse": False,
    }
    with pytest.raises(DomainBertError, match=r"'sacle' is not an option of any export format; known: int8_backend"):
        option_values({"sacle": 3.0})


def test_the_command_line_keeps_each_format_option_as_a_flag_of_its_own(monkeypatch):
    """``--int8_backend torch``, ``--onnx_fuse`` alone and ``--int8_per_channel=false`` reach ``format_options``."""
    from jsonargparse import ArgumentParser

    from domainbert.cli import tool_cli
    from domainbert.deploy import command

    parsed = {}

    def parse_only(fn, argv, prog, description):
        parser = ArgumentParser(prog=prog, allow_abbrev=False)
        parser.add_function_arguments(fn, as_positional=False)
        parsed.update(parser.parse_args(argv).as_dict())

    monkeypatch.setattr(tool_cli, "run_function", parse_only)
    argv = [
        "--model",
        "m",
        "--out",
        "o",
        "--int8",
        "--int8_backend",
        "torch",
        "--onnx_fuse",
        "--int8_per_channel=false",
    ]
    command.main(argv)
    assert parsed["int8"] is True and parsed["model"] == "m" and parsed["out"] == "o"
    assert parsed["format_options"] == {"int8_backend": "torch", "onnx_fuse": True, "int8_per_channel": False}
    command.main(["--model", "m", "--out", "o", "--format_options", '{"onnx_opset": 17}', "--onnx_fuse", "false"])
    assert parsed["format_options"] == {"onnx_opset": 17, "onnx_fuse": False}
    for given, expected in ((["--bf16"], True), (["--bf16", "auto"], "auto"), (["--bf16=false"], False)):
        command.main(["--model", "m", "--out", "o", *given])
        assert parsed["bf16"] == expected, given


def test_bf16_auto_writes_bf16_where_the_cpu_multiplies_it_natively(monkeypatch):
    from domainbert.core import hardware
    from domainbert.deploy import command

    for flags, expected in ((frozenset({"avx2", "amx_bf16", "amx_tile"}), True), (frozenset({"avx2", "fma"}), False)):
        monkeypatch.setattr(hardware, "cpu_flags", lambda flags=flags: flags)
        assert command._bf16_here("auto") is expected
    assert command._bf16_here(True) is True and command._bf16_here(False) is False
    with pytest.raises(DomainBertError, match=r"--bf16 'sometimes': expected true, false or auto"):
        command._bf16_here("sometimes")
