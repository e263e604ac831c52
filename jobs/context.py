"""What a job gets: the Spark session, the config, the date, and lake I/O.

Writes are idempotent and atomic for readers: a table's date partition is written to
a staging folder and swapped in by rename, so a rerun replaces exactly that date and
DuckDB/Superset never see a half-written partition.
"""
from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, field
from pathlib import Path

from flowlake.base.lake_files import replace_partition  # noqa: F401  (jobs write through ctx.write)
from flowlake.pipelines import lake_check
from flowlake.pipelines.lake_read import LakeReader
from flowlake.schemas import FLOWS_TABLE, registry

log = logging.getLogger(__name__)


@dataclass
class JobContext:
    spark: object
    cfg: object
    date: dt.date
    results: dict = field(default_factory=dict)  # table -> rows written, for the summary
    # What this run reads (pipelines/lake_read.py): each Delta table at one version, Parquet
    # folders pinned, so a compaction during a job cannot pull files from under its
    # DataFrames. Shared by the jobs of one run.
    snapshot: object = None
    # The counting rule of the flows this job reads (issue 34), recorded in every report table
    # that declares `count_at`: set by common.site_flows/shared_flows/counted_files to the
    # site's `[site] count_at`; a view per device or interface sets "all" itself.
    count_at: str | None = None

    def lake_snapshot(self) -> LakeReader:
        if self.snapshot is None:
            self.snapshot = LakeReader(self.lake)
        return self.snapshot

    # ---- reading -------------------------------------------------------------------
    @property
    def lake(self) -> Path:
        return Path(self.cfg.lake)

    def flows(self, date: dt.date | None = None):
        """Flows whose time_start falls on `date` (UTC), partition-pruned; empty frame if none."""
        return self._read_partitioned("flows", FLOWS_TABLE, date or self.date)

    def active(self, date: dt.date | None = None):
        return self._read_partitioned("active", registry()["active"], date or self.date)

    def report(self, table: str, date: dt.date | None = None):
        """A report table for one date (e.g. yesterday's top talkers for rank change)."""
        return self._read_partitioned(f"reports/{table}", registry()[table], date or self.date)

    def _read_partitioned(self, rel: str, record, date: dt.date):
        base = self.lake / rel
        part = base / f"date={date.isoformat()}"
        schema = record.spark_schema()
        lake_check.check(self.lake, rel, f"date={date.isoformat()}")  # bad files must not sink a report
        reader = self.lake_snapshot()
        _version, files = reader.files(rel, [part])
        if not files:
            return self.spark.createDataFrame([], schema)
        return self.spark.read.option("basePath", str(reader.base(rel))).schema(schema).parquet(*files)

    # ---- writing -------------------------------------------------------------------
    def write(self, df, table: str) -> int:
        """Replace lake/reports/<table>/date=<date>/ with df (columns as declared)."""
        record = registry().get(table)
        if record is not None:
            if "count_at" in record.names and "count_at" not in df.columns:
                from pyspark.sql import functions as F  # noqa: PLC0415  (Spark: only when a job writes)

                df = df.withColumn("count_at", F.lit(self._count_at(table)))
            cols = [n for n in record.names if n != "date"]
            missing = [c for c in cols if c not in df.columns]
            if missing:
                raise ValueError(f"table {table}: job output lacks declared columns {missing}")
            df = df.select(*cols)
        return write_partition(df, self.lake / "reports" / table, self.date)

    def write_duckdb(self, con, query: str, table: str) -> int:
        """Replace lake/reports/<table>/date=<date>/ with the rows of a DuckDB query
        (columns cast to the declared types; one zstd Parquet file, no Spark involved)."""
        cols = [(n, t) for n, t in registry()[table].sql_columns() if n != "date"]
        rule = None
        if any(n == "count_at" for n, _ in cols):  # as write(): the job's own count_at, else the rule it read
            own = {r[0] for r in con.execute(f"DESCRIBE {query}").fetchall()}
            rule = None if "count_at" in own else self._count_at(table)
        select = ", ".join(f"CAST('{rule}' AS VARCHAR) AS \"count_at\"" if n == "count_at" and rule else
                           f'CAST("{n}" AS {t}) AS "{n}"' for n, t in cols)

        def produce(staging: Path) -> int:
            staging.mkdir(parents=True)
            target = str(staging / "part-00000.zstd.parquet").replace("'", "''")
            con.execute(f"COPY (SELECT {select} FROM ({query})) TO '{target}' (FORMAT parquet, COMPRESSION zstd)")
            return con.execute(f"SELECT count(*) FROM read_parquet('{target}')").fetchone()[0]

        return replace_partition(self.lake / "reports" / table, self.date, produce)

    def _count_at(self, table: str) -> str:
        """The rule `table`'s rows record: the flows this job read say it (count_at)."""
        from .count_rule import check_rule  # noqa: PLC0415  (light; only for tables that record it)

        if self.count_at is None:
            raise ValueError(f"table {table} records its counting rule (count_at, issue 34) but the job read no "
                             "counted flows: read common.site_flows/shared_flows (the site's rule), or set "
                             "ctx.count_at = 'all' for a view per device or interface")
        return check_rule(self.count_at, f"table {table}: count_at")


def write_partition(df, base: Path, date: dt.date, coalesce: int = 1) -> int:
    """Write the Spark DataFrame df as base/date=<date>/ atomically; return row count."""
    def produce(staging: Path) -> int:
        frame = df.coalesce(coalesce).cache()
        rows = frame.count()
        frame.write.mode("overwrite").option("compression", "zstd").parquet(str(staging))
        frame.unpersist()
        for junk in list(staging.glob("_*")) + list(staging.glob(".*.crc")):
            junk.unlink()
        return rows

    return replace_partition(base, date, produce)


