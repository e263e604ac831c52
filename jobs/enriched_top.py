"""Enriched top lists (issue 21): the top ASes, countries, interfaces, providers and the
operator's networks per hour and for the whole day, on the input side (source address,
input interface) and the output side (destination, output interface), by bytes; the rest
of each hour folded into one `other` row so every list adds up to the hour's traffic."""
from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from flowlake.schemas.enrich import ENRICHED_TOP

from . import common

NAME = "enriched_top"
TABLES = (ENRICHED_TOP,)
SUMS = ("flows", "packets", "bytes")


def _interface(side: str, index: str) -> str:
    # "border-1 et-0/0/1"; the address and "if<index>" where no name is known
    return (f"concat_ws(' ', coalesce(nullif(exporter_name, ''), exporter), "
            f"coalesce(nullif({side}_if_name, ''), concat('if', CAST({index} AS STRING))))")


# dimension -> (input side, output side), Spark SQL over lake columns; '' = unknown
DIMENSIONS = {
    "as": ("CASE WHEN src_as = 0 THEN '' ELSE CAST(src_as AS STRING) END",
           "CASE WHEN dst_as = 0 THEN '' ELSE CAST(dst_as AS STRING) END"),
    "country": ("src_country", "dst_country"),
    "interface": (_interface("in", "input_if"), _interface("out", "output_if")),
    "provider": ("in_if_provider", "out_if_provider"),
    "network": ("src_net_name", "dst_net_name"),
}


def enriched_top(flows: DataFrame, top_n: int) -> DataFrame:
    """flows (lake columns and `hour`) -> enriched_top rows (without date). Lake days written
    before enrichment have null columns: their values count as unknown ('')."""
    keys = F.array(*[F.struct(F.lit(dim).alias("dimension"), F.lit(side).alias("side"),
                              F.coalesce(F.expr(sql), F.lit("")).alias("value"))
                     for dim, sides in DIMENSIONS.items() for side, sql in zip(("in", "out"), sides)])
    keyed = flows.select(F.col("hour").cast("int").alias("hour"), "packets", "bytes",
                         F.explode(keys).alias("k")).select("hour", "k.*", "packets", "bytes")
    hourly = keyed.groupBy("hour", "dimension", "side", "value").agg(
        F.count(F.lit(1)).alias("flows"), F.sum("packets").alias("packets"), F.sum("bytes").alias("bytes"))
    daily = (hourly.groupBy("dimension", "side", "value").agg(*[F.sum(c).alias(c) for c in SUMS])
             .withColumn("hour", F.lit(None).cast("int")))
    both = hourly.unionByName(daily)
    group = ["hour", "dimension", "side"]
    ranked = (both.withColumn("rank", F.row_number().over(
        Window.partitionBy(*group).orderBy(F.col("bytes").desc(), F.col("value"))))
              .withColumn("total", F.sum("bytes").over(Window.partitionBy(*group))))
    top = ranked.where(F.col("rank") <= top_n)
    other = (ranked.where(F.col("rank") > top_n).groupBy(*group)
             .agg(*[F.sum(c).alias(c) for c in SUMS], F.first("total").alias("total"))
             .withColumn("value", F.lit("other")).withColumn("rank", F.lit(top_n + 1)))
    out = top.unionByName(other)
    return (out.withColumn("bytes_share", F.when(F.col("total") > 0, F.col("bytes") / F.col("total"))
                           .otherwise(F.lit(0.0)))
            .withColumn("rank", F.col("rank").cast("int")).drop("total"))


def run(ctx) -> None:
    # each flow once by [site] count_at (issue 34): under boundary the interface list is that of
    # the external interfaces the site's traffic crossed
    ctx.write(enriched_top(common.site_flows(ctx), int(ctx.cfg.reports.top_n)), NAME)
