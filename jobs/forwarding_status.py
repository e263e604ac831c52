"""Forwarding status: flows, packets and bytes per exporter and forwarding-status class
(forwarded, dropped, consumed, unknown: RFC 7270 IE 89's top two bits) for the day, with the
top reason codes (its low six bits) of each class."""
from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from flowlake.schemas.forwarding import (
    FORWARDING_STATUS,
    NOT_EXPORTED,
    OUT_OF_RANGE,
    REASON_NAMES,
    STATUS_CLASSES,
    TOP_REASONS,
)

from . import common

NAME = "forwarding_status"
TABLES = (FORWARDING_STATUS,)
SUMS = ["flows", "packets", "bytes"]


def _map(mapping: dict) -> F.Column:
    return F.create_map(*[x for k, v in mapping.items() for x in (F.lit(k), F.lit(v))])


def forwarding_status(flows: DataFrame, top: int = TOP_REASONS) -> DataFrame:
    """flows -> forwarding_status rows (without date): one total row per exporter and class
    (reason null) and the class's `top` reasons by bytes. A lake without the column (before
    flow record revision 3) counts every flow as not exported."""
    fs = F.col("forwarding_status")
    valid = fs.between(0, 255)
    base = (common.with_columns_or_null(flows, {"forwarding_status": "int"})
            .select("exporter", "packets", "bytes", fs.alias("forwarding_status"))
            .withColumn("status", F.when(valid, F.shiftright(fs, 6)).cast("int"))
            .withColumn("reason", F.when(valid, fs.bitwiseAND(63)).cast("int"))
            .withColumn("status_class", F.when(fs.isNull(), F.lit(NOT_EXPORTED))
                        .when(~valid, F.lit(OUT_OF_RANGE)).otherwise(_map(STATUS_CLASSES)[F.col("status")])))
    by_code = (base.groupBy("exporter", "status_class", "status", "reason", "forwarding_status")
               .agg(F.count(F.lit(1)).alias("flows"), F.sum("packets").alias("packets"), F.sum("bytes").alias("bytes"))
               .cache())
    totals = (by_code.groupBy("exporter", "status_class")
              .agg(F.first("status", ignorenulls=True).alias("status"), *[F.sum(c).alias(c) for c in SUMS])
              .withColumns({"reason": F.lit(None).cast("int"), "forwarding_status": F.lit(None).cast("int"),
                            "reason_name": F.lit(None).cast("string"), "rank": F.lit(None).cast("int")}))
    w = Window.partitionBy("exporter", "status_class").orderBy(F.desc("bytes"), F.desc("flows"), "forwarding_status")
    reasons = (by_code.where(F.col("reason").isNotNull())
               .withColumn("rank", F.row_number().over(w)).where(F.col("rank") <= top)
               .withColumn("reason_name", F.coalesce(_map(REASON_NAMES)[F.col("forwarding_status")], F.lit(""))))
    out = totals.unionByName(reasons)
    day = Window.partitionBy("exporter")
    exporter_bytes = F.sum(F.when(F.col("rank").isNull(), F.col("bytes")).otherwise(0)).over(day)
    return out.withColumn("bytes_share", F.when(exporter_bytes > 0, F.col("bytes") / exporter_bytes)
                          .otherwise(F.lit(0.0)))


def run(ctx) -> None:
    ctx.count_at = "all"  # a view per exporter: every observation (issue 34)
    ctx.write(forwarding_status(ctx.flows()), NAME)
