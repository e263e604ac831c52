"""Hour close for the flow lake: compaction of `lake/flows/date=D/hour=H/`.

The ingest lands every micro-batch as its own small files (`b<batch id>-<n>.zstd.parquet`),
dozens to hundreds per hour. Once an hour is closed (its end and its newest file are
`[compaction] settle_minutes` old) its files are rewritten as a few large files
(`c<stamp>-<n>.parquet`, about `target_file_mb` each), sorted by `[compaction] sort` so
that neighbouring rows look alike (they compress well) and row groups cover narrow
ranges of exporter and time (readers skip the rest).

`lake/flows` is a Delta table (flowlake/base/delta.py). An hour's files are those of one
table version; the sorted files are written into the hour's folder itself (uncommitted,
no reader sees them) and committed as the replacement of exactly the files of the version
read (`delta.commit_partition_files(..., read_version=v)`): readers see the old version or
the new, never both; the replaced files stay on disk for the VACUUM retention
(`[compaction] retired_grace_minutes`, in whole hours) for readers of older versions.

Exactly once with the ingest: a batch is in the table once its commit is (its transaction
makes a replay a no-op), so every file of the version read is rewritten. A batch committed
to the hour after the version read stays beside the compacted files (the commit removes
only the files it read) and reopens the hour for the next pass. Two compactions of one
hour: the second commit is refused (it read files the first removed) and its files,
listed by no version, go at the next full VACUUM.
"""
from __future__ import annotations

import datetime as dt
import logging
import re
import time
from dataclasses import dataclass
from pathlib import Path

from flowlake.base import delta

log = logging.getLogger("flowlake.compact")

COMPACT_FILE = re.compile(r"^c\d{13}-\d{3}\.parquet$")
HOUR_DIR = re.compile(r"^date=(\d{4}-\d{2}-\d{2})$"), re.compile(r"^hour=(\d{1,2})$")
TIMESTAMPS = ("time_start", "time_end")
# Encodings measured on the demo day (bench/storage.py): the sort column's neighbours differ
# by small steps, so delta encoding (time_start ~1.3 bytes/flow, time_end 1.7, file_seq
# 0.9 against 2+ with a dictionary); addresses, ASes, interfaces and flags repeat within an
# hour: dictionaries, the address dictionaries sorted (neighbouring strings share prefixes:
# -0.4 bytes/flow); ports, packets, bytes and ASes plain (a dictionary of many distinct
# numbers costs more than it saves: -1.5 bytes/flow). Sorting by input interface and
# protocol first groups flows of one direction and kind (ports, sizes alike: -0.4). BYTE_STREAM_SPLIT would save 0.6 more on the numbers, but
# DuckDB 1.4 reads it for floating point columns only.
DELTA_COLUMNS = ("time_start", "time_end", "file_seq")
PLAIN_COLUMNS = ("bytes", "packets", "src_port", "dst_port", "src_as", "dst_as")
SORTED_DICTIONARIES = ("src_addr", "dst_addr")


@dataclass(frozen=True)
class Settings:
    settle_s: float
    target_bytes: int
    row_group_rows: int
    zstd_level: int
    sort: tuple[str, ...]
    retired_grace_s: float = 900.0

    @classmethod
    def from_config(cls, cfg) -> "Settings":
        c = cfg.compaction
        if c.target_file_mb <= 0 or c.row_group_rows <= 0:
            raise ValueError("config [compaction] target_file_mb and row_group_rows must be positive")
        if not 1 <= c.zstd_level <= 22:
            raise ValueError(f"config [compaction] zstd_level = {c.zstd_level}: must be 1..22")
        if c.retired_grace_minutes < 0:
            raise ValueError("config [compaction] retired_grace_minutes must be >= 0")
        return cls(c.settle_minutes * 60.0, int(c.target_file_mb * 1024 * 1024), int(c.row_group_rows),
                   int(c.zstd_level), tuple(c.sort), c.retired_grace_minutes * 60.0)


PARTITION_BY = ["date", "hour"]


@dataclass
class Hour:
    date: str
    hour: int
    path: Path
    version: int | None = None  # the table version its files were read from
    paths: list[Path] | None = None  # those files

    @property
    def end(self) -> float:
        d = dt.datetime.fromisoformat(self.date).replace(tzinfo=dt.timezone.utc)
        return (d + dt.timedelta(hours=self.hour + 1)).timestamp()

    def files(self) -> list[Path]:
        return sorted(self.paths or [])

    def needs_compaction(self) -> bool:
        return any(not COMPACT_FILE.match(p.name) for p in self.files())

    def closed(self, now: float, settle_s: float) -> bool:
        newest = max((p.stat().st_mtime for p in self.files()), default=0.0)
        return now - self.end >= settle_s and now - newest >= settle_s


def hours(table_dir: Path, date: str | None = None) -> list[Hour]:
    """The table's hours holding files in its newest version (one version for all)."""
    if not (Path(table_dir) / "_delta_log").is_dir():
        return []
    version, files = delta.version_files(table_dir, None, [("date", "=", date)] if date else None)
    by: dict[tuple[str, int], list[Path]] = {}
    for f in map(Path, files):
        m, h = HOUR_DIR[0].match(f.parent.parent.name), HOUR_DIR[1].match(f.parent.name)
        if m and h:
            by.setdefault((m.group(1), int(h.group(1))), []).append(f)
    # one Hour per partition (an older lake's hour=05 and the ingest's hour=5 are one)
    return [Hour(d, h, sorted(paths)[0].parent, version, paths) for (d, h), paths in sorted(by.items())]


def current(table_dir: Path, hour: Hour) -> Hour:
    """The hour with its files at the table's newest version."""
    version, files = delta.version_files(table_dir, None, [("date", "=", hour.date), ("hour", "=", str(hour.hour))])
    # every file of the partition: the commit replaces them all (hour=5 and an older
    # lake's hour=05 are one partition)
    return Hour(hour.date, hour.hour, hour.path, version, [Path(f) for f in files])


# ---- writing ---------------------------------------------------------------------------
def _sql_list(paths) -> str:
    return "[" + ", ".join("'" + str(p).replace("'", "''") + "'" for p in paths) + "]"


def sorted_reader(con, files: list[Path], sort: tuple[str, ...], batch_rows: int):
    """The rows of `files` in `sort` order (columns present in the files only), as Arrow
    batches; timestamps as milliseconds (the flow record's unit: a delta-encoded ms
    column costs ten bits less per value than microseconds)."""
    src = f"read_parquet({_sql_list(files)}, union_by_name = true, hive_partitioning = false)"
    cols = [r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {src}").fetchall()]
    select = ", ".join(f'epoch_ms("{c}") AS "{c}"' if c in TIMESTAMPS else f'"{c}"' for c in cols)
    order = ", ".join(f'"{c}"' for c in sort if c in cols) or "1"
    return con.execute(f"SELECT {select} FROM {src} ORDER BY {order}").fetch_record_batch(batch_rows)


def write_sorted(reader, out_dir: Path, stamp: int, s: Settings, rows_per_file: int) -> list[Path]:
    """Write the batches as files c<stamp>-NNN.parquet of `rows_per_file` rows (whole row
    groups of s.row_group_rows), zstd at s.zstd_level, encodings as measured above."""
    import pyarrow as pa  # noqa: PLC0415  (start-up: pyarrow)
    import pyarrow.parquet as pq  # noqa: PLC0415  (start-up: pyarrow)

    out_dir.mkdir(parents=True, exist_ok=True)
    target = pa.schema([pa.field(f.name, pa.timestamp("ms", tz="UTC"), f.nullable) if f.name in TIMESTAMPS else f
                        for f in reader.schema])
    # The file's schema: sorted-dictionary columns as dictionaries (Parquet stores them as
    # plain strings with that dictionary page; no Arrow schema is stored to say otherwise).
    file_schema = pa.schema([f.with_type(pa.dictionary(pa.int32(), pa.string()))
                             if f.name in SORTED_DICTIONARIES and pa.types.is_string(f.type) else f for f in target])
    encoding = {c: "DELTA_BINARY_PACKED" for c in DELTA_COLUMNS if c in target.names}
    options = dict(compression="zstd", compression_level=s.zstd_level,
                   use_dictionary=[c for c in target.names if c not in encoding and c not in PLAIN_COLUMNS],
                   column_encoding=encoding,
                   dictionary_pagesize_limit=4 << 20, data_page_size=1 << 20, store_schema=False)
    groups_per_file = max(1, rows_per_file // s.row_group_rows)
    written: list[Path] = []
    writer, groups = None, 0
    buf, buf_rows = [], 0

    def emit(table):
        nonlocal writer, groups
        if writer is None:
            written.append(out_dir / f"c{stamp:013d}-{len(written):03d}.parquet")
            writer = pq.ParquetWriter(written[-1], file_schema, **options)
        writer.write_table(sorted_dictionaries(table.cast(target)), row_group_size=table.num_rows)
        groups += 1
        if groups >= groups_per_file:
            writer.close()
            writer, groups = None, 0

    for batch in reader:
        buf.append(batch)
        buf_rows += batch.num_rows
        while buf_rows >= s.row_group_rows:
            table = pa.Table.from_batches(buf, schema=reader.schema)
            emit(table.slice(0, s.row_group_rows))
            rest = table.slice(s.row_group_rows)
            buf, buf_rows = rest.to_batches(), rest.num_rows
    if buf_rows:
        emit(pa.Table.from_batches(buf, schema=reader.schema))
    if writer is not None:
        writer.close()
    return written


def sorted_dictionaries(table):
    """String columns of SORTED_DICTIONARIES as dictionary arrays with a sorted dictionary:
    Parquet keeps the Arrow dictionary as the column chunk's dictionary page."""
    import numpy as np  # noqa: PLC0415  (start-up: numpy)
    import pyarrow as pa  # noqa: PLC0415  (start-up: pyarrow)

    for name in SORTED_DICTIONARIES:
        i = table.schema.get_field_index(name)
        if i < 0 or not pa.types.is_string(table.schema.field(i).type):
            continue
        col = table.column(i).combine_chunks()
        if col.null_count:  # not in a valid lake (addresses are required): encode as they come
            arr = col.dictionary_encode()
        else:
            uniq, idx = np.unique(np.array(col.to_pylist(), dtype=object), return_inverse=True)
            arr = pa.DictionaryArray.from_arrays(pa.array(idx.astype(np.int32)), pa.array(uniq.tolist(), pa.string()))
        table = table.set_column(i, table.schema.field(i).with_type(arr.type), arr)
    return table


def checksum(con, files: list[Path]) -> tuple:
    """Rows and sums of the counters, read back by DuckDB (also proves DuckDB reads them)."""
    src = f"read_parquet({_sql_list(files)}, union_by_name = true, hive_partitioning = false)"
    return con.execute(f"SELECT count(*), sum(bytes), sum(packets), sum(file_seq) FROM {src}").fetchone()


# ---- one hour --------------------------------------------------------------------------
def compact_hour(cfg, table_dir: Path, hour: Hour, s: Settings, con=None, force: bool = False) -> dict | None:
    """Rewrite the hour's files of the version it was read at as a few sorted files and
    commit them as their replacement. Returns what was done, or None when the hour holds
    nothing to rewrite. force: rewrite an hour already compacted (after changing
    [compaction] settings). A commit to the hour since the version read (a late batch)
    stays beside; a concurrent compaction of the hour makes this one fail, nothing lost.
    The hour's files are read anew at the table's newest version (an earlier hour of the
    same pass committed since `hour` was listed)."""
    hour = current(table_dir, hour)
    rewrite = hour.files()
    if not rewrite or (not force and all(COMPACT_FILE.match(p.name) for p in rewrite)):
        return None
    t0 = time.monotonic()
    import duckdb  # noqa: PLC0415  (start-up: duckdb)

    con = con or duckdb.connect(config={"threads": 1, "memory_limit": "1GB"})
    before = checksum(con, rewrite)
    rows_before = before[0]
    bytes_before = sum(p.stat().st_size for p in rewrite)
    # Sorted and recompressed, the rows take at most what they took before: files of
    # target size hold at least this many.
    rows_per_file = max(s.row_group_rows, int(s.target_bytes / max(1.0, bytes_before / max(1, rows_before))))
    stamp = int(time.time() * 1000)
    written: list[Path] = []
    try:
        written = write_sorted(sorted_reader(con, rewrite, s.sort, 65536), hour.path, stamp, s, rows_per_file)
        after = checksum(con, written)
        if after != before:  # never commit a file set that lost or gained rows
            raise RuntimeError(f"{hour.path}: compaction read back {after} (rows, bytes, packets, file_seq) "
                               f"from {before}; nothing committed")
        import deltalake  # noqa: PLC0415  (start-up: deltalake)

        schema = deltalake.DeltaTable(str(table_dir), version=hour.version).schema()
        delta.commit_partition_files(table_dir, written, {"date": hour.date, "hour": hour.hour}, schema,
                                     PARTITION_BY, read_version=hour.version, folder=hour.path)
    except BaseException:
        for p in written:  # listed by no version: nobody reads them
            p.unlink(missing_ok=True)
        raise
    return {"date": hour.date, "hour": hour.hour, "rows": after[0], "version": hour.version,
            "files_before": len(rewrite), "files_after": len(written), "carried": 0,
            "bytes_before": bytes_before, "bytes_after": sum(p.stat().st_size for p in written),
            "seconds": round(time.monotonic() - t0, 2), "at": time.time()}
