"""The one exception type users see for bad input."""


class DomainBertError(Exception):
    """A user-facing error: bad input, a missing file, a mismatched checkpoint.

    The CLI prints its message alone, without a traceback. The message names the file, row,
    column or option at fault and what was expected.
    """
