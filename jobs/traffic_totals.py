"""Traffic totals: flow records, packets, bytes and distinct source/destination
addresses per hour (and whole day), direction and exporter, with 'all' rows for
direction and exporter (the Daily-operations dashboard's big numbers).

Distinct counts are exact: each (hour, direction, exporter, address) is kept once, and
the roll-ups count distinct addresses over those small sets, never over the flows.
"""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from flowlake.schemas.overview import TRAFFIC_TOTALS

from . import common

NAME = "traffic_totals"
TABLES = (TRAFFIC_TOTALS,)
KEYS = ["hour", "direction", "exporter"]


def expand(df: DataFrame) -> DataFrame:
    """Each row also under the whole day (hour = DAY_HOUR), direction 'all' and exporter
    'all': eight copies, one per roll-up level."""
    df = df.unionByName(df.withColumn("hour", F.lit(common.DAY_HOUR)))
    df = df.unionByName(df.withColumn("direction", F.lit("all")))
    return df.unionByName(df.withColumn("exporter", F.lit("all")))


def traffic_totals(flows: DataFrame) -> DataFrame:
    """flows (with `direction` and `hour`) -> traffic_totals rows."""
    base = flows.groupBy(*KEYS).agg(F.count(F.lit(1)).alias("flows"), F.sum("packets").alias("packets"),
                                    F.sum("bytes").alias("bytes"))
    volumes = expand(base).groupBy(*KEYS).agg(*(F.sum(c).alias(c) for c in ("flows", "packets", "bytes")))
    out = volumes
    for col, name in (("src_addr", "src_addrs"), ("dst_addr", "dst_addrs")):
        seen = flows.select(*KEYS, col).distinct()
        out = out.join(expand(seen).groupBy(*KEYS).agg(F.countDistinct(col).alias(name)), KEYS)
    return common.hour_to_null(out)


def run(ctx) -> None:
    ctx.write(traffic_totals(common.shared_flows(ctx)), NAME)
