"""The one seam every reader of the lake reads through (issue 38, docs/design/delta-lake.md).

`lake_files(cfg, table, partitions)` answers `(version, files)`: the Parquet files of the
table's `partitions` (folders below `lake/<table>`, e.g. `date=D/hour=H`) that one
consistent state of the table holds.

- A table folder with `_delta_log/` is a Delta table: its files are those of one version
  (`delta.version_files`), taken the first time the reader reads the table and kept for
  every later read of it (a job run, a query: one version per table). Nothing is linked
  or copied: files a later version removed stay on disk for the VACUUM retention, longer
  than a read.
- Otherwise (today's Parquet layout) the folders are pinned by hard links
  (`lake_snapshot.Snapshot.pin`), each call anew, as before; the version is None.

`LakeReader(lake, as_of=...)` reads every Delta table as of a version (int) or a time (the
newest version committed at or before it): `flowlake query --as-of`. A Parquet table then
raises delta.AsOfError (it has no versions).

A reader that reads several times keeps a `LakeReader` and closes it when its reads are
done (the pins' links go); `lake_files(..., reader=None)` is for one-off reads that take
no pins (Delta tables only need none; a Parquet table is then listed, not pinned).

`deltalake` is imported only when a table is Delta: `flowlake query`'s fast path reading a
Parquet lake loads nothing more than before (tests/jobs/test_query_fast.py's probe).
"""
from __future__ import annotations

from pathlib import Path

DELTA_LOG = "_delta_log"


def is_delta(table_dir: Path | str) -> bool:
    """Whether the folder is a Delta table (has a `_delta_log/`)."""
    return (Path(table_dir) / DELTA_LOG).is_dir()


def _table_dir(lake: Path, table: str) -> Path:
    return Path(lake) / table


def _under(part: Path, table_dir: Path) -> str:
    """`part` as a path prefix below the table folder ("" for the table itself)."""
    try:
        rel = Path(part).relative_to(table_dir)
    except ValueError:  # one of them through a symlink (e.g. a path the Delta log resolved)
        rel = Path(part).resolve().relative_to(Path(table_dir).resolve())
    return "" if str(rel) == "." else str(rel).rstrip("/") + "/"


class LakeReader:
    """What one reader (a job run, a query) reads of the lake: each Delta table at one
    version, Parquet folders pinned. Close it (or use it as a context manager) when the
    reads are done."""

    def __init__(self, lake: Path | str, as_of=None):
        self.lake = Path(lake)
        # `flowlake query --as-of`: a version (int) or a time (aware datetime) every Delta
        # table is read as of; a Parquet table then cannot be read (it has no versions)
        self.as_of = as_of
        self.versions: dict[str, int] = {}  # table -> the version read (Delta tables)
        self._delta: dict[str, tuple[int, list[str]]] = {}  # table -> (version, files below the table)
        self._snapshot = None
        self.roots: dict[str, Path] = {}  # table -> the folder its last read's files sit below

    def __enter__(self) -> LakeReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._snapshot is not None:
            self._snapshot.close()

    def files(self, table: str, partitions=None) -> tuple[int | None, list[str]]:
        """(version, sorted paths) of the Parquet files below `partitions` of lake/<table>
        (folders below the table; None: the whole table). Delta: the version this reader
        read the table at first; Parquet: pinned now, version None. `base(table)` is then
        the table's root for the paths (Spark's basePath)."""
        table_dir = _table_dir(self.lake, table)
        parts = [table_dir] if partitions is None else [Path(p) for p in partitions]
        if is_delta(table_dir):
            version, files = self._version(table, table_dir)
            prefixes = tuple(str(table_dir) + "/" + _under(p, table_dir) for p in parts)
            self.roots[table] = table_dir
            return version, sorted(f for f in files if f.startswith(prefixes))
        if self.as_of is not None:
            from flowlake.base import delta  # noqa: PLC0415  (only for the error)

            raise delta.AsOfError(f"lake/{table} is a Parquet lake, not a Delta table: it has no version to read "
                                  f"as of {_as_of_text(self.as_of)}: run `flowlake lake migrate`")
        if self._snapshot is None:
            from .lake_snapshot import Snapshot  # noqa: PLC0415  (Parquet tables only)

            self._snapshot = Snapshot(self.lake)
        gen, files = self._snapshot.pin(*parts)
        self.roots[table] = gen / table
        return None, files

    def base(self, table: str) -> Path:
        """The folder the last `files(table, ...)`'s paths sit below as the table's root
        (lake/<table> for a Delta table, its pinned copy for a Parquet one)."""
        return self.roots.get(table, _table_dir(self.lake, table))

    def _version(self, table: str, table_dir: Path) -> tuple[int, list[str]]:
        if table not in self._delta:
            from flowlake.base import delta  # noqa: PLC0415  (start-up: deltalake, for Delta tables only)

            wanted = None if self.as_of is None else delta.resolve_as_of(table_dir, self.as_of)
            version, files = delta.version_files(table_dir, wanted)
            root = str(table_dir.resolve())
            # the log's paths are the resolved table folder's; readers name the lake's own path
            files = [str(table_dir) + f[len(root):] if f.startswith(root + "/") else f for f in files]
            self._delta[table] = (version, files)
            self.versions[table] = version
        return self._delta[table]


def _as_of_text(as_of) -> str:
    return as_of.isoformat() if hasattr(as_of, "isoformat") else str(as_of)


def lake_files(cfg, table: str, partitions=None, reader: LakeReader | None = None) -> tuple[int | None, list[str]]:
    """(version, files) of lake/<table>'s `partitions` (see LakeReader.files). With
    `reader`, read through it (one version per table, pins until it closes); without,
    a Delta table's newest version, or a Parquet table's files listed now (not pinned)."""
    if reader is not None:
        return reader.files(table, partitions)
    lake = Path(getattr(cfg, "lake", cfg))
    table_dir = _table_dir(lake, table)
    if is_delta(table_dir):
        with LakeReader(lake) as one:
            return one.files(table, partitions)
    parts = [table_dir] if partitions is None else [Path(p) for p in partitions]
    out: list[str] = []
    for part in parts:
        if part.is_dir():
            out += [str(p) for p in part.rglob("*.parquet")
                    if not any(s.startswith((".", "_")) for s in p.relative_to(part).parts)]
    return None, sorted(out)
