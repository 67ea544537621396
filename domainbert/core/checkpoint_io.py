"""Checkpoints written so that a full disk or a kill never leaves a truncated file under a checkpoint's name.

:class:`AtomicCheckpointIO` is the ``domainbert fit`` default (registered by :class:`domainbert.cli.lightning_cli.
DomainBertCLI` when ``trainer.plugins`` names no other CheckpointIO). A local checkpoint is serialised into a
temporary file in its own folder, ``fsync``-ed, given the umask's mode and renamed over its final name; a full
disk becomes one line naming the checkpoint, its folder, the free space and the last good checkpoint there.
Remote paths (``s3://`` and the like) keep Lightning's own writer.

A checkpoint's saved hyper-parameters are read back by every loader (``load_from_checkpoint``, ``--ckpt_path``) and
handed to the module's ``__init__``. :func:`check_saved_trust` refuses those that turn ``trust_remote_code`` on:
that switch runs code shipped in a model folder, and only the user, on the command line or in their own config or
call, may set it; the modules leave it out of what they save.
"""

from __future__ import annotations

import io
import os
import pickle
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from domainbert.core.files import atomic_file, clean_tmp_files, newest_checkpoint
from domainbert.errors import DomainBertError

#: The hyper-parameter that lets a model folder's own code run: the user's word only, never a checkpoint's.
TRUST_KEY = "trust_remote_code"


class AtomicCheckpointIO(TorchCheckpointIO):
    """``TorchCheckpointIO`` whose local writes go to a temporary file, then ``fsync``, then a rename."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        """Write ``checkpoint`` to ``path`` atomically.

        Raises:
            DomainBertError: when it cannot be written (on a full disk: the free space and the last good checkpoint).
        """
        if "://" in str(path):
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options")
        path = Path(path)
        if path.parent.is_dir():
            clean_tmp_files(path.parent, dead_only=True)
        last_good = newest_checkpoint(path.parent)
        buffer = io.BytesIO()  # serialised in memory first (as Lightning does): a full disk is then an OSError
        torch.save(checkpoint, buffer)
        with atomic_file(path, what="the checkpoint", last_good=last_good) as tmp, open(tmp, "wb") as fh:
            fh.write(buffer.getbuffer())  # atomic_file fsyncs it before the rename


def saved_hparams(path: str | os.PathLike | IO[bytes], unpickle: bool = False) -> dict[str, Any]:
    """The hyper-parameters a Lightning checkpoint saved (``{}`` without any), read as plain data.

    Args:
        path: a local file, a URL Lightning reads, or an open binary file (read from where it stands).
        unpickle: read the file by a full unpickling when it holds more than plain data: only where the caller
            was asked to (``load_from_checkpoint(..., weights_only=False)``).

    Raises:
        DomainBertError: the file cannot be read as a checkpoint.
    """
    local = isinstance(path, str | os.PathLike) and Path(path).is_file()
    try:
        if local or not isinstance(path, str | os.PathLike):  # a local file (mapped), or an open binary file
            ckpt = torch.load(path, map_location="cpu", weights_only=not unpickle, **({"mmap": True} if local else {}))
        else:  # a URL, read as Lightning reads one (fsspec)
            import fsspec

            with fsspec.open(str(path), "rb") as fh:
                ckpt = torch.load(fh, map_location="cpu", weights_only=not unpickle)
    except (pickle.UnpicklingError, RuntimeError, OSError, EOFError, ValueError) as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise DomainBertError(f"{path}: not readable as a Lightning checkpoint of plain data ({first})") from err
    hparams = ckpt.get("hyper_parameters") if isinstance(ckpt, Mapping) else None
    return dict(hparams) if isinstance(hparams, Mapping) else {}


def _trust_settings(value: Any, where: str) -> Iterator[str]:
    """The places under ``value`` (nested mappings and lists) where ``trust_remote_code`` is set to a true value."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            if key == TRUST_KEY and item:
                yield f"{where}.{key}" if where else str(key)
            else:
                yield from _trust_settings(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from _trust_settings(item, f"{where}[{i}]")


def check_saved_trust(hparams: Mapping[str, Any], where: str, given: bool = False) -> None:
    """Raise if a checkpoint's saved hyper-parameters turn ``trust_remote_code`` on, anywhere in them.

    Args:
        hparams: the checkpoint's ``hyper_parameters``.
        where: the checkpoint, as the message names it (``--ckpt_path runs/x.ckpt``).
        given: the user set the module's own ``trust_remote_code`` (on the command line, in their config or as an
            argument of the call): theirs is used, and the saved top-level value is not read. One nested in another
            setting (an ``extra_losses`` entry's arguments) is refused all the same.

    Raises:
        DomainBertError: one line naming the setting and how the user may give it themselves.
    """
    found = [place for place in _trust_settings(hparams, "") if not (given and place == TRUST_KEY)]
    if not found:
        return
    advice = (
        "pass --model.trust_remote_code true (trust_remote_code=True) yourself for a model folder you trust"
        if found[0] == TRUST_KEY
        else "it is never rebuilt from a checkpoint"
    )
    raise DomainBertError(
        f"{where}: its saved hyper-parameters set {found[0]}: true; domainbert never takes trust_remote_code from a "
        f"checkpoint (it would run code shipped in a model folder): {advice}"
    )
