"""The callbacks, under the name configs use: ``domainbert.callbacks.<Name>``.

They live in :mod:`domainbert.core.callbacks` (``core`` builds the trainer with them); this module re-exports
them so that ``trainer.callbacks`` entries and code written against ``domainbert.callbacks`` keep working.
"""

from domainbert.core.callbacks import (
    EarlyStopping,
    HFExport,
    RunReport,
    TrainingGuard,
    format_metrics,
    nonfinite_weights,
    progress_bar,
    remove_if_only_configs,
)

__all__ = [
    "EarlyStopping",
    "HFExport",
    "RunReport",
    "TrainingGuard",
    "format_metrics",
    "nonfinite_weights",
    "progress_bar",
    "remove_if_only_configs",
]
