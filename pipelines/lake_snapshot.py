"""Reads of the lake that a compaction swap cannot break: snapshots by hard link.

Why: Spark and DuckDB list a table's files when a query is planned and open them later,
by name. When the compactor swaps an hour in between (`compact.compact_hour`), the names
listed are gone from the hour folder and the read fails (Spark: FileNotFoundException;
DuckDB: IO Error). No rename order avoids it: a folder cannot show the old files to
readers that listed it before the swap and the new ones to everyone else.

A snapshot pins what a reader listed (`Snapshot.pin`). For each folder it reads, it opens the folder
once, lists it through that descriptor (one directory: the old or the new, whatever a
swap does meanwhile, so never half of each) and hard-links the files into
`lake/.snapshots/<pid>-<id>/<same path>` from that same descriptor. The compactor keeps
a swapped-out folder for `[compaction] retired_grace_minutes` (`lake/.retired/`), so a
link taken from it always finds its file; once linked, the rows stay as long as the read
takes, whatever compaction or retention do. Paths keep their `date=/hour=` folders: Spark's
partition discovery and DuckDB's hive_partitioning read a snapshot as they read the lake.

A pin holds a shared lock (`lake/.pins.lock`) while it lists and links: a
folder retired by a swap can only be reached by a pin that opened it before the swap, so
once `pins_settled` has had the lock exclusively, no reader can need the folders retired
before that moment (retention and the disk guard delete them then, grace or not).

Cost: one link per file (about 10 us); nothing is copied. Snapshots are removed when the
reader closes them; those of dead processes by the compactor's pass (`sweep`) and by
retention. Used by the jobs (JobContext, pipelines/duck.py) and both engines of `flowlake query`.
Readers outside flowlake that glob the lake themselves (Superset's views, an analyst's own
DuckDB) are not pinned: a swap during such a query fails it with a missing file, and a
rerun is exact (pipelines/lake.py: `duckdb_connect` for analysts, and Superset's lake
connection, superset/superset_config.py, rerun it).
"""
from __future__ import annotations

import fcntl
import os
import shutil
import time
from contextlib import contextmanager
from pathlib import Path

SNAPSHOTS = ".snapshots"
PINS_LOCK = ".pins.lock"


def root(lake: Path) -> Path:
    return Path(lake) / SNAPSHOTS


@contextmanager
def _pins_lock(lake: Path):
    Path(lake).mkdir(parents=True, exist_ok=True)
    fd = os.open(Path(lake) / PINS_LOCK, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        yield fd
    finally:
        os.close(fd)  # closing releases the flock


def pins_settled(lake: Path, timeout_s: float = 10.0) -> bool:
    """Wait until no pin is in progress (the pins' lock had exclusively, then let go).
    After True, no reader can reach a folder that was retired before this call. False:
    pins kept the lock busy for timeout_s (try again later)."""
    deadline = time.monotonic() + timeout_s
    with _pins_lock(lake) as fd:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.005)


def _hidden(name: str) -> bool:
    return name.startswith((".", "_"))  # what Spark skips (staging folders, markers)


class Snapshot:
    """Private, stable copies of the folders a reader reads. Use as a context manager, or
    close() it when the reads are done. Every `pin` links the folder as it is now, into a
    generation of its own (a table rewritten since, e.g. a report the same run wrote, is
    read anew; DataFrames over an earlier generation stay valid until close)."""

    def __init__(self, lake: Path):
        self.lake = Path(lake)
        self.path = root(self.lake) / f"{os.getpid()}-{os.urandom(6).hex()}"
        self._generations = 0

    def __enter__(self) -> "Snapshot":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)

    def pin(self, *parts: Path) -> tuple[Path, list[str]]:
        """Link the Parquet files below each of `parts` (folders below the lake; hidden paths
        skipped, as Spark does) into one new generation. Returns (the generation's root,
        the linked files' paths sorted): `root / part.relative_to(lake)` is the copy of a part
        (made only if it holds files)."""
        self._generations += 1
        gen = self.path / f"g{self._generations}"
        out: list[str] = []
        with _pins_lock(self.lake) as lock:
            fcntl.flock(lock, fcntl.LOCK_SH)  # retired folders stay while we may hold one open
            for part in map(Path, parts):
                try:
                    fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY)
                except (FileNotFoundError, NotADirectoryError):
                    continue
                try:
                    self._link_dir(fd, gen / part.relative_to(self.lake), out)
                finally:
                    os.close(fd)
        return gen, sorted(out)

    def files(self, part: Path) -> list[str]:
        """The pinned paths of the Parquet files below `part` (see pin)."""
        return self.pin(part)[1]

    def _link_dir(self, fd: int, dst: Path, out: list[str]) -> None:
        made = False
        for entry in os.scandir(fd):
            if _hidden(entry.name):
                continue
            if entry.is_dir(follow_symlinks=False):
                try:
                    sub = os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
                except FileNotFoundError:  # swapped or expired since listed: it was renamed, not ours
                    continue
                try:
                    self._link_dir(sub, dst / entry.name, out)
                finally:
                    os.close(sub)
            elif entry.name.endswith(".parquet"):
                if not made:
                    dst.mkdir(parents=True, exist_ok=True)
                    made = True
                try:
                    os.link(entry.name, dst / entry.name, src_dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    # Unlinked since listed: only retention (the day expired) and a replay
                    # undoing an unfinished batch remove files; a swap only renames folders.
                    continue
                out.append(str(dst / entry.name))


def snapshots(lake: Path) -> list[tuple[Path, bool]]:
    """Every reader's snapshot folder, with whether its process is still alive."""
    base = root(lake)
    out = []
    if base.is_dir():
        for d in sorted(base.iterdir()):
            pid = d.name.split("-", 1)[0]
            if pid.isdigit() and d.is_dir():
                out.append((d, Path(f"/proc/{pid}").exists()))
    return out


def sweep(lake: Path) -> int:
    """Remove snapshots whose process is gone (a reader killed before close); returns how many."""
    dead = [d for d, alive in snapshots(lake) if not alive]
    for d in dead:
        shutil.rmtree(d, ignore_errors=True)
    return len(dead)
