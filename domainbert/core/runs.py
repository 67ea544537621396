"""Find the checkpoints of earlier runs, so ``test --ckpt_path best`` works in a new process.

Lightning resolves ``ckpt_path="best"`` from the ``ModelCheckpoint`` of the *same* ``Trainer``; a
``domainbert test`` run in a fresh process has none. Here ``best`` and ``last`` are looked up on disk in
the newest run of the same run family (``<trainer.default_root_dir>/<run_name>/version_<n>``) that
holds checkpoints.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import torch

from domainbert.errors import DomainBertError

log = logging.getLogger(__name__)

ALIASES = ("best", "last")


def _version(path: Path) -> int:
    m = re.fullmatch(r"version_(\d+)", path.name)
    return int(m.group(1)) if m else -1


def next_version(family: Path) -> int:
    """The number of the next ``version_<n>`` folder under ``family`` (0 for the first run)."""
    return max((_version(p) for p in family.glob("version_*") if p.is_dir()), default=-1) + 1


def version_of(ckpt: Path) -> int | None:
    """``n`` for a checkpoint in ``<family>/version_<n>/checkpoints/``; None elsewhere."""
    if ckpt.parent.name != "checkpoints":
        return None
    n = _version(ckpt.parent.parent)
    return n if n >= 0 else None


def latest_checkpoint_dir(family: Path) -> Path | None:
    """The ``checkpoints/`` folder of the highest ``version_<n>`` under ``family`` that has any ``.ckpt``."""
    runs = sorted((p for p in family.glob("version_*") if _version(p) >= 0), key=_version, reverse=True)
    for run in runs:
        ckpts = run / "checkpoints"
        if any(ckpts.glob("*.ckpt")):
            return ckpts
    return None


def _best_path(ckpt: Path) -> str | None:
    """The ``best_model_path`` that the ``ModelCheckpoint`` state saved in ``ckpt`` recorded.

    The file is loaded with ``weights_only=True``: a checkpoint is plain data, and a crafted pickle in a run
    folder must not run code.

    Raises:
        DomainBertError: naming the file, when it is not a plain-data checkpoint.
    """
    try:
        state = torch.load(ckpt, map_location="cpu", weights_only=True, mmap=True)
    except Exception as err:  # noqa: BLE001 - torch raises UnpicklingError, RuntimeError... for a bad file
        raise DomainBertError(
            f"{ckpt}: not a plain-data Lightning checkpoint ({load_failure(err)}); refused while looking for the best "
            "checkpoint"
        ) from err
    for key, value in (state.get("callbacks") or {}).items():
        if str(key).startswith("ModelCheckpoint") and value.get("best_model_path"):
            return value["best_model_path"]
    return None


def load_failure(err: BaseException) -> str:
    """Why ``torch.load(..., weights_only=True)`` refused a file, in a few words (torch's message is a page)."""
    found = re.search(r"Unsupported global: GLOBAL (\S+)", str(err))
    if found:
        return f"it holds a reference to {found.group(1)}, which could run code"
    first = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return f"{type(err).__name__}: {first}"[:200].rstrip(": ")


def resolve_alias(alias: str, family: Path) -> Path:
    """Turn ``best`` or ``last`` into the checkpoint file of the newest run in ``family``.

    ``best`` is the path the run's ``ModelCheckpoint`` recorded as best (moved with the run folder if it
    was renamed); ``last`` is ``last.ckpt`` where saved, else the newest checkpoint file. A run that recorded no
    best checkpoint (a fit too short to validate, which leaves ``last.ckpt``: see
    :func:`~domainbert.core.callbacks.save_final_checkpoint`) gives its last one for ``best``, with a warning.

    Raises:
        DomainBertError: when no run of the family has a checkpoint.
    """
    ckpts = latest_checkpoint_dir(family)
    if ckpts is None:
        raise DomainBertError(
            f"ckpt_path={alias!r}: no checkpoint under {family}/version_*/checkpoints; run `fit` with the same "
            "config (and trainer.default_root_dir / run_name) first, or give the checkpoint's path"
        )
    files = sorted(ckpts.glob("*.ckpt"), key=lambda p: p.stat().st_mtime)
    if alias == "last":
        return ckpts / "last.ckpt" if (ckpts / "last.ckpt").is_file() else files[-1]
    for candidate in reversed(files):
        best = _best_path(candidate)
        if best:
            local = ckpts / Path(best).name
            if local.is_file():
                return local
            if Path(best).is_file():
                return Path(best)
    last = ckpts / "last.ckpt" if (ckpts / "last.ckpt").is_file() else files[-1]
    log.warning(
        "ckpt_path='best': the run recorded no best checkpoint (no validation ran, or no ModelCheckpoint monitors a "
        "metric); using its last one, %s",
        last,
    )
    return last
