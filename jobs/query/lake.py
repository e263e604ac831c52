"""Reading the flow lake for queries: time bounds -> partition pruning on date/hour.

Spark prunes from the date/hour filters of `read_flows`; DuckDB gets the file list of
`partitions` (no Spark import here: the DuckDB path must start fast)."""
from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

from .sql import LATER_COLUMNS

_FORMATS = ("%Y-%m-%d", "%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d %H:%M:%S",
            "%Y/%m/%d.%H:%M:%S", "%Y/%m/%d.%H:%M", "%Y/%m/%d")


_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")


class TimeError(ValueError):
    pass


def parse_time(text: str) -> dt.datetime:
    """'2026-11-25', '2026-11-25T10:00[:00]', nfdump's '2026/11/25.10:00:00', or a
    Unix time in seconds; always UTC."""
    t = text.strip().rstrip("Z")
    if re.fullmatch(r"\d{9,11}(\.\d+)?", t):
        return dt.datetime.fromtimestamp(float(t), dt.UTC)
    for fmt in _FORMATS:
        try:
            return dt.datetime.strptime(t, fmt).replace(tzinfo=dt.UTC)
        except ValueError:
            continue
    raise TimeError(f"'{text}' is not a time (use 2026-11-25, 2026-11-25T10:00:00 or 2026/11/25.10:00:00, UTC)")


def parse_as_of(text: str) -> int | dt.datetime:
    """--as-of: an integer is a table version; anything else a time as --from/--to read
    it (UTC), or ISO 8601 with a zone (2026-11-27T14:00Z, 2026-11-27T15:00+01:00),
    returned as an aware UTC datetime."""
    t = text.strip()
    if re.fullmatch(r"[0-9]+", t):
        return int(t)
    if re.search(r"[+-]\d{2}:?\d{2}$", t):  # an offset: parse_time knows UTC only
        try:
            return dt.datetime.fromisoformat(t).astimezone(dt.UTC)
        except ValueError:
            pass
    try:
        return parse_time(t)
    except TimeError:
        raise TimeError(f"'{text}' is neither a table version (an integer) nor a time (2026-11-27T14:00, "
                        "2026-11-27T14:00Z, 2026-11-27T15:00+01:00 or 2026/11/27.14:00:00)") from None


def flows_dir(lake: Path) -> Path:
    """lake/flows, or FileNotFoundError saying what to check."""
    base = Path(lake) / "flows"
    if not base.exists() or not any(base.glob("date=*")):
        raise FileNotFoundError(f"no flows in the lake at {base} (has ingest run? is FLOWLAKE_HOME right?)")
    return base


def partitions(lake: Path, start: dt.datetime | None = None, end: dt.datetime | None = None) -> list[Path]:
    """The lake/flows/date=/hour= folders that can hold flows with start <= time_start < end,
    in time order (an hour's folder holds exactly the flows starting in that hour)."""
    out = []
    for day in sorted(flows_dir(lake).glob("date=*")):
        # fromisoformat, not strptime: importing _strptime costs a quick query ~3 ms of CPU
        if not _DAY.fullmatch(day.name[5:]):
            continue  # not a partition (e.g. a staging folder)
        try:
            d = dt.datetime.fromisoformat(day.name[5:]).replace(tzinfo=dt.UTC)
        except ValueError:
            continue
        if (end is not None and d >= end) or (start is not None and d + dt.timedelta(days=1) <= start):
            continue
        hours = []
        for part in day.glob("hour=*"):
            try:
                h = int(part.name[5:])
            except ValueError:
                continue
            t = d + dt.timedelta(hours=h)
            if (end is None or t < end) and (start is None or t + dt.timedelta(hours=1) > start):
                hours.append((h, part))
        out += [p for _, p in sorted(hours)]
    return out


def read_flows(spark, lake: Path, start: dt.datetime | None = None, end: dt.datetime | None = None,
               snapshot=None):
    """Flows with start <= time_start < end. date/hour filters let Spark skip partitions.
    With a reader (`snapshot`: pipelines/lake_read.LakeReader) the window's hours are read at
    one table version (Delta) or pinned (Parquet), so a compaction while Spark reads cannot
    remove the files it listed; a Delta table is always read through one."""
    from pyspark.sql import functions as F  # noqa: PLC0415  (start-up: pyspark)

    from flowlake.pipelines.lake_read import LakeReader, is_delta  # noqa: PLC0415  (start-up: flowlake query's fast path)

    base = flows_dir(lake)
    paths = [str(base)]
    own = None
    if snapshot is None and is_delta(base):
        snapshot = own = LakeReader(lake)  # files of one version: the folder holds files no version lists
    if snapshot is not None:
        _version, files = snapshot.files("flows", partitions(lake, start, end))
        if files or own is not None or is_delta(base):  # a version with no file in the window: no rows
            base, paths = snapshot.base("flows"), files
    from flowlake.schemas import FLOWS_TABLE  # noqa: PLC0415  (start-up: flowlake query's fast path)

    if not paths:  # a table version with no file in the window
        return spark.createDataFrame([], FLOWS_TABLE.spark_schema())
    df = spark.read.schema(FLOWS_TABLE.spark_schema()).option("basePath", str(base)).parquet(*paths)
    # columns of a later record revision the schema here does not declare yet: NULL, as
    # DuckEngine reads files without them (a filter on them reads 0 or no address)
    df = df.select("*", *(F.lit(None).cast(t).alias(c) for c, (_, t) in LATER_COLUMNS.items() if c not in df.columns))
    if start is not None:
        df = df.where((F.col("date") > start.strftime("%Y-%m-%d")) | (
            (F.col("date") == start.strftime("%Y-%m-%d")) & (F.col("hour") >= start.hour)))
        df = df.where(F.col("time_start") >= F.lit(start))
    if end is not None:
        df = df.where(F.col("date") <= end.strftime("%Y-%m-%d"))
        df = df.where(F.col("time_start") < F.lit(end))
    return df
