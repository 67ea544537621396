"""Distillation in one package: :class:`~domainbert.distill.module.DistillationModule` and its pieces.

- ``module``: the LightningModule (configs of 0.1.0 name it ``domainbert.modules.distill``: see
  :mod:`domainbert.core.renames`).
- ``task_table``: what distillation does per task (one table: outputs distilled, gold targets, metrics).
- ``teacher``: loading the frozen teacher with its trained head; keeping it out of checkpoints.
- ``student``: building a smaller student from the teacher (layer selection, width) or a checkpoint.
- ``losses``: the loss terms (``domainbert.losses`` in 0.1.0's configs); ``objective``: their weighted sum, and
  ``losses`` entries into terms; ``released``: 0.1.0's loss options (``alpha``...) read as those entries.
- ``teacher_cache``: the teacher's outputs computed once and reused across epochs and runs.
"""
