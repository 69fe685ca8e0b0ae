"""The errors ``gpar-bo tune`` reports to its user as one line (no traceback).

Each names what is wrong and, where there is one, the way out. The command line
prints the message and exits with status 2; library callers catch them by class.
"""

from __future__ import annotations

__all__ = ["TuneError", "TuneSettingsError"]


class TuneError(Exception):
    """A tuning run cannot start or go on, for a reason the user can act on."""


class TuneSettingsError(TuneError, ValueError):
    """Bad settings or input (options, data, output directory, scheduler), found
    before any trial starts."""
