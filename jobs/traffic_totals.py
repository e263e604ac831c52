"""Traffic totals: flow records, packets, bytes and distinct source/destination
addresses per hour (and whole day), direction and exporter, with 'all' rows for
direction and exporter (the Daily-operations dashboard's totals).

One pass over the flows: a grouping-set aggregation keeps each (hour, direction,
exporter, source) and each (hour, direction, exporter, destination) once, with the
volumes on the source rows. Every roll-up (whole day, direction 'all', exporter 'all')
then sums volumes and counts distinct addresses over those far smaller rows, so the
distinct counts are exact without looking at a flow twice.
"""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from flowlake.schemas.overview import TRAFFIC_TOTALS

from . import common

NAME = "traffic_totals"
TABLES = (TRAFFIC_TOTALS,)
KEYS = ["hour", "direction", "exporter"]
VOLUMES = ["flows", "packets", "bytes"]


def per_address(flows: DataFrame) -> DataFrame:
    """(hour, direction, exporter, src_addr | null, dst_addr | null, flows, packets, bytes):
    a row per source (with its volumes) and a row per destination (volumes null)."""
    cols = [F.col(c) for c in KEYS]
    out = (flows.groupingSets([cols + [F.col("src_addr")], cols + [F.col("dst_addr")]], *KEYS, "src_addr", "dst_addr")
           .agg(F.count(F.lit(1)).alias("flows"), F.sum("packets").alias("packets"), F.sum("bytes").alias("bytes"),
                F.grouping("src_addr").alias("_by_dst")))
    by_dst = F.col("_by_dst") == 1
    return out.select(*KEYS, "src_addr", "dst_addr",
                      *(F.when(~by_dst, F.col(c)).alias(c) for c in VOLUMES))


def traffic_totals(flows: DataFrame) -> DataFrame:
    """flows (with `direction` and `hour`) -> traffic_totals rows."""
    rows = per_address(flows)
    # hour, direction and exporter are never null here, so null after the cube = rolled up
    out = rows.cube(*KEYS).agg(*(F.sum(c).alias(c) for c in VOLUMES),
                               F.countDistinct("src_addr").alias("src_addrs"),
                               F.countDistinct("dst_addr").alias("dst_addrs"))
    out = (out.withColumn("hour", F.coalesce(F.col("hour"), F.lit(common.DAY_HOUR)))
           .withColumn("direction", F.coalesce(F.col("direction"), F.lit("all")))
           .withColumn("exporter", F.coalesce(F.col("exporter"), F.lit("all")))
           .where(F.col("flows").isNotNull()))  # no flows at all: no row (as before)
    return common.hour_to_null(out)


def run(ctx) -> None:
    ctx.write(traffic_totals(common.shared_flows(ctx)), NAME)
