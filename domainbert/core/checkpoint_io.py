"""Checkpoints written so that a full disk or a kill never leaves a truncated file under a checkpoint's name.

:class:`AtomicCheckpointIO` is the ``domainbert fit`` default (registered by :class:`domainbert.cli.lightning_cli.
DomainBertCLI` when ``trainer.plugins`` names no other CheckpointIO). A local checkpoint is serialised into a
temporary file in its own folder, ``fsync``-ed, given the umask's mode and renamed over its final name; a full
disk becomes one line naming the checkpoint, its folder, the free space and the last good checkpoint there.
Remote paths (``s3://`` and the like) keep Lightning's own writer.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from domainbert.core.files import atomic_file, clean_tmp_files, newest_checkpoint


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
