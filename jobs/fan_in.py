"""Fan-in: destinations receiving from unusually many distinct sources (robust z-score).

Median and MAD instead of mean and standard deviation: one huge fan-in (the thing we
look for) would otherwise inflate the spread and hide itself.
"""
from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from flowlake.pipelines.security_rules import MAD_TO_SIGMA, MEANAD_TO_SIGMA, FanInRule, robust_scale  # noqa: F401 (one definition)
from flowlake.schemas.security import FAN_IN

from . import common

NAME = "fan_in"
TABLES = (FAN_IN,)


def find_fan_in(flows: DataFrame, min_sources: int = 10, min_z: float = 3.5, sample_size: int = 10) -> DataFrame:
    """flows -> one row per unusual destination (FAN_IN columns, no date)."""
    per_dst = flows.groupBy("dst_addr").agg(
        F.countDistinct("src_addr").alias("sources"), F.count(F.lit(1)).alias("flows"),
        F.sum("packets").alias("packets"), F.sum("bytes").alias("bytes"),
        F.array_join(F.slice(F.sort_array(F.collect_set("src_addr")), 1, sample_size), ",").alias("sample_sources"),
        F.min("time_start").alias("first_seen"), F.max("time_end").alias("last_seen")).cache()
    med = per_dst.agg(F.median("sources").alias("median_sources")).first()["median_sources"]
    if med is None:  # no flows that day
        return per_dst.limit(0).select(*[F.lit(None).cast("string").alias(n) for n in FAN_IN.names
                                         if n not in ("date", "count_at")])  # count_at: ctx.write
    dev = per_dst.select(F.abs(F.col("sources") - F.lit(med)).alias("d"))
    stats = dev.agg(F.median("d").alias("mad"), F.mean("d").alias("meanad")).first()
    mad, meanad = float(stats["mad"]), float(stats["meanad"])
    scale = robust_scale(mad, meanad)
    z = (F.col("sources") - F.lit(med)) / F.lit(scale) if scale > 0 else F.lit(None).cast("double")
    port_counts = flows.groupBy("dst_addr", "dst_port").agg(F.count(F.lit(1)).alias("n"))
    w = Window.partitionBy("dst_addr").orderBy(F.desc("n"), F.asc("dst_port"))
    top_port = (port_counts.withColumn("r", F.row_number().over(w)).where("r = 1")
                .select("dst_addr", F.col("dst_port").cast("int").alias("top_port")))
    out = (per_dst.withColumn("median_sources", F.lit(float(med))).withColumn("mad_sources", F.lit(mad))
           .withColumn("robust_z", z.cast("double"))
           .where((F.col("sources") >= min_sources) & (F.col("robust_z") >= min_z))
           .join(top_port, "dst_addr"))
    cols = [n for n in FAN_IN.names if n not in ("date", "count_at")]  # count_at: ctx.write
    return out.select(*cols).orderBy(F.desc("robust_z"), "dst_addr")


def run(ctx) -> None:
    rule = FanInRule.from_config(ctx.cfg)
    flows = common.site_flows(ctx)  # each flow once by [site] count_at (issue 34)
    ctx.write(find_fan_in(flows, rule.min_sources, rule.min_z, ctx.cfg.security.sample_size), FAN_IN.name)
