"""An exclusive lock on a tuning output directory: one ``tune`` process at a time.

The lock is an operating-system file lock (``flock`` through the ``filelock``
package) on ``OUT/tune.lock``. The kernel releases it when its process ends in
any way, ``kill -9`` included, so a lock left by a killed process is never in
the way: the next process takes it over at once. Beside it, ``OUT/tune.lock.owner``
names the holder (pid, host, start time) so that a refused process can say who
holds the directory; the holder removes it when it releases the lock, so finding
one while acquiring means the previous holder was killed, which is reported.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from pathlib import Path
from types import TracebackType

import filelock

from gpar_bo.tuning.atomic import atomic_write_text
from gpar_bo.tuning.errors import TuneError

__all__ = ["DirectoryLock", "DirectoryLocked", "LOCK", "LOCK_OWNER"]

logger = logging.getLogger(__name__)

#: The lock file and its owner record in an output directory.
LOCK = "tune.lock"
LOCK_OWNER = "tune.lock.owner"


class DirectoryLocked(TuneError):
    """Another process holds the output directory."""


def _describe(owner: dict | None) -> str:
    if not owner:
        return "another process (it has not yet recorded its pid)"
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(owner.get("started", 0)))
    return f"pid {owner.get('pid')} on {owner.get('host')} (since {started})"


class DirectoryLock:
    """Exclusive use of ``directory`` by this process; a context manager.

    Args:
        directory: An existing output directory.
        name: The lock file's name in it (the owner record is ``name + ".owner"``);
            another name locks another output in the same directory (e.g. one file).
        user: What uses the directory, for the refusal message.

    Attributes:
        taken_over: The owner record of a killed previous holder whose lock was
            taken over, or None.
    """

    def __init__(self, directory: str | Path, name: str = LOCK,
                 user: str = "`gpar-bo tune` process") -> None:
        self.directory = Path(directory)
        self.user = user
        self._lock = filelock.FileLock(str(self.directory / name), timeout=0)
        self._owner = self.directory / f"{name}.owner"
        self.taken_over: dict | None = None

    def _read_owner(self) -> dict | None:
        try:
            return json.loads(self._owner.read_text())
        except (OSError, ValueError):  # absent, or written by a killed process mid-way
            return None

    def acquire(self) -> None:
        """Take the lock or raise :class:`DirectoryLocked` at once (no waiting)."""
        try:
            self._lock.acquire()
        except filelock.Timeout:
            raise DirectoryLocked(
                f"{self.directory} is in use by another {self.user}, "
                f"{_describe(self._read_owner())}; wait for it to finish or stop it "
                "(Ctrl-C or kill), then rerun to resume."
            ) from None
        previous = self._read_owner()
        if previous is not None:
            # A clean release removes the owner record: this one's process was killed.
            self.taken_over = previous
            logger.warning("Took over the lock of %s, left by %s, which ended without "
                           "releasing it (killed?).", self.directory, _describe(previous))
        atomic_write_text(self._owner, json.dumps(
            {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}))

    def release(self) -> None:
        """Release the lock (the owner record goes first, so it never names a
        process that no longer holds the lock while another one does)."""
        if self._lock.is_locked:
            self._owner.unlink(missing_ok=True)
            self._lock.release()

    def __enter__(self) -> DirectoryLock:
        self.acquire()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.release()
