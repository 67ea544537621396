"""Distillation pieces used by :class:`domainbert.modules.distill.DistillationModule`.

- ``student``: building a smaller student from the teacher (layer selection, width).
- ``teacher_cache``: the teacher's outputs computed once and reused across epochs and runs.
"""
