"""Two small primitives that let the ingest and the compactor share a lake table safely.

- `table_lock(table_dir)`: an exclusive flock held by the ingest while it moves a batch's
  files into the table, and by the compactor while it swaps an hour folder. Batches never
  land in an hour while that hour is being swapped, so no late batch is lost.
- `exchange(a, b)`: renameat2(RENAME_EXCHANGE), one atomic step that swaps two folders.
  A reader that lists an hour sees all of the old files or all of the new ones, never both.
"""
from __future__ import annotations

import ctypes
import fcntl
import os
from contextlib import contextmanager
from pathlib import Path

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


@contextmanager
def table_lock(table_dir: Path):
    """Exclusive lock on one lake table (a hidden file beside it, out of reach of globs)."""
    table_dir = Path(table_dir)
    table_dir.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(table_dir.parent / f".{table_dir.name}.lock", os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the flock


def exchange(a: Path, b: Path) -> None:
    """Atomically swap the folders a and b (same filesystem; Linux 3.15+, glibc 2.28+)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"cannot swap {a} and {b}: {os.strerror(err)}")
