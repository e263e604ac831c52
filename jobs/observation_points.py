"""Observation points: each exporter, its external interfaces, what it exports on and how
`[site] count_at` counted it, and the site's share of flows seen at more than one point
(issue 34; schemas/count_once.py). Reads every observation (ctx.flows()), as the rule does."""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from flowlake.schemas.count_once import OBSERVATION_POINTS

from . import count_once as co

NAME = "observation_points"
TABLES = (OBSERVATION_POINTS,)


def observation_points(flows: DataFrame, rule: str, window_seconds: float) -> DataFrame:
    """flows (every observation) -> observation_points rows (per exporter, then 'all')."""
    rule = co.check_rule(rule)
    m = co.mark(flows, rule, window_seconds)
    if "exporter_name" not in m.columns:
        m = m.withColumn("exporter_name", F.lit(None).cast("string"))
    if "in_if_name" not in m.columns:
        m = m.withColumn("in_if_name", F.lit(None).cast("string")).withColumn("out_if_name", F.lit(None).cast("string"))
    ingress = F.col("flow_direction").isNull() | (F.col("flow_direction") == 0)
    multi = (F.col(co.POINTS) > 1).cast("double")
    counted = F.col(co.COUNTED)
    ext = F.array_compact(F.array(
        F.when(F.col("in_if_boundary") == "external",
               F.concat_ws(" ", F.col("input_if").cast("string"), F.coalesce("in_if_name", F.lit("")))),
        F.when(F.col("out_if_boundary") == "external",
               F.concat_ws(" ", F.col("output_if").cast("string"), F.coalesce("out_if_name", F.lit(""))))))
    # One aggregation over the marked observations (the rule's windows are the cost: each
    # further pass over `m` ran them again); the site's row adds up the exporters' rows (Spark
    # reuses the aggregation's exchange for both).
    per = m.groupBy("exporter").agg(
        F.max(F.coalesce("exporter_name", F.lit(""))).alias("exporter_name"),
        F.array_join(F.array_sort(F.array_distinct(F.flatten(F.collect_set(ext)))), ", ").alias("external_ifs"),
        F.max(ingress.cast("int")).alias("_in"), F.max((~ingress).cast("int")).alias("_out"),
        F.max(F.col(co.CLASSIFIED).cast("int")).alias("_classified"),
        F.count(F.lit(1)).alias("observations"), F.sum(counted.cast("long")).alias("counted"),
        F.sum("bytes").alias("bytes_observed"),
        F.sum(F.when(counted, F.col("bytes")).otherwise(0)).alias("bytes_counted"),
        F.avg(multi).alias("multi_point_share"),
        F.sum(F.col(co.CONTRADICTORY).cast("long")).alias("contradictory"),
        # for the site's row: of the counted records, those seen at more than one point, and
        # those contradictory (multi is 0 or 1: the sums are exact in a double)
        F.sum(F.when(counted, multi).otherwise(0.0)).alias("_counted_multi"),
        F.sum((counted & F.col(co.CONTRADICTORY)).cast("long")).alias("_counted_contradictory"))
    exports = (F.when((F.col("_in") == 1) & (F.col("_out") == 1), "both")
               .when(F.col("_in") == 1, "ingress").otherwise("egress"))
    applied = (F.lit("all") if rule == "all" else F.lit("key") if rule == "key"
               else F.when(F.col("_classified") == 1, "boundary").otherwise("key"))
    site = per.agg(F.sum("observations").alias("observations"), F.sum("counted").alias("counted"),
                   F.sum("bytes_observed").alias("bytes_observed"), F.sum("bytes_counted").alias("bytes_counted"),
                   F.max("_classified").alias("_classified"), F.max("_in").alias("_in"), F.max("_out").alias("_out"),
                   F.sum("_counted_contradictory").alias("contradictory"),
                   F.sum("_counted_multi").alias("_multi"))
    site = (site.where(F.col("observations") > 0)
            .select(F.lit("all").alias("exporter"), F.lit("all").alias("exporter_name"),
                    F.lit("").alias("external_ifs"),
                    exports.alias("exports"), (F.col("_classified") == 1).alias("classified"),
                    F.lit(rule).alias("count_at"), "observations", "counted", "bytes_observed", "bytes_counted",
                    F.when(F.col("counted") > 0, F.col("_multi") / F.col("counted")).otherwise(F.lit(0.0))
                    .alias("multi_point_share"), "contradictory"))
    per = (per.withColumn("exports", exports).withColumn("classified", F.col("_classified") == 1)
           .withColumn("count_at", applied))
    cols = [f.name for f in OBSERVATION_POINTS.fields if f.name != "date"]
    return per.select(*cols).unionByName(site.select(*cols))


def run(ctx) -> None:
    rule, window = co.settings(ctx.cfg)
    ctx.write(observation_points(ctx.flows(), rule, window), NAME)
