"""Checked before any trial runs: the fit parses with every value of the space, on one device, on data that exists.

A mistake found here costs a second; found by the trials, it would cost one failed fit each.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from domainbert.errors import DomainBertError
from domainbert.sweep.space import SweepSpec, overrides, resolve_paths

if TYPE_CHECKING:
    from jsonargparse import Namespace


def check_fit(fit_args: Sequence[str], spec: SweepSpec) -> None:
    """Parse the fit arguments, resolve the space's paths in them, and try every bound and choice.

    Fills each ``param.target`` of ``spec.params`` (see :func:`~domainbert.sweep.space.resolve_paths`).

    Args:
        fit_args: ``--config a.yaml ... --key value``, shared by every trial.
        spec: the sweep file.

    Raises:
        DomainBertError: for a config that does not parse, a path it does not have, a value it rejects, a config
            that asks for several devices, or a training or validation file that does not exist.
    """
    from domainbert.sweep.trial import parse_fit  # imports Lightning: not needed for --help

    _, cfg = parse_fit(fit_args)
    resolve_paths(spec.params, cfg.keys(), source=spec.source)
    examples = {p.path: p.examples() for p in spec.params}
    for i in range(max(len(v) for v in examples.values())):  # every bound and choice must type-check
        values = {k: v[min(i, len(v) - 1)] for k, v in examples.items()}
        parse_fit([*fit_args, *overrides(values, spec.params)])
    check_one_device(cfg)
    check_data_paths(cfg, {p.target for p in spec.params})


#: the data splits a fit reads (``test`` and ``predict`` are read by commands a sweep never runs)
FIT_SPLITS = ("train", "val")


def check_data_paths(cfg: Namespace, swept: set[str]) -> None:
    """Refuse a training or validation path that matches no file, before the first trial fails on it.

    A relative path is read from the working folder, as the trials will read it; a swept data path is left to
    the trials.

    Raises:
        DomainBertError: ``--data.<split> <path>: no such file or folder`` (the readers' own message).
    """
    from domainbert.data.readers import expand

    for split in FIT_SPLITS:
        key = f"data.init_args.{split}"
        value = cfg.get(key) if key in cfg else None
        if value in (None, "") or key in swept or not isinstance(value, (str, list, tuple)):
            continue
        try:
            expand(value)
        except DomainBertError as err:
            raise DomainBertError(f"--data.{split}: {err} (read from {Path.cwd()}); every trial would fail") from None


def check_one_device(cfg: Namespace) -> None:
    """Refuse fit configs whose trials would start several processes (DDP and the like).

    Lightning's launcher re-runs the command line for every extra rank, which would start extra sweep workers
    rather than ranks of the trial. Trials therefore run on one device each; ``--n_jobs`` runs them side by side.

    Raises:
        DomainBertError: naming the options to change.
    """
    devices, strategy = cfg.get("trainer.devices", "auto"), str(cfg.get("trainer.strategy", "auto") or "auto")
    nodes = cfg.get("trainer.num_nodes", 1) or 1
    if isinstance(devices, str) and devices.strip() not in ("auto", "-1"):
        devices = [d for d in devices.split(",") if d.strip()] if "," in devices else int(devices)
    if devices in ("auto", -1, "-1"):
        import torch

        on_gpu = str(cfg.get("trainer.accelerator", "auto")) in ("auto", "gpu", "cuda") and torch.cuda.is_available()
        devices = torch.cuda.device_count() if on_gpu else 1
    count = len(devices) if isinstance(devices, (list, tuple)) else int(devices)
    if count > 1 or nodes > 1 or any(k in strategy.lower() for k in ("ddp", "fsdp", "deepspeed")):
        raise DomainBertError(
            f"sweep trials run on one device each, but the fit config asks for devices={cfg.get('trainer.devices')} "
            f"num_nodes={nodes} strategy={strategy}; add --trainer.devices 1 --trainer.strategy auto "
            "(and --n_jobs N to run N trials side by side)"
        )
