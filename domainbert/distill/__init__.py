"""Distillation pieces used by :class:`domainbert.modules.distill.DistillationModule`.

- ``tasks``: what distillation does per task (one table: outputs distilled, gold targets, metrics).
- ``teacher``: loading the frozen teacher with its trained head; keeping it out of checkpoints.
- ``student``: building a smaller student from the teacher (layer selection, width) or a checkpoint.
- ``losses``: the loss terms (``domainbert.losses`` re-exports them); ``objective``: their weighted sum.
- ``teacher_cache``: the teacher's outputs computed once and reused across epochs and runs.
"""
