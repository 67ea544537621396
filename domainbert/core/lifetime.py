"""A process that ends with its parent: ``prctl(PR_SET_PDEATHSIG)`` on Linux, nothing elsewhere.

A pipeline's training stage, its DDP ranks and the server it is forked from have nothing to do once the process
that started them is gone (killed, even by ``SIGKILL``, which no handler sees): left alone they would train on,
unattended, and race a rerun for the same folders. Each asks the kernel for a signal when its parent ends.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

#: ``prctl``'s option for the signal sent when the parent ends (linux/prctl.h)
PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGKILL, parent: int | None = None) -> bool:
    """Have the kernel send ``sig`` to this process when its parent ends; whether it could (Linux only).

    Args:
        sig: the signal (``SIGKILL`` by default: no handler may keep the process alive).
        parent: the pid the parent had when it started this process; when it ended already (this process was
            given to another), the signal is sent now.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if parent is not None and os.getppid() != parent:  # it died before the request: nothing will tell us
        os.kill(os.getpid(), sig)
    return True
