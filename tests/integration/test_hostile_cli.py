"""Hostile input to the LightningCLI subcommands: one clear line (exit 2), never a traceback, nothing run or written."""

import pickle
from pathlib import Path

import pytest
import torch

from domainbert.cli import main
from tests.helpers import TINY_MLM, faults_summary, tiny_mlm_args


def _base(sub, tiny_bert, corpus_file, root, config=TINY_MLM):
    return tiny_mlm_args(sub, tiny_bert, corpus_file, root, config)


def _fails(capsys, args) -> str:
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 2
    return faults_summary.check_one_line(capsys.readouterr().err)


class _Payload:
    """Unpickling this runs ``exec``: it creates the marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"import pathlib; pathlib.Path({str(self.marker)!r}).touch()",))


def _plant(path: Path, marker: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(
        {"state_dict": {}, "callbacks": {"ModelCheckpoint": {"best_model_path": "x"}}, "p": _Payload(marker)}, path
    )


def test_the_planted_payload_does_run_code_when_fully_unpickled(tmp_path):
    """The payload below is real: a full unpickling (``weights_only=False``) creates its marker."""
    marker = tmp_path / "ran"
    _plant(tmp_path / "evil.ckpt", marker)
    torch.load(tmp_path / "evil.ckpt", weights_only=False)
    assert marker.exists()


@pytest.mark.faults(bad_inputs=1)
@pytest.mark.parametrize("how", ["best", "path"])
def test_crafted_checkpoint_never_runs_code(tiny_bert, corpus_file, tmp_path, capsys, how):
    marker = tmp_path / "code-ran"
    evil = tmp_path / "runs" / "tiny_debug" / "version_0" / "checkpoints" / "best-epoch=0.ckpt"
    _plant(evil, marker)
    ckpt = "best" if how == "best" else str(evil)
    line = _fails(capsys, [*_base("test", tiny_bert, corpus_file, tmp_path / "runs"), "--ckpt_path", ckpt])
    faults_summary.record("code_executed", 1 if marker.exists() else 0)
    assert not marker.exists()
    assert str(evil) in line


@pytest.mark.faults(bad_inputs=1)
@pytest.mark.parametrize(
    "extra,message",
    [
        (["--trainer.max_steps", "-5"], "--trainer.max_steps=-5"),
        (["--trainer.max_steps", "0"], "--trainer.max_steps=0"),
        (["--model.learning_rate", "0"], "--model.learning_rate=0"),
        (["--guard.nonfinite", "maybe"], "guard.nonfinite"),
        (["--trainer.max_step", "5"], "--trainer.max_step"),
        (["--run_name", "../../x"], "--run_name='../../x'"),
        (["--run_name", "a/b"], "--run_name='a/b'"),
        (["--run_name", ".."], "--run_name='..'"),
        (["--run_name", ""], "--run_name=''"),
    ],
    ids=["max_steps-5", "max_steps0", "lr0", "nonfinite", "abbrev", "run_name_up", "run_name_slash", "dotdot", "empty"],
)
def test_bad_option_is_one_line_naming_it(tiny_bert, corpus_file, tmp_path, capsys, extra, message):
    line = _fails(capsys, [*_base("fit", tiny_bert, corpus_file, tmp_path / "runs"), *extra])
    assert message in line
    assert not (tmp_path / "x").exists() and not (tmp_path / "runs" / "tiny_debug").exists()


@pytest.mark.faults(bad_inputs=1)
@pytest.mark.parametrize("kind", ["folder", "missing"])
def test_ckpt_path_that_is_not_a_file(tiny_bert, corpus_file, tmp_path, capsys, kind):
    ckpt = tmp_path if kind == "folder" else tmp_path / "nope.ckpt"
    line = _fails(capsys, [*_base("test", tiny_bert, corpus_file, tmp_path / "runs"), "--ckpt_path", str(ckpt)])
    assert f"--ckpt_path {ckpt}: " + ("is a folder" if kind == "folder" else "no such file") in line


@pytest.mark.faults(bad_inputs=1)
def test_yaml_syntax_error_names_the_file_and_line(tiny_bert, corpus_file, tmp_path, capsys):
    bad = tmp_path / "broken.yaml"
    bad.write_text("trainer:\n  max_steps: 3\n  callbacks: [a, b\nmodel: {}\n")
    line = _fails(capsys, ["fit", "--config", str(bad)])
    assert f"{bad}: line " in line and "YAML syntax error" in line and "<unicode string>" not in line


def test_payload_pickles_with_torch_default_protocol():
    assert b"exec" in pickle.dumps(_Payload(Path("m")), protocol=2)


@pytest.mark.faults(bad_inputs=1)
def test_zero_learning_rate_from_python_is_an_error_not_a_zero_division(tiny_bert):
    from domainbert.errors import DomainBertError
    from domainbert.modules.mlm import MaskedLMModule

    module = MaskedLMModule(init_from=str(tiny_bert), learning_rate=0.0)
    with pytest.raises(DomainBertError, match=r"model.learning_rate=0.0: expected a positive"):
        module.configure_optimizers()


@pytest.mark.faults(bad_inputs=1)
@pytest.mark.parametrize(
    "args,abbrev",
    [
        (["vocab", "extend", "--model", "m", "--corpus", "c", "--top", "5", "--out", "o"], "--top"),
        (["export", "--mod", "m", "--out", "o"], "--mod"),
        (["pipeline", "--conf", "p.yaml"], "--conf"),
    ],
    ids=["vocab", "export", "pipeline"],
)
def test_tool_subcommands_reject_abbreviated_options(capsys, args, abbrev):
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and f"unrecognized arguments: {abbrev} " in err


@pytest.mark.faults(bad_inputs=1)
def test_a_run_shorter_than_its_val_check_interval_is_one_line_saying_what_to_change(tiny_bert, tmp_path, capsys):
    """30 documents, 3 held out, one an example, 8 a batch: 4 training batches an epoch, fewer than 10."""
    short = tmp_path / "short.txt"
    short.write_text("".join(f"document {i} about sockets and packages\n" for i in range(30)))
    line = _fails(capsys, [*_base("fit", tiny_bert, short, tmp_path / "runs"), "--data.packing", "false"])
    assert line == (
        "domainbert: error: --trainer.val_check_interval=10: the run is shorter than that, an epoch has only 4 "
        "training batch(es); set --trainer.val_check_interval to 4 or less (or 1.0, once an epoch), set "
        "--trainer.check_val_every_n_epoch=null to count it in steps across epochs, or give more training data"
    )
    assert not (tmp_path / "runs" / "tiny_debug" / "version_0").exists()  # the failed start left no folder
