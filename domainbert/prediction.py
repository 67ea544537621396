"""The prediction writer, under the name configs use: ``domainbert.prediction.PredictionWriter``.

It lives in :mod:`domainbert.core.prediction` (``core`` puts it on the trainer for ``predict``); this module
re-exports it so that ``trainer.callbacks`` entries and code written against ``domainbert.prediction`` keep working.
"""

from domainbert.core.prediction import FileOrder, PredictionWriter, ensure_writer, sorted_by_length

__all__ = ["FileOrder", "PredictionWriter", "ensure_writer", "sorted_by_length"]
