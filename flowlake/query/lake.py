"""Reading the flow lake for queries: time bounds -> partition pruning on date/hour."""
from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

_FORMATS = ("%Y-%m-%d", "%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d %H:%M:%S",
            "%Y/%m/%d.%H:%M:%S", "%Y/%m/%d.%H:%M", "%Y/%m/%d")


class TimeError(ValueError):
    pass


def parse_time(text: str) -> dt.datetime:
    """'2026-11-25', '2026-11-25T10:00[:00]', nfdump's '2026/11/25.10:00:00', or a
    Unix time in seconds; always UTC."""
    t = text.strip().rstrip("Z")
    if re.fullmatch(r"\d{9,11}(\.\d+)?", t):
        return dt.datetime.fromtimestamp(float(t), dt.timezone.utc)
    for fmt in _FORMATS:
        try:
            return dt.datetime.strptime(t, fmt).replace(tzinfo=dt.timezone.utc)
        except ValueError:
            continue
    raise TimeError(f"'{text}' is not a time (use 2026-11-25, 2026-11-25T10:00:00 or 2026/11/25.10:00:00, UTC)")


def read_flows(spark, lake: Path, start: dt.datetime | None = None, end: dt.datetime | None = None) -> DataFrame:
    """Flows with start <= time_start < end. date/hour filters let Spark skip partitions."""
    from flowlake.schemas import FLOWS_TABLE

    base = Path(lake) / "flows"
    if not base.exists() or not any(base.glob("date=*")):
        raise FileNotFoundError(f"no flows in the lake at {base} (has ingest run? is FLOWLAKE_HOME right?)")
    df = spark.read.schema(FLOWS_TABLE.spark_schema()).option("basePath", str(base)).parquet(str(base))
    if start is not None:
        df = df.where((F.col("date") > start.strftime("%Y-%m-%d")) | (
            (F.col("date") == start.strftime("%Y-%m-%d")) & (F.col("hour") >= start.hour)))
        df = df.where(F.col("time_start") >= F.lit(start))
    if end is not None:
        df = df.where(F.col("date") <= end.strftime("%Y-%m-%d"))
        df = df.where(F.col("time_start") < F.lit(end))
    return df
