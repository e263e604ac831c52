"""A DuckDB source over one lake table's current files, through the reading seam
(pipelines/lake_read.py), for tests that count what the ingest landed.

Never `read_parquet('<lake>/flows/**/*.parquet')`: a Delta table's `_delta_log/` holds
checkpoint Parquet files after `[lake] checkpoint_interval` commits (the glob then fails
with a hive partition mismatch or counts the log), and files a compaction or retention
replaced stay on disk until VACUUM (the glob counts them twice)."""
from __future__ import annotations

from pathlib import Path

from flowlake.pipelines.lake_read import lake_files


def files(lake: Path | str, table: str = "flows", partitions=None) -> list[str]:
    """The table's files of its current version (a Parquet table: its visible files)."""
    return lake_files(Path(lake), table, partitions)[1]


def source(lake: Path | str, table: str = "flows", partitions=None, hive: bool = True) -> str:
    """`read_parquet([...])` of the table's current files, for a FROM clause; an
    AssertionError names the table when it has none (a test expected rows)."""
    got = files(lake, table, partitions)
    assert got, f"lake/{table} has no files (nothing landed?)"
    listed = ", ".join("'" + f.replace("'", "''") + "'" for f in got)
    return f"read_parquet([{listed}], hive_partitioning = {str(hive).lower()}, union_by_name = true)"
