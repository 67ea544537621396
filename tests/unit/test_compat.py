"""Pins of every private library API in ``domainbert.core.compat``: each fails when its library changes the private
piece, on freshly made objects, without a fit; and the scan that keeps every other private use out of the package."""

from __future__ import annotations

import argparse
import ast
import inspect
import random
import socket
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from domainbert.core import compat

# -- lightning: LightningModule -------------------------------------------------------------------------------------


def test_attached_trainer_is_none_where_lightning_raises_and_the_trainer_once_attached():
    import lightning.pytorch as L

    module = L.LightningModule()
    with pytest.raises(RuntimeError, match="not attached"):
        module.trainer  # noqa: B018 - the public property raises: the reason for the helper
    assert compat.attached_trainer(module) is None
    assert compat.attached_trainer(SimpleNamespace()) is None  # not a LightningModule at all
    trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, accelerator="cpu")
    module.trainer = trainer  # the public setter writes the private attribute the helper reads
    assert compat.attached_trainer(module) is trainer


def test_a_module_finds_its_trainers_datamodule_and_none_without_one():
    from domainbert.modules.base import HFModule

    module = HFModule()
    assert module.attached_datamodule() is None
    datamodule = object()
    module.trainer = SimpleNamespace(datamodule=datamodule)
    assert module.attached_datamodule() is datamodule


# -- lightning: strategies and loaders ------------------------------------------------------------------------------


def test_ddp_kwargs_are_the_ones_ddp_wraps_the_model_with_and_none_without_ddp():
    from lightning.pytorch.strategies import DDPStrategy, SingleDeviceStrategy

    assert "**self._ddp_kwargs" in inspect.getsource(DDPStrategy._setup_model)
    assert compat.ddp_kwargs(DDPStrategy(find_unused_parameters=True)) == {"find_unused_parameters": True}
    assert compat.ddp_kwargs(DDPStrategy()) == {}
    assert compat.ddp_kwargs(SingleDeviceStrategy(device="cpu")) is None


def test_wrapped_sampler_is_the_one_the_ddp_predict_wrapper_shares_out():
    from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSamplerWrapper

    sampler = list(range(5))
    wrapper = UnrepeatedDistributedSamplerWrapper(sampler, num_replicas=2, rank=0, shuffle=False)
    assert compat.wrapped_sampler(wrapper.dataset) is sampler
    assert list(wrapper) == [0, 2, 4]
    assert compat.wrapped_sampler(object()) is None and compat.wrapped_sampler(None) is None


# -- lightning: LightningCLI ----------------------------------------------------------------------------------------


class _Built(Exception):
    def __init__(self, cli):
        super().__init__("built")
        self.cli = cli


def test_only_subcommands_builds_one_parser_and_the_class_keeps_all_four():
    from lightning.pytorch.cli import LightningCLI
    from lightning.pytorch.demos.boring_classes import BoringDataModule, BoringModel

    every = LightningCLI.subcommands()

    class Stop(LightningCLI):
        def __init__(self, **kwargs):
            compat.only_subcommands(self, {"validate": every["validate"]})
            super().__init__(BoringModel, BoringDataModule, **kwargs)

        def parse_arguments(self, parser, args):
            raise _Built(self)

    with pytest.raises(_Built) as built:
        Stop(args=["validate"])
    assert set(compat.subcommand_parsers(built.value.cli)) == {"validate"}
    assert LightningCLI.subcommands() == every and set(every) == {"fit", "validate", "test", "predict"}
    assert compat.subcommand_parsers(SimpleNamespace()) == {}


def test_lightning_cli_seeds_through_the_hook_skip_seeding_replaces(monkeypatch):
    from lightning.pytorch.cli import LightningCLI
    from lightning.pytorch.demos.boring_classes import BoringDataModule, BoringModel

    class ParseOnly(LightningCLI):
        def before_instantiate_classes(self):
            pass

        def instantiate_classes(self):
            pass

    class NoSeed(compat.SkipSeeding, ParseOnly):
        pass

    monkeypatch.delenv("PL_GLOBAL_SEED", raising=False)  # seed_everything sets it; restored after the test
    monkeypatch.delenv("PL_SEED_WORKERS", raising=False)
    saved = random.getstate(), torch.get_rng_state()
    try:
        torch.manual_seed(7)
        ParseOnly(BoringModel, BoringDataModule, args=["--seed_everything", "123"], run=False)
        assert torch.initial_seed() == 123  # Lightning still seeds in __init__, through _set_seed
        torch.manual_seed(7)
        cli = NoSeed(BoringModel, BoringDataModule, args=["--seed_everything", "true"], run=False)
        assert torch.initial_seed() == 7 and cli.config["seed_everything"] is True
    finally:
        random.setstate(saved[0])
        torch.set_rng_state(saved[1])


# -- lightning: CSVLogger and its writer ----------------------------------------------------------------------------


def test_set_csv_writer_gives_a_fresh_logger_its_writer_once(tmp_path):
    from lightning.pytorch.loggers import CSVLogger
    from lightning.pytorch.loggers.csv_logs import ExperimentWriter

    logger = CSVLogger(save_dir=str(tmp_path), name="run", version=0)
    mine = ExperimentWriter(log_dir=logger.log_dir)
    compat.set_csv_writer(logger, lambda: mine)
    assert logger.experiment is mine
    compat.set_csv_writer(logger, lambda: ExperimentWriter(log_dir=logger.log_dir))
    assert logger.experiment is mine  # a logger with a writer keeps it


def _metrics_file(folder: Path) -> Path:
    folder.mkdir(parents=True)
    path = folder / "metrics.csv"
    path.write_text("step,train/loss\n0,2.5\n", encoding="utf-8")
    return path


def test_lightnings_writer_deletes_metrics_and_append_to_metrics_file_keeps_them(tmp_path):
    from lightning.fabric.loggers.csv_logs import _ExperimentWriter
    from lightning.pytorch.loggers.csv_logs import ExperimentWriter

    assert "self._check_log_dir_exists()" in inspect.getsource(_ExperimentWriter.__init__)
    plain = _metrics_file(tmp_path / "plain")
    with pytest.warns(UserWarning, match="will be deleted"):
        ExperimentWriter(log_dir=str(plain.parent))
    assert not plain.exists()  # the library still deletes: the mixin is still needed

    class Appending(compat.AppendToMetricsFile, ExperimentWriter):
        pass

    kept = _metrics_file(tmp_path / "kept")
    writer = Appending(log_dir=str(kept.parent))
    assert writer.metrics_keys == ["step", "train/loss"]
    writer.log_metrics({"train/loss": 1.5}, step=1)
    writer.save()
    assert kept.read_text(encoding="utf-8").splitlines() == ["step,train/loss", "0,2.5", "1,1.5"]


def test_the_rich_bar_asks_the_hook_train_description_answers():
    from lightning.pytorch.callbacks import RichProgressBar

    assert "self._get_train_description(" in inspect.getsource(RichProgressBar)

    class Bar(compat.TrainDescription, RichProgressBar):
        def train_description(self, current_epoch: int) -> str:
            return f"round {current_epoch}"

    assert Bar()._get_train_description(3) == "round 3"


# -- torch ----------------------------------------------------------------------------------------------------------


def test_unscales_itself_is_true_for_a_fused_adamw_only():
    from torch.amp.grad_scaler import GradScaler

    assert "_step_supports_amp_scaling" in inspect.getsource(GradScaler.step)
    params = [torch.nn.Parameter(torch.zeros(2))]
    assert compat.unscales_itself(torch.optim.AdamW(params, fused=True)) is True
    assert compat.unscales_itself(torch.optim.AdamW(params, fused=False)) is False
    assert compat.unscales_itself(torch.optim.SGD(params, lr=0.1)) is False
    assert compat.unscales_itself(object()) is False


# -- Python: multiprocessing, threading, atexit ---------------------------------------------------------------------


def _handshake(server_key: bytes, client_key: bytes):
    """Both ends of a socket pair prove their keys; the server's outcome (None or its exception), the client's."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    server, client = compat.connection_over(ours.detach()), compat.connection_over(theirs.detach())
    outcome: dict[str, BaseException | None] = {}

    def serve():
        try:
            compat.prove_key_as_server(server, server_key)
            outcome["server"] = None
        except BaseException as err:  # noqa: BLE001 - reported to the test
            outcome["server"] = err
            server.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        compat.prove_key_as_client(client, client_key)
        outcome["client"] = None
    except BaseException as err:  # noqa: BLE001 - reported to the test
        outcome["client"] = err
    thread.join(10)
    return server, client, outcome


def test_connections_over_a_socket_pair_prove_their_key_and_carry_objects():
    server, client, outcome = _handshake(b"k" * 32, b"k" * 32)
    assert outcome == {"server": None, "client": None}
    client.send(("run", ["--x"]))
    assert server.recv() == ("run", ["--x"])
    server.send(("pid", 7))
    assert client.recv() == ("pid", 7)
    server.close(), client.close()


def test_a_connection_with_another_key_fails_the_handshake():
    from multiprocessing import AuthenticationError

    server, client, outcome = _handshake(b"k" * 32, b"x" * 32)
    assert isinstance(outcome["server"], AuthenticationError)
    assert isinstance(outcome["client"], AuthenticationError | EOFError | OSError)
    client.close()


def test_the_interpreters_exit_steps_are_where_the_helpers_call_them():
    """Calling them here would end this process's threads and exit handlers: the forked stage's tests in
    ``tests/integration/test_pipeline_forks.py`` run them; here the pieces they call are pinned."""
    import atexit

    assert "_shutdown_locks" in inspect.getsource(threading._shutdown)  # joins the threads that are not daemons
    assert "Run all registered exit functions" in (atexit._run_exitfuncs.__doc__ or "")
    assert "threading._shutdown()" in inspect.getsource(compat.join_non_daemon_threads)
    assert "atexit._run_exitfuncs()" in inspect.getsource(compat.run_exit_handlers)


# -- argparse -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [argparse.ArgumentParser, "jsonargparse"])
def test_parser_actions_are_the_parsers_own_and_their_help_shows(make):
    if make == "jsonargparse":
        from jsonargparse import ArgumentParser as make
    parser = make(prog="x")
    parser.add_argument("--top_k", type=int, default=5, help="old")
    (action,) = [a for a in compat.parser_actions(parser) if a.dest == "top_k"]
    action.help = "how many words to keep"
    assert "how many words to keep" in parser.format_help()


# -- optuna ---------------------------------------------------------------------------------------------------------


def test_study_storage_and_trial_id_reach_the_trial_by_its_storage_id():
    import optuna
    from optuna.trial import TrialState

    storage = optuna.storages.InMemoryStorage()
    optuna.create_study(storage=storage, study_name="first").ask()
    study = optuna.create_study(storage=storage, study_name="second")
    running = study.ask()
    assert compat.study_storage(study) is storage
    assert running.number == 0 and compat.trial_id(running) == 1  # the storage's id, not the study's number
    frozen = study.get_trials(deepcopy=False)[0]
    assert compat.trial_id(frozen) == compat.trial_id(running)
    assert compat.study_storage(study).set_trial_state_values(compat.trial_id(frozen), state=TrialState.FAIL)
    assert study.trials[0].state == TrialState.FAIL


# -- datasets -------------------------------------------------------------------------------------------------------


def test_dataset_fingerprint_is_the_one_map_names_its_result_by():
    import datasets

    ds = datasets.Dataset.from_dict({"text": ["a", "b"]})
    assert isinstance(compat.dataset_fingerprint(ds), str) and compat.dataset_fingerprint(ds)
    mapped = ds.map(lambda b: b, batched=True, new_fingerprint="0123abcd")
    assert compat.dataset_fingerprint(mapped) == "0123abcd"


# -- transformers ---------------------------------------------------------------------------------------------------


def test_set_backend_tokenizer_replaces_the_rust_backend_in_place():
    from tests.helpers.tiny import make_tokenizer

    tok, other = make_tokenizer("bert"), make_tokenizer("bert")
    assert vars(tok)["_tokenizer"] is tok.backend_tokenizer  # the read-only property reads this attribute
    other.add_tokens(["zzqword"])
    compat.set_backend_tokenizer(tok, other.backend_tokenizer)
    assert tok.backend_tokenizer is other.backend_tokenizer
    assert tok("zzqword")["input_ids"] == other("zzqword")["input_ids"]
    assert "zzqword" in tok.get_vocab()


def test_attn_implementation_reads_what_set_attn_implementation_writes():
    from transformers import BertModel

    from tests.helpers.tiny import make_config

    model = BertModel(make_config("bert", 50))
    for name in ("eager", "sdpa"):
        model.set_attn_implementation(name)
        assert compat.attn_implementation(model.config) == name
    assert compat.attn_implementation(None) is None and compat.attn_implementation(SimpleNamespace()) is None


def test_can_set_attn_implementation_is_true_for_bert_and_false_without_its_source():
    from transformers import BertModel, PreTrainedModel

    assert compat.can_set_attn_implementation(BertModel) is True
    gone = type("Gone", (PreTrainedModel,), {"__module__": "domainbert_no_such_module"})
    assert compat.can_set_attn_implementation(gone) is False


# -- the package uses no other private API ------------------------------------------------------------------------

PACKAGE = Path(__file__).resolve().parents[2] / "domainbert"
COMPAT = PACKAGE / "core" / "compat.py"

#: names with a leading underscore that their library documents as public: ``os._exit``, a namedtuple's methods
DOCUMENTED = {"_exit", "_replace", "_asdict", "_fields", "_field_defaults", "_make"}

#: names without one that their library keeps out of its ``__all__`` and its documentation
UNDOCUMENTED = {"multiprocessing.connection": {"answer_challenge", "deliver_challenge"}}

_BY_NAME = {"getattr", "setattr", "hasattr", "delattr"}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _string(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _on_self(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


def own_names(tree: ast.AST) -> set[str]:
    """The private names ``tree`` defines: what it defines, assigns or sets on ``self``/``cls``, imports as."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for sub in ast.walk(target):
                    if isinstance(sub, ast.Name):
                        names.add(sub.id)
                    elif isinstance(sub, ast.Attribute) and _on_self(sub.value):
                        names.add(sub.attr)
        elif isinstance(node, ast.alias) and node.asname:
            names.add(node.asname)
        elif isinstance(node, ast.Call) and len(node.args) >= 2:
            func = node.func
            setter = (isinstance(func, ast.Name) and func.id == "setattr") or (
                isinstance(func, ast.Attribute) and func.attr == "__setattr__"
            )
            if setter and _on_self(node.args[0]) and _string(node.args[1]):
                names.add(_string(node.args[1]))
            if isinstance(func, ast.Name) and func.id == "type" and len(node.args) == 3:
                if isinstance(node.args[2], ast.Dict):  # a class made by type(name, bases, namespace)
                    names.update(k for k in map(_string, node.args[2].keys) if k)
    return {n for n in names if _private(n)}


def private_uses(tree: ast.AST, own: set[str], where: str) -> list[str]:
    """Each ``where:line: ...`` at which ``tree`` uses a private name of another library (see the scan's test)."""
    found: list[str] = []

    def flag(node: ast.AST, what: str) -> None:
        found.append(f"{where}:{node.lineno}: {what}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            if _private(node.attr) and node.attr not in own and node.attr not in DOCUMENTED:
                flag(node, f"attribute {ast.unparse(node)}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) >= 2:
            name = _string(node.args[1])
            if node.func.id in _BY_NAME and name and _private(name) and name not in own and name not in DOCUMENTED:
                flag(node, f"attribute {name!r} by {node.func.id}")
        elif isinstance(node, ast.Call) and node.args and _string(node.args[0]) is not None:
            func = node.func
            if (isinstance(func, ast.Attribute) and func.attr == "import_module") or (
                isinstance(func, ast.Name) and func.id in ("import_module", "__import__")
            ):
                module = _string(node.args[0])
                if not module.startswith("domainbert") and any(map(_private, module.split("."))):
                    flag(node, f"module {module}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if not alias.name.startswith("domainbert") and any(map(_private, alias.name.split("."))):
                    flag(node, f"module {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module.split(".")[0] != "domainbert":
            if any(map(_private, node.module.split("."))):
                flag(node, f"module {node.module}")
            for alias in node.names:
                if _private(alias.name) or alias.name in UNDOCUMENTED.get(node.module, ()):
                    flag(node, f"name {node.module}.{alias.name}")
    return found


def _package() -> dict[Path, ast.AST]:
    return {path: ast.parse(path.read_text(encoding="utf-8"), str(path)) for path in sorted(PACKAGE.rglob("*.py"))}


def _package_own(trees: dict[Path, ast.AST]) -> set[str]:
    own = {path.stem for path in trees}  # domainbert's own modules (``domainbert.cli._quick_exit``'s ``cli``...)
    for path, tree in trees.items():
        if path != COMPAT:  # what compat defines overrides a library's private hook: not domainbert's own name
            own |= own_names(tree)
    return own


@pytest.fixture(scope="module")
def package() -> dict[Path, ast.AST]:
    """The package's modules, parsed once for every test of the scan (none changes them)."""
    return _package()


@pytest.fixture(scope="module")
def package_own(package) -> frozenset[str]:
    """domainbert's own names (:func:`_package_own`), gathered once for every test of the scan."""
    return frozenset(_package_own(package))


def test_no_module_but_compat_uses_another_librarys_private_name(package, package_own):
    """Outside ``core/compat.py``, nothing in ``domainbert`` reads, writes or calls a private name of another library.

    The rule, on the source (``ast``), file by file:

    - an attribute ``x._name`` (read, written or deleted), or ``getattr``/``setattr``/``hasattr``/``delattr`` with
      the constant ``"_name"``, is flagged unless domainbert defines ``_name`` somewhere (outside compat): a
      ``def``/``class``, an assigned name, an attribute assigned on ``self``/``cls`` (also by ``setattr`` or
      ``object.__setattr__``), an ``import ... as _name``, a key of ``type(name, bases, {...})``'s namespace, or a
      module's file name. A library's private name that domainbert also defines for itself goes unseen: keep
      domainbert's own names apart from the libraries' (prefer a word of the project's own);
    - ``import a._b``, ``importlib.import_module("a._b")`` and ``from a._b import x`` of a module outside
      domainbert are flagged, and so is ``from a import _x``;
    - names that their library documents though they start with ``_`` (:data:`DOCUMENTED`: ``os._exit``, a
      namedtuple's ``_replace``) pass; names without ``_`` that their library leaves undocumented
      (:data:`UNDOCUMENTED`) are flagged when imported;
    - dunder names (``__init__``) and domainbert's own modules are never flagged.

    A use that is needed goes into a small documented function of ``core/compat.py``, pinned in this file.
    """
    found = [
        use
        for path, tree in package.items()
        if path != COMPAT
        for use in private_uses(tree, package_own, str(path.relative_to(PACKAGE.parent)))
    ]
    assert not found, "private API of another library outside core/compat.py:\n" + "\n".join(found)


_PLANTED = {
    "trainer._fit_loop.run()": "attribute trainer._fit_loop",
    "strategy._zz_kwargs = {}": "attribute strategy._zz_kwargs",
    "del strategy._zz_kwargs": "attribute strategy._zz_kwargs",
    "x = getattr(optimizer, '_zz_amp', False)": "attribute '_zz_amp' by getattr",
    "hasattr(config, '_zz_impl')": "attribute '_zz_impl' by hasattr",
    "import torch._dynamo": "module torch._dynamo",
    "import torch._dynamo as dynamo": "module torch._dynamo",
    "from torch._C import Graph": "module torch._C",
    "from torch.nn.functional import _in_projection": "name torch.nn.functional._in_projection",
    "from multiprocessing.connection import answer_challenge": "name multiprocessing.connection.answer_challenge",
    "importlib.import_module('lightning.fabric.utilities._zz')": "module lightning.fabric.utilities._zz",
    "torch._C._zz_flag": "attribute torch._C",
}


@pytest.mark.parametrize("snippet", list(_PLANTED))
def test_the_scan_names_the_file_line_and_name_of_a_planted_private_use(snippet, package_own):
    source = f"import os\n\n{snippet}\n"
    tree = ast.parse(source)
    found = private_uses(tree, package_own | own_names(tree), "domainbert/planted.py")
    assert f"domainbert/planted.py:3: {_PLANTED[snippet]}" in found


@pytest.mark.parametrize(
    "snippet",
    [
        "class A:\n    def __init__(self):\n        self._zz_mine = 1\n\ndef f(a):\n    return a._zz_mine",
        "class A:\n    def _zz_hook(self):\n        pass\n\nA()._zz_hook()",
        "_ZZ_TABLE = {}\nimport domainbert.core.x as m\nm._ZZ_TABLE",
        "obj.__class__.__init__",
        "os._exit(0)",
        "from domainbert.core.x import _zz_helper",
        "from ._zz_sibling import y",
        "import domainbert._zz",
        "point._replace(x=1)",
        "setattr(self, '_zz_set', 1)\nother._zz_set",
        "T = type('T', (), {'_zz_cls': 1})\nT._zz_cls",
    ],
)
def test_the_scan_passes_domainberts_own_private_names_and_documented_ones(snippet, package_own):
    tree = ast.parse(snippet)
    assert private_uses(tree, package_own | own_names(tree), "domainbert/planted.py") == []
