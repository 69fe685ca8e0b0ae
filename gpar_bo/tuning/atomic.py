"""Atomic file replacement: a reader, or a process killed at any moment, sees the
old content or the new one, never a mix or a truncated file.

The pattern (write a temporary file in the same directory, ``fsync`` it, rename it
over the target, ``fsync`` the directory) is ten lines of the standard library;
the one well-known package for it, ``atomicwrites``, is no longer maintained.
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

__all__ = ["atomic_rename", "atomic_write_bytes", "atomic_write_text"]


def _fsync_directory(directory: Path) -> None:
    # The rename itself is only durable once the directory entry is on disk.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # e.g. a platform without directory descriptors
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_text(path: str | Path, text: str, backup: str | Path | None = None) -> None:
    """Replace ``path`` by ``text`` atomically.

    Args:
        path: The file to write.
        text: Its new content.
        backup: If given and ``path`` exists, its current (complete) content is
            kept there, also atomically, before ``path`` is replaced: a last good
            copy in case ``path`` is later damaged by something else.
    """
    atomic_write_bytes(path, text.encode(), backup)


def atomic_write_bytes(path: str | Path, data: bytes, backup: str | Path | None = None) -> None:
    """Replace ``path`` by ``data`` atomically (see :func:`atomic_write_text`)."""
    path = Path(path)
    # pid and thread: two writers of one file (a job and a test thread) never share it.
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with open(temporary, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    if backup is not None and path.exists():
        backup = Path(backup)
        staged = backup.with_name(f".{backup.name}.{os.getpid()}.tmp")
        staged.unlink(missing_ok=True)
        try:
            os.link(path, staged)  # a second name for the current file: no copy
        except OSError:  # a filesystem without hard links
            shutil.copy2(path, staged)
        os.replace(staged, backup)
    os.replace(temporary, path)
    _fsync_directory(path.parent)


def atomic_rename(source: str | Path, target: str | Path) -> None:
    """Rename ``source`` over ``target`` atomically, and durably (the directory too)."""
    os.replace(source, target)
    _fsync_directory(Path(target).parent)
