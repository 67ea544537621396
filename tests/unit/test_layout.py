"""The package's shape: layers that hold, and no import cycle anywhere in ``domainbert`` (lazy imports included).

Layers, bottom up (:data:`LAYERS`): ``errors`` and ``core``; ``data`` (built on ``core``); ``modules`` (the
LightningModules); ``distill`` (built on ``modules``); on top the command line (``cli``) and the tools (``adapt``,
``deploy``, ``sweep``, ``pipeline``). A module may import its own layer or a lower one, never a higher one; every
top-level entry of ``domainbert/`` has a layer here, and no layer names an entry that is gone.

No two packages import each other, whatever their layers and wherever the import statement stands: at the top of
a module or inside a function (a lazy import is deferred, not absent: the two packages still cannot be understood,
tested or moved one without the other). A package here is a top-level one (``domainbert.<name>``); a nested
package (``deploy/formats``, ``pipeline/strategies``) is part of its parent. A module named only in a string (the
``"module:function"`` rows of ``domainbert.cli.COMMANDS``, an entry point) is not an import: it is data that a
table hands to ``importlib`` when that row is used.

Files with the same name in different packages are deliberate only where they are parallel structure that users'
class paths name (:data:`PARALLEL_NAMES`): ``data/X.py`` and ``modules/X.py`` (a task's datamodule and its model),
each tool's ``command.py``, ``report.py`` and ``worker.py``, and the pipeline's strategy files named after the tool
stage they run.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "domainbert"


def _modules(package: Path) -> dict[str, Path]:
    mods = {}
    for path in package.rglob("*.py"):
        name = ".".join(path.relative_to(package.parent).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = path
    return mods


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """``{module: the modules of package it imports}``, at any depth of the file (lazy imports count)."""
    mods = _modules(package)
    graph = {}
    for name, path in mods.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                deps.add(node.module)
                deps.update(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.Import):
                deps.update(alias.name for alias in node.names)
        graph[name] = {d for d in deps if d in mods and d != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_planted_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_domainbert_has_no_import_cycle():
    graph = import_graph()
    assert "domainbert.pipeline.recipe" in graph and "domainbert.core.files" in graph["domainbert.pipeline.runner"]
    assert cycles(graph) == []


#: each top-level package (or module) of ``domainbert`` and its layer; ``""`` is the package's own ``__init__``.
LAYERS = {
    "errors": 0,
    "core": 0,
    "data": 1,
    "modules": 2,
    "distill": 3,
    "adapt": 4,
    "deploy": 4,
    "sweep": 4,
    "pipeline": 4,
    "cli": 4,
    "__main__": 4,
    "": 4,
}

#: file names that several packages hold on purpose (see the module docstring).
PARALLEL_NAMES = {
    "base.py": {"data", "modules", "pipeline/strategies"},
    "classification.py": {"data", "modules"},
    "tagging.py": {"data", "modules"},
    "qa.py": {"data", "modules"},
    "command.py": {"deploy", "sweep", "pipeline"},
    "report.py": {"deploy", "sweep", "pipeline"},
    "worker.py": {"sweep", "pipeline"},
    "__main__.py": {"", "pipeline"},
    "select.py": {"adapt", "pipeline/strategies"},
    "soup.py": {"adapt", "pipeline/strategies"},
    "vocab.py": {"adapt", "pipeline/strategies"},
    "contrastive.py": {"modules", "pipeline/strategies"},
    "tsdae.py": {"modules", "pipeline/strategies"},
}


def package_of(module: str) -> str:
    """``domainbert.core.hf`` -> ``core``; ``domainbert`` -> ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def layer_violations(graph: dict[str, set[str]], layers: dict[str, int]) -> list[str]:
    """One line per import that goes up a layer, or per module whose package has no layer."""
    found = []
    for module in sorted(graph):
        if package_of(module) not in layers:
            found.append(f"{module}: package {package_of(module)!r} has no layer: add it to LAYERS")
            continue
        for dep in sorted(graph[module]):
            up, down = layers.get(package_of(module)), layers.get(package_of(dep))
            if down is not None and down > up:
                found.append(
                    f"{module} imports {dep}: layer {up} ({package_of(module)}) may not import "
                    f"layer {down} ({package_of(dep)})"
                )
    return found


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The imports between packages, each package one node (those of one layer too)."""
    packages: dict[str, set[str]] = {package_of(m): set() for m in graph}
    for module, deps in graph.items():
        packages[package_of(module)].update(package_of(d) for d in deps if package_of(d) != package_of(module))
    return packages


def mutual_imports(graph: dict[str, set[str]]) -> list[str]:
    """One line per pair of packages that import each other, naming an import each way."""
    imports: dict[tuple[str, str], str] = {}
    for module in sorted(graph):
        for dep in sorted(graph[module]):
            pair = (package_of(module), package_of(dep))
            if pair[0] != pair[1]:
                imports.setdefault(pair, f"{module} imports {dep}")
    return [f"{a} <-> {b}: {imports[a, b]}; {imports[b, a]}" for a, b in sorted(imports) if a < b and (b, a) in imports]


def test_the_layer_check_flags_a_planted_upward_import():
    graph = {"domainbert.core.hf": {"domainbert.modules.mlm"}, "domainbert.modules.mlm": {"domainbert.core.hf"}}
    assert layer_violations(graph, LAYERS) == [
        "domainbert.core.hf imports domainbert.modules.mlm: layer 0 (core) may not import layer 2 (modules)"
    ]
    assert layer_violations({"domainbert.core.prediction": {"domainbert.data.batching"}}, LAYERS) == [
        "domainbert.core.prediction imports domainbert.data.batching: layer 0 (core) may not import layer 1 (data)"
    ]
    assert layer_violations({"domainbert.newpkg.x": set()}, LAYERS) == [
        "domainbert.newpkg.x: package 'newpkg' has no layer: add it to LAYERS"
    ]
    planted = {"domainbert.modules.a": {"domainbert.distill.b"}, "domainbert.distill.b": {"domainbert.modules.a"}}
    assert cycles(package_graph(planted)) == [["distill", "modules"]]
    same_layer = {"domainbert.errors": {"domainbert.core.hf"}, "domainbert.core.hf": {"domainbert.errors"}}
    assert cycles(package_graph(same_layer)) == [["core", "errors"]]  # one layer is no licence to import each other


def test_every_import_goes_to_the_same_or_a_lower_layer():
    graph = import_graph()
    assert "domainbert.core.embed" in graph["domainbert.modules.probe_init"]  # lazy imports are in the graph
    assert layer_violations(graph, LAYERS) == []


def test_the_pair_check_flags_two_packages_importing_each_other_lazily_too(tmp_path):
    root = tmp_path / "domainbert"
    files = {
        "__init__.py": "",
        "modules/__init__.py": "",
        "modules/alias.py": "def load():\n    from domainbert.distill.module import Module\n    return Module\n",
        "distill/__init__.py": "",
        "distill/module.py": "from domainbert.modules.alias import load\n\nclass Module:\n    pass\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    assert mutual_imports(import_graph(root)) == [
        "distill <-> modules: domainbert.distill.module imports domainbert.modules.alias; "
        "domainbert.modules.alias imports domainbert.distill.module"
    ]
    (root / "modules/alias.py").write_text("def load():\n    return None\n", encoding="utf-8")
    assert mutual_imports(import_graph(root)) == []


def test_no_two_packages_import_each_other():
    graph = import_graph()
    assert mutual_imports(graph) == []
    assert cycles(package_graph(graph)) == []  # nor three or more in a ring


def test_every_top_level_entry_has_a_layer_and_every_layer_an_entry():
    entries = {p.stem if p.suffix == ".py" else p.name for p in PACKAGE.iterdir() if p.suffix == ".py" or p.is_dir()}
    entries = {"" if e == "__init__" else e for e in entries if e != "__pycache__"}
    assert entries == set(LAYERS)


def test_a_file_name_is_shared_only_by_deliberate_parallel_files():
    holders: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        folder = path.parent.relative_to(PACKAGE).as_posix()
        holders.setdefault(path.name, set()).add("" if folder == "." else folder)
    shared = {name: folders for name, folders in holders.items() if len(folders) > 1 and name != "__init__.py"}
    assert shared == PARALLEL_NAMES
