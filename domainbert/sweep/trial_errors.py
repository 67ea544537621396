"""What a sweep prints: each trial's fit as quiet as ``domainbert fit``, and a trial's user error without a traceback.

Optuna logs every failed trial at WARNING with the exception's traceback. A user error (a
:class:`~domainbert.errors.DomainBertError`, such as a data file that is missing or a loss that turned non-finite)
is one line, and the sweep's table repeats it in the trial's note: its record keeps the line and loses the
traceback. A bug keeps its traceback.
"""

from __future__ import annotations

import logging

from domainbert.errors import DomainBertError

#: the logger of Optuna's "Trial N failed with parameters ..." records
OPTUNA_TRIAL_LOGGER = "optuna.study._optimize"


def user_error(err: BaseException | None) -> DomainBertError | None:
    """The :class:`DomainBertError` that ``err`` is or was caused by (Lightning and jsonargparse wrap them)."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, DomainBertError):
            return err
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return None


class UserErrorsWithoutTraceback(logging.Filter):
    """Drops the traceback of a record whose exception is (or was caused by) a user error."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and user_error(record.exc_info[1]) is not None:
            record.exc_info, record.exc_text = None, None
        return True


_FILTER = UserErrorsWithoutTraceback()


def quiet_sweep() -> None:
    """Quiet the libraries as a fit does, and keep user errors of trials to their line; safe to call twice."""
    from domainbert.core.quiet import quiet_libraries

    quiet_libraries()
    logger = logging.getLogger(OPTUNA_TRIAL_LOGGER)
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
