"""Largest flows: the day's top `reports.top_n` flow records by bytes per direction
(and 'all') and exporter, for the Daily-operations dashboard's "largest flows" table.

Per (direction, exporter) the top N is a window rank with a `<= N` filter, which Spark
plans as a group limit before the shuffle (no full sort of the day's flows); the 'all'
lists are ranked again over those few candidates, which contain them.
"""
from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from flowlake.schemas.overview import LARGEST_FLOWS

from . import common

NAME = "largest_flows"
TABLES = (LARGEST_FLOWS,)
# (column, descending): Column objects need a live Spark context, so they are built per call
# (a module-level F.col broke `flowlake jobs list`, which imports every job without Spark)
ORDER = [("bytes", True), ("packets", True), ("time_start", False), ("src_addr", False),
         ("dst_addr", False), ("src_port", False), ("dst_port", False), ("proto", False)]


def _top(df: DataFrame, n: int) -> DataFrame:
    order = [F.col(c).desc() if desc else F.col(c).asc() for c, desc in ORDER]
    w = Window.partitionBy("direction", "exporter").orderBy(*order)
    return df.withColumn("rank", F.row_number().over(w)).where(F.col("rank") <= n)


def largest_flows(flows: DataFrame, n: int) -> DataFrame:
    """flows (with `direction`) -> largest_flows rows (without date)."""
    if n < 1:
        raise ValueError(f"reports.top_n must be at least 1, not {n}")
    cols = ["time_start", "time_end", "exporter", "input_if", "output_if", "src_addr", "src_port",
            "dst_addr", "dst_port", "proto", "packets", "bytes", "direction"]
    own = (_top(flows.select(*cols), n).drop("rank").withColumn("flow_direction", F.col("direction"))
           .localCheckpoint(eager=True))  # small: at most N rows per direction and exporter
    ranked = _top(own.unionByName(own.withColumn("direction", F.lit("all"))), n)
    dur = F.greatest(F.unix_millis("time_end") - F.unix_millis("time_start"), F.lit(0)) / 1000.0
    return (ranked.withColumn("proto_name", common.proto_name(F.col("proto")))
            .withColumn("duration_s", dur).withColumn("rank", F.col("rank").cast("int")))


def run(ctx) -> None:
    ctx.write(largest_flows(common.shared_flows(ctx), int(ctx.cfg.reports.top_n)), NAME)
