"""The one exception type users see for bad input, and how to find it in a chain of exceptions."""

from __future__ import annotations

import argparse


class DomainBertError(Exception):
    """A user-facing error: bad input, a missing file, a mismatched checkpoint.

    The CLI prints its message alone, without a traceback. The message names the file, row,
    column or option at fault and what was expected.
    """


def user_error(err: BaseException | None) -> DomainBertError | None:
    """The :class:`DomainBertError` in an exception's chain (jsonargparse and Lightning may wrap it); None if none.

    An ``argparse.ArgumentError`` (jsonargparse's, for a bad option or value) becomes one on a single line.
    """
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, DomainBertError):
            return err
        if isinstance(err, argparse.ArgumentError):
            return DomainBertError(" ".join(str(err).split()) + " (`domainbert <command> --help` lists the options)")
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return None
