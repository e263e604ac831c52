"""Hour close for the flow lake: compaction of `lake/flows/date=D/hour=H/`.

The ingest lands every micro-batch as its own small files (`b<batch id>-<n>.zstd.parquet`),
dozens to hundreds per hour. Once an hour is closed (its end and its newest file are
`[compaction] settle_minutes` old) its files are rewritten as a few large files
(`c<stamp>-<n>.parquet`, about `target_file_mb` each), sorted by `[compaction] sort` so
that neighbouring rows look alike (they compress well) and row groups cover narrow
ranges of exporter and time (readers skip the rest).

The swap is atomic for every reader that lists the folder (DuckDB, Superset's views,
Spark): the new files are written into a hidden folder, then one renameat2 exchange
puts that folder in the hour's place. A listing sees the old files or the new ones,
never both and never neither. The swapped-out folder is not deleted but retired
(`lake/.retired/`) for `[compaction] retired_grace_minutes`: a reader that listed the
hour just before the swap takes its snapshot from it (`lake_snapshot`), so reads that
span a swap never fail and never count a row twice or miss one.

Exactly once with the ingest:
- only files of batches with a done-marker are rewritten. A batch that died mid-move (a
  `.pending` marker, no done-marker) is undone by its replay, which deletes the paths it
  had placed: such files are carried over as they are (hard links, same names), so the
  replay still finds and removes them and no row is written twice;
- a replayed batch that was done is skipped by its done-marker, which compaction never
  touches, so compacted rows are never written again;
- a batch arriving late for a compacted hour lands beside the compacted files (the ingest
  and the swap share a lock, `lake_lock.table_lock`); the hour is then compacted again.
"""
from __future__ import annotations

import datetime as dt
import logging
import os
import re
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from . import lake_lock, lake_snapshot

log = logging.getLogger("flowlake.compact")

BATCH_FILE = re.compile(r"^b(\d+)-\d+\.[\w.]*parquet$")
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


@dataclass
class Hour:
    date: str
    hour: int
    path: Path

    @property
    def end(self) -> float:
        d = dt.datetime.fromisoformat(self.date).replace(tzinfo=dt.timezone.utc)
        return (d + dt.timedelta(hours=self.hour + 1)).timestamp()

    def files(self) -> list[Path]:
        return sorted(p for p in self.path.iterdir() if p.name.endswith(".parquet") and p.is_file())

    def needs_compaction(self) -> bool:
        return any(not COMPACT_FILE.match(p.name) for p in self.files())

    def closed(self, now: float, settle_s: float) -> bool:
        newest = max((p.stat().st_mtime for p in self.files()), default=0.0)
        return now - self.end >= settle_s and now - newest >= settle_s


def hours(table_dir: Path, date: str | None = None) -> list[Hour]:
    out = []
    if not table_dir.exists():
        return out
    for ddir in sorted(table_dir.iterdir()):
        m = HOUR_DIR[0].match(ddir.name)
        if not m or not ddir.is_dir() or (date and m.group(1) != date):
            continue
        for hdir in sorted(ddir.iterdir()):
            h = HOUR_DIR[1].match(hdir.name)
            if h and hdir.is_dir():
                out.append(Hour(m.group(1), int(h.group(1)), hdir))
    return out


def split_files(files: list[Path], done) -> tuple[list[Path], list[Path]]:
    """(files to rewrite, files to carry over as they are). `done(batch_id)` says whether
    a batch's done-marker exists; files of unknown names are never rewritten."""
    rewrite, carry = [], []
    for p in files:
        m = BATCH_FILE.match(p.name)
        if COMPACT_FILE.match(p.name) or (m and done(int(m.group(1)))):
            rewrite.append(p)
        else:
            carry.append(p)
    return rewrite, carry


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


def written_now(hour: "Hour") -> list[Path]:
    return [p for p in hour.files() if COMPACT_FILE.match(p.name)]


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
def staging_root(lake: Path, table: str) -> Path:
    return lake / ".compact" / table


def retired_root(lake: Path, table: str) -> Path:
    return lake / ".retired" / table


def retire(lake: Path, table: str, old: Path, hour: Hour) -> Path:
    """Move a swapped-out hour folder aside (named by when it was retired), for readers
    that listed it before the swap to take their snapshot from."""
    dest = retired_root(lake, table) / f"{int(time.time() * 1000):013d}-{hour.date}-{hour.hour:02d}-{uuid.uuid4().hex[:6]}"
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.rename(old, dest)
    return dest


def retired_folders(lake: Path) -> list[tuple[Path, float]]:
    """Every swapped-out folder under lake/.retired (all tables), with when it was retired."""
    out = []
    base = Path(lake) / ".retired"
    for table in sorted(base.iterdir()) if base.is_dir() else ():
        for d in sorted(table.iterdir()) if table.is_dir() else ():
            stamp = d.name.split("-", 1)[0]
            if stamp.isdigit():
                out.append((d, int(stamp) / 1000.0))
    return out


def expire_retired(lake: Path, table: str, grace_s: float, now: float | None = None) -> dict:
    """Delete retired folders older than the grace (the bound), once no pin in progress can
    still reach them (lake_snapshot.pins_settled); what is left, for status."""
    now = time.time() if now is None else now
    base = retired_root(lake, table)
    out = {"removed": 0, "folders": 0, "bytes": 0}
    found = [(d, at) for d, at in retired_folders(lake) if d.parent == base]
    old = [d for d, at in found if now - at >= grace_s]
    if old and not lake_snapshot.pins_settled(lake):
        old = []  # readers are pinning right now: next pass
    for d in old:
        shutil.rmtree(d, ignore_errors=True)
        out["removed"] += 1
    for d, _ in found:
        if d not in old:
            out["folders"] += 1
            out["bytes"] += sum(p.stat().st_size for p in d.iterdir() if p.is_file())
    return out


def compact_hour(cfg, table_dir: Path, hour: Hour, done, s: Settings, con=None, force: bool = False) -> dict | None:
    """Rewrite one hour's finished batches as a few sorted files and swap them in.
    Returns what was done, or None when the hour holds nothing to rewrite. force: rewrite
    an hour already compacted (after changing [compaction] settings)."""
    files = hour.files()
    rewrite, _ = split_files(files, done)
    if not rewrite or (not force and all(COMPACT_FILE.match(p.name) for p in rewrite)):
        return None
    t0 = time.monotonic()
    import duckdb  # noqa: PLC0415  (start-up: duckdb)

    con = con or duckdb.connect(config={"threads": 1, "memory_limit": "1GB"})
    stage = staging_root(cfg.lake, table_dir.name) / f"{hour.date}-{hour.hour:02d}-{uuid.uuid4().hex[:8]}"
    try:
        before = checksum(con, rewrite)
        rows_before = before[0]
        bytes_before = sum(p.stat().st_size for p in rewrite)
        # Sorted and recompressed, the rows take at most what they took before: files of
        # target size hold at least this many.
        rows_per_file = max(s.row_group_rows, int(s.target_bytes / max(1.0, bytes_before / max(1, rows_before))))
        stamp = int(time.time() * 1000)
        written = write_sorted(sorted_reader(con, rewrite, s.sort, 65536), stage, stamp, s, rows_per_file)
        after = checksum(con, written)
        rows_after = after[0]
        if after != before:  # never swap in a file set that lost or gained rows
            raise RuntimeError(f"{hour.path}: compaction read back {after} (rows, bytes, packets, file_seq) "
                               f"from {before}; nothing swapped")
        with lake_lock.table_lock(table_dir):
            now = {p.name: p for p in hour.files()}
            gone = [p.name for p in rewrite if p.name not in now]
            if gone:  # only retention removes finished files: leave the hour to it
                raise RuntimeError(f"{hour.path}: {len(gone)} files vanished during compaction ({gone[0]}); nothing swapped")
            consumed = {p.name for p in rewrite}
            carried = [p for name, p in now.items() if name not in consumed]
            for p in carried:  # unfinished or late batches stay as they are, under their names
                os.link(p, stage / p.name)
            lake_lock.exchange(stage, hour.path)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    # The old files: kept aside for the grace, then expire_retired deletes them.
    retire(cfg.lake, table_dir.name, stage, hour)
    out = {"date": hour.date, "hour": hour.hour, "rows": rows_after,
           "files_before": len(rewrite), "files_after": len(written), "carried": len(carried),
           "bytes_before": bytes_before, "bytes_after": sum(p.stat().st_size for p in written_now(hour)),
           "seconds": round(time.monotonic() - t0, 2), "at": time.time()}
    return out
