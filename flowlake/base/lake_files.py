"""Atomic partition replacement for every writer of the lake (the jobs' reports, the SNMP
poller's counters): a date partition is written to a staging folder beside the table and
swapped in by rename, so readers see the old partition or the new one, whole."""
from __future__ import annotations

import datetime as dt
import logging
import os
import shutil
import uuid
from pathlib import Path

log = logging.getLogger("flowlake.lake_files")


def replace_partition(base: Path, date: dt.date, produce) -> int:
    """produce(staging folder) writes the files and returns the row count; the folder
    then replaces base/date=<date>/ by rename (readers see the old or the new, whole)."""
    base.mkdir(parents=True, exist_ok=True)
    # Staging and retired folders sit beside the table, out of reach of table/** globs.
    side = base.with_name(f".{base.name}.staging")
    side.mkdir(parents=True, exist_ok=True)
    staging = side / f"new-{date.isoformat()}-{uuid.uuid4().hex[:8]}"
    try:
        rows = produce(staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    final = base / f"date={date.isoformat()}"
    old = side / f"old-{date.isoformat()}-{uuid.uuid4().hex[:8]}"
    if final.exists():
        os.rename(final, old)
    os.rename(staging, final)
    shutil.rmtree(old, ignore_errors=True)
    log.info("wrote %s rows to %s", rows, final)
    return rows


def merge_old_days(base: Path, schema, sort_by: list[str], today: dt.date) -> list[str]:
    """Each date=D partition of `base` before yesterday that holds several Parquet files
    becomes one file, rows sorted by `sort_by` (swapped whole by replace_partition). A
    writer appending a file per poll or flush (SNMP poller, sFlow tap) would otherwise leave
    ~1,440 files a day. Yesterday is left alone: its writer may still add its last interval
    after midnight; a day already merged holds one file. Returns the days merged."""
    import pyarrow as pa  # noqa: PLC0415  (start-up: pyarrow, for `flowlake status`)
    import pyarrow.parquet as pq  # noqa: PLC0415  (start-up: pyarrow)

    done = []
    for part in sorted(base.glob("date=*")) if base.is_dir() else []:
        try:
            day = dt.date.fromisoformat(part.name.split("=", 1)[1])
        except ValueError:
            continue
        files = sorted(p for p in part.glob("*.parquet") if not p.name.startswith("."))
        if day >= today - dt.timedelta(days=1) or len(files) < 2:
            continue
        table = pa.concat_tables(pq.read_table(f, schema=schema) for f in files)
        table = table.sort_by([(k, "ascending") for k in sort_by])

        def produce(staging, table=table):
            staging.mkdir(parents=True)
            pq.write_table(table, staging / "merged.parquet", compression="zstd")
            return table.num_rows

        replace_partition(base, day, produce)
        done.append(day.isoformat())
    return done
