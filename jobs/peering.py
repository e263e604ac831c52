"""Peering: traffic by BGP neighbour, transit, origin AS, community and provider; the
destination ASes reached through transit (peering candidates); the share per exit path.

Read from the routing context the ingest puts on every flow (issue 33, Flow revision 4;
schemas/peering.py says what each table holds). Flows landed before revision 4 (null
columns) have no route and are left out where a route is needed, as flows without one.
"""
from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from flowlake.schemas.peering import EXIT_PATHS, PEERING_CANDIDATES, PEERING_TRAFFIC

from . import common

NAME = "peering"
TABLES = (PEERING_TRAFFIC, PEERING_CANDIDATES, EXIT_PATHS)
SUMS = ["flows", "packets", "bytes"]
PEAK_SECONDS = 300
OTHER = "(other)"  # the key of the rows beyond the top N: no AS, community or provider is spelled so
# the columns these reports read that older lakes (or frames) may lack, with their Spark types
LATER = {"dst_as_path": "array<bigint>", "dst_communities": "array<string>", "dst_large_communities": "array<string>",
         "bgp_next_hop": "string", "in_if_provider": "string", "out_if_provider": "string"}


def _routed(flows: DataFrame) -> DataFrame:
    """flows with `path` (dst_as_path, [] when null) and `neighbour_as` (its first AS, null without one)."""
    f = common.with_columns_or_null(flows, LATER)
    path = F.coalesce(F.col("dst_as_path"), F.array().cast("array<bigint>"))
    return (f.withColumn("path", path)
            .withColumn("neighbour_as", F.when(F.size("path") > 0, F.col("path")[0])))


def _volumes(df: DataFrame, keys: list[str]) -> DataFrame:
    return df.groupBy(*keys).agg(F.count(F.lit(1)).alias("flows"), F.sum("packets").alias("packets"),
                                 F.sum("bytes").alias("bytes"))


def peering_traffic(flows: DataFrame, top_n: int = 100) -> DataFrame:
    """flows (with `direction` and `hour`) -> peering_traffic rows: per hour (and day),
    direction and dimension the top_n keys by bytes, the rest in one OTHER row, so the table
    is bounded (a day at a real border reaches tens of thousands of origin ASes: 556k rows
    for the demo's day unbounded) and every list still adds up to its traffic."""
    if top_n < 1:
        raise ValueError(f"reports.peering_top_n must be at least 1, not {top_n}")
    # One pass: each flow explodes into its (dimension, key) pairs. Five filtered passes
    # unioned evaluated `direction` (the locality rule's address parsing) five times per
    # flow: 361 s for the demo day's 1.1M flows on 2 cores; one pass 34 s.
    f = _routed(flows)
    inbound = F.col("direction") == "inbound"
    origin = F.when(inbound, F.col("src_as")).otherwise(F.col("dst_as"))
    provider = F.when(inbound, F.col("in_if_provider")).otherwise(F.col("out_if_provider"))
    pair = lambda dimension, key: F.struct(F.lit(dimension).alias("dimension"), key.alias("key"))  # noqa: E731
    communities = F.concat(F.coalesce(F.col("dst_communities"), F.array().cast("array<string>")),
                           F.coalesce(F.col("dst_large_communities"), F.array().cast("array<string>")))
    pairs = F.concat(
        F.array(pair("neighbour_as", F.when(F.size("path") > 0, F.col("neighbour_as").cast("string"))),
                pair("transit", F.when(F.size("path") >= 2, F.col("neighbour_as").cast("string"))),
                pair("origin_as", F.when(F.coalesce(origin, F.lit(0)) != 0, origin.cast("string"))),
                pair("provider", F.when(F.coalesce(provider, F.lit("")) != "", provider))),
        F.transform(communities, lambda c: pair("community", c)))
    keyed = (f.select("hour", "direction", "packets", "bytes", F.explode(pairs).alias("_p"))
             .select("hour", "direction", "packets", "bytes", "_p.dimension", "_p.key")
             .where(F.col("key").isNotNull()))
    base = _volumes(keyed, ["hour", "direction", "dimension", "key"])
    out = common.rollup_hour_direction(base, ["dimension", "key"], SUMS)
    group = ["hour", "direction", "dimension"]
    out = common.fold_beyond_top(out, group, "key", top_n, OTHER, SUMS)
    out = common.add_shares(out, cols=("bytes",), by=group)
    return common.hour_to_null(out)


def peering_candidates(flows: DataFrame) -> DataFrame:
    """flows -> peering_candidates rows: destination ASes reached through transit."""
    t = (_routed(flows).where(F.size("path") >= 2)
         .withColumn("origin_as", F.try_element_at("path", F.lit(-1)))
         .withColumn("_bucket", (F.floor(F.unix_timestamp("time_start") / PEAK_SECONDS) * PEAK_SECONDS).cast("long")))
    totals = t.groupBy("origin_as").agg(
        F.count(F.lit(1)).alias("flows"), F.sum("packets").alias("packets"), F.sum("bytes").alias("bytes"),
        F.countDistinct("neighbour_as").cast("int").alias("transit_count"),
        (F.sum(F.size("path") * F.col("bytes")) / F.sum("bytes")).alias("path_length"))
    by_neighbour = t.groupBy("origin_as", "neighbour_as").agg(F.sum("bytes").alias("_nb"))
    top = (by_neighbour.withColumn("_r", F.row_number().over(
        Window.partitionBy("origin_as").orderBy(F.desc("_nb"), F.asc("neighbour_as"))))
        .where(F.col("_r") == 1).select("origin_as", F.col("neighbour_as").alias("transit_as")))
    buckets = t.groupBy("origin_as", "_bucket").agg(F.sum("bytes").alias("_bb"))
    peak = (buckets.withColumn("_r", F.row_number().over(
        Window.partitionBy("origin_as").orderBy(F.desc("_bb"), F.asc("_bucket"))))
        .where(F.col("_r") == 1)
        .select("origin_as", (F.col("_bb") * 8.0 / PEAK_SECONDS).alias("peak_bps"),
                F.col("_bucket").cast("timestamp").alias("peak_time")))
    out = totals.join(top, "origin_as").join(peak, "origin_as")
    # one list (the ASes reached through transit, tens of thousands at most): one partition
    # (Spark's warning about it is filtered in flowlake/base/log4j2.properties)
    whole = Window.partitionBy(F.lit(0))
    out = out.withColumn("rank", F.row_number().over(whole.orderBy(F.desc("bytes"), F.asc("origin_as"))))
    total = F.sum("bytes").over(whole)
    return out.withColumn("bytes_share", F.when(total > 0, F.col("bytes") / total).otherwise(F.lit(0.0)))


def exit_paths(flows: DataFrame) -> DataFrame:
    """flows -> exit_paths rows: per hour and the whole day, the routed bytes per
    (exporter, BGP next hop, neighbour AS) and their share."""
    r = (_routed(flows).where(F.size("path") > 0)
         .withColumn("bgp_next_hop", F.coalesce(F.col("bgp_next_hop"), F.lit(""))))
    keys = ["exporter", "bgp_next_hop", "neighbour_as"]
    aggs = [F.count(F.lit(1)).alias("flows"), F.sum("packets").alias("packets"), F.sum("bytes").alias("bytes")]
    out = r.groupingSets([[F.col(c) for c in ["hour", *keys]], [F.col(c) for c in keys]], "hour", *keys).agg(*aggs)
    total = F.sum("bytes").over(Window.partitionBy("hour"))
    return out.withColumn("bytes_share", F.when(total > 0, F.col("bytes") / total).otherwise(F.lit(0.0)))


def run(ctx) -> None:
    flows = common.shared_flows(ctx)
    ctx.write(peering_traffic(flows, int(ctx.cfg.reports.peering_top_n)), PEERING_TRAFFIC.name)
    ctx.write(peering_candidates(flows), PEERING_CANDIDATES.name)
    ctx.write(exit_paths(flows), EXIT_PATHS.name)
