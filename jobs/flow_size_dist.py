"""Flow size distribution per day, direction and class (tcp, udp, icmp, other, all):
exact percentiles of bytes and packets per flow, mean, the share of bytes in the
largest 1% of flows, and log-binned CCDF points for plotting.

Exact without sorting every flow: first a histogram (value -> number of flows) per
group, which is much smaller than the flows because sizes repeat, then running sums
over that histogram give nearest-rank percentiles, the top-1% share and the CCDF.
"""
from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from flowlake.schemas.reports import FLOW_SIZE_DIST

from . import common

NAME = "flow_size_dist"
TABLES = (FLOW_SIZE_DIST,)
# per mille, so the nearest rank ceil(n * p) is integer arithmetic, exact for any n
PERCENTILES = (("p50", 500), ("p75", 750), ("p90", 900), ("p99", 990), ("p999", 999))
BINS_PER_DECADE = 4
GROUP = ["direction", "flow_class"]


def flow_class(proto) -> object:
    return (F.when(proto == 6, "tcp").when(proto == 17, "udp").when(proto.isin(1, 58), "icmp").otherwise("other"))


def histogram(flows: DataFrame, value: str) -> DataFrame:
    """(direction, flow_class, v, c) incl. direction 'all' and class 'all' groups."""
    base = (flows.withColumn("flow_class", flow_class(F.col("proto")))
            .groupBy("direction", "flow_class", F.col(value).alias("v")).agg(F.count(F.lit(1)).alias("c")))
    base = base.unionByName(base.withColumn("direction", F.lit("all")))
    base = base.unionByName(base.withColumn("flow_class", F.lit("all")))
    # read three times (summary, CCDF, group sizes): materialise once
    return base.groupBy(*GROUP, "v").agg(F.sum("c").alias("c")).localCheckpoint(eager=True)


def summarise(hist: DataFrame, prefix: str, top_share: bool) -> DataFrame:
    """Per group: n, sum, mean, nearest-rank percentiles (+ top-1% share) from a histogram."""
    asc = Window.partitionBy(*GROUP).orderBy("v").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    whole = Window.partitionBy(*GROUP)
    h = hist.withColumn("cum", F.sum("c").over(asc)).withColumn("n", F.sum("c").over(whole))
    aggs = [F.first("n").alias("n"), F.sum(F.col("v") * F.col("c")).alias(f"{prefix}_sum")]
    for name, permille in PERCENTILES:
        rank = F.floor((F.col("n") * permille + 999) / 1000)  # ceil(n * permille / 1000), exact
        aggs.append(F.min(F.when(F.col("cum") >= rank, F.col("v"))).alias(f"{prefix}_{name}"))
    if top_share:
        desc = Window.partitionBy(*GROUP).orderBy(F.col("v").desc()).rowsBetween(Window.unboundedPreceding, Window.currentRow)
        before = F.sum("c").over(desc) - F.col("c")  # flows larger than this value
        top = F.floor((F.col("n") + 99) / 100)  # ceil(n / 100) largest flows
        take = F.greatest(F.lit(0), F.least(F.col("c"), top - before))
        h = h.withColumn("top_part", F.col("v") * take)
        aggs.append(F.sum("top_part").alias("top_sum"))
    out = h.groupBy(*GROUP).agg(*aggs).withColumn(f"{prefix}_mean", F.col(f"{prefix}_sum") / F.col("n"))
    if top_share:
        out = (out.withColumn("top1pct_bytes_share",
                              F.when(F.col(f"{prefix}_sum") > 0, F.col("top_sum") / F.col(f"{prefix}_sum")).otherwise(0.0))
               .drop("top_sum"))
    return out


def ccdf(hist: DataFrame, prefix: str) -> DataFrame:
    """Per group arrays x = 10^(k/4) for occupied bins k and y = P(value >= x)."""
    k = F.floor(F.log10(F.col("v").cast("double")) * BINS_PER_DECADE)
    bins = hist.where(F.col("v") >= 1).groupBy(*GROUP, k.alias("k")).agg(F.sum("c").alias("c"))
    desc = Window.partitionBy(*GROUP).orderBy(F.col("k").desc()).rowsBetween(Window.unboundedPreceding, Window.currentRow)
    n = hist.groupBy(*GROUP).agg(F.sum("c").alias("n"))
    points = (bins.withColumn("at_least", F.sum("c").over(desc)).join(n, GROUP)
              .withColumn("x", F.pow(F.lit(10.0), F.col("k") / BINS_PER_DECADE))
              .withColumn("y", F.col("at_least") / F.col("n")))
    pts = F.sort_array(F.collect_list(F.struct("k", "x", "y")))
    return (points.groupBy(*GROUP).agg(pts.alias("pts"))
            .select(*GROUP, F.col("pts.x").alias(f"ccdf_{prefix}_x"), F.col("pts.y").alias(f"ccdf_{prefix}_y")))


def flow_size_dist(flows: DataFrame) -> DataFrame:
    """flows (with `direction`) -> flow_size_dist rows (hour null: whole day)."""
    hb, hp = histogram(flows, "bytes"), histogram(flows, "packets")
    b = summarise(hb, "bytes", top_share=True).withColumnRenamed("n", "flows")
    p = summarise(hp, "packets", top_share=False).drop("n")
    empty = F.array().cast("array<double>")
    out = b.join(p, GROUP).join(ccdf(hb, "bytes"), GROUP, "left").join(ccdf(hp, "packets"), GROUP, "left")
    for col in ("ccdf_bytes_x", "ccdf_bytes_y", "ccdf_packets_x", "ccdf_packets_y"):
        out = out.withColumn(col, F.coalesce(F.col(col), empty))  # groups of zero-size flows only
    return (out.withColumnRenamed("bytes_sum", "bytes").withColumnRenamed("packets_sum", "packets")
            .withColumn("hour", F.lit(None).cast("int")))


def run(ctx) -> None:
    ctx.write(flow_size_dist(common.shared_flows(ctx)), NAME)

