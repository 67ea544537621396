"""A class reads what it declares as an attribute, not through ``getattr``/``hasattr`` with a default.

``getattr(self, "name", default)`` on an attribute that the class itself declares (in its body, or assigned as
``self.name`` in one of its methods) hides a missing declaration and a misspelt name alike; the scan below refuses
it everywhere in ``domainbert``. Attributes a class inherits from a library (Lightning's ``trainer``) are not its
declarations, so reading them defensively stays allowed.
"""

from __future__ import annotations

import ast
from pathlib import Path

import domainbert

PACKAGE = Path(domainbert.__file__).parent


def _self_targets(node: ast.AST) -> set[str]:
    """The names of ``self.<name>`` that ``node`` assigns (``self.a = ...``, ``self.a, self.b = ...``)."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return {node.attr}
    if isinstance(node, ast.Tuple | ast.List):
        return set().union(*(_self_targets(e) for e in node.elts))
    return set()


def declared(cls: ast.ClassDef) -> set[str]:
    """What a class declares: its body's names (fields, methods) and the ``self.<name>`` its methods assign."""
    names: set[str] = set()
    for item in cls.body:
        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(item.name)
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            names.add(item.target.id)
        elif isinstance(item, ast.Assign):
            names |= {t.id for t in item.targets if isinstance(t, ast.Name)}
    for node in ast.walk(cls):
        if isinstance(node, ast.Assign):
            names |= set().union(*(_self_targets(t) for t in node.targets))
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            names |= _self_targets(node.target)
    return names


def defensive_reads(source: str, where: str) -> list[str]:
    """``getattr``/``hasattr`` calls on ``self`` with a constant name that the enclosing class declares."""
    found = []
    for cls in (n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef)):
        names = declared(cls)
        for call in ast.walk(cls):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
                continue
            if call.func.id not in ("getattr", "hasattr") or len(call.args) < 2:
                continue
            obj, attr = call.args[0], call.args[1]
            if isinstance(obj, ast.Name) and obj.id == "self" and isinstance(attr, ast.Constant):
                if attr.value in names:
                    found.append(f"{where}:{call.lineno}: {call.func.id}(self, {attr.value!r}) in {cls.name}")
    return found


def test_the_scan_flags_a_planted_defensive_read_of_a_declared_attribute():
    source = """
class Plugin:
    kind: str = "x"

    def __init__(self):
        self.label_names, self.head = None, None

    def run(self):
        return getattr(self, "kind", None), hasattr(self, "label_names"), getattr(self, "trainer", None)
"""
    assert defensive_reads(source, "plugin.py") == [
        "plugin.py:9: getattr(self, 'kind') in Plugin",
        "plugin.py:9: hasattr(self, 'label_names') in Plugin",
    ]


def test_no_class_reads_its_own_declared_attributes_through_getattr_or_hasattr():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        found += defensive_reads(path.read_text(encoding="utf-8"), str(path.relative_to(PACKAGE.parent)))
    assert found == []
