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
