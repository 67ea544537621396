"""An alias kept for saved runs: ``domainbert.modules.distill.DistillationModule``.

Distillation lives in one package, :mod:`domainbert.distill` (the module is
:class:`domainbert.distill.module.DistillationModule`). Configs and checkpoints written by earlier versions
name the class by this path, so it keeps resolving here; new configs name ``domainbert.distill.module``.
"""

from domainbert.distill.module import DistillationModule

__all__ = ["DistillationModule"]
