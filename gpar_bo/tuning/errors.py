"""The errors ``gpar-bo tune`` reports to its user as one line (no traceback).

Each names what is wrong and, where there is one, the way out. The command line
prints the message and exits with status 2; library callers catch them by class.
"""

from __future__ import annotations

__all__ = ["JobFailed", "TuneError", "TuneSettingsError"]


class TuneError(Exception):
    """A tuning run cannot start or go on, for a reason the user can act on."""


class TuneSettingsError(TuneError, ValueError):
    """Bad settings or input (options, data, output directory, scheduler), found
    before any trial starts."""


class JobFailed(TuneError):
    """A training job raised an exception: the run stops at the first one.

    A job that raises is most likely wrong for every setting, so trying more settings
    would only repeat the error. The message is one line; the job's traceback is
    ``traceback`` (and a note of the exception, shown when it is not caught).

    Attributes:
        trial_index: The trial whose job raised.
        traceback: The job's traceback, as its progress file recorded it.
    """

    def __init__(self, message: str, trial_index: int, traceback: str) -> None:
        super().__init__(message)
        self.trial_index, self.traceback = trial_index, traceback
        self.add_note(traceback)
