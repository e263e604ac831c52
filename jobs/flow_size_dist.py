"""Flow size distribution per hour and for the whole day, per direction and class
(tcp, udp, icmp, other, all): exact percentiles of bytes and packets per flow, mean,
the share of bytes in the largest 1% of flows, and log-binned CCDF points.

Exact without sorting the flows (10M a day), in three cheap passes:
1. per finest group (hour, direction, class) and fine log bin (256 per decade) of the
   value: flows, sum, min and max. Tiny; every roll-up (day, 'all' direction, 'all'
   class) is summed from it, not from the flows.
2. each wanted rank (a percentile's nearest rank ceil(n*p), the ceil(n/100)-th largest
   for the top-1% share) falls in one bin of its group; if that bin holds one distinct
   value (min = max, always so for small integers) that is the answer.
3. otherwise only the flows of those few bins are read one by one and ranked.
The CCDF's 4-per-decade bins are unions of 64 fine bins, so they come from pass 1 too.
"""
from __future__ import annotations

import itertools

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from flowlake.jobs import common, engines
from flowlake.schemas.reports import FLOW_SIZE_DIST

NAME = "flow_size_dist"
TABLES = (FLOW_SIZE_DIST,)
# per mille, so the nearest rank ceil(n * p) is integer arithmetic, exact for any n
PERCENTILES = (("p50", 500), ("p75", 750), ("p90", 900), ("p99", 990), ("p999", 999))
BINS_PER_DECADE = 4  # CCDF points
FINE = 256  # fine bins per decade (0.9% wide: few flows share a target's bin) (a multiple of BINS_PER_DECADE: CCDF bins are unions of fine bins)
GROUP = ["hour", "direction", "flow_class"]
# every roll-up of the group: hour -> whole day, direction -> 'all', class -> 'all'
SETS = [[c for c, keep in zip(GROUP, mask) if keep] for mask in itertools.product((True, False), repeat=3)]
ROLLED = {"hour": common.DAY_HOUR, "direction": "all", "flow_class": "all"}


def flow_class(proto) -> object:
    return (F.when(proto == 6, "tcp").when(proto == 17, "udp").when(proto.isin(1, 58), "icmp").otherwise("other"))


def fine_bin(col: str):
    """floor(log10(v) * 256) for v >= 1, -1 for 0. floor(k / 16) is then exactly the CCDF
    bin floor(log10(v) * 4): scaling a double by a power of two is exact."""
    v = F.col(col)
    return F.when(v >= 1, F.floor(F.log10(v.cast("double")) * FINE)).otherwise(F.lit(-1)).cast("int")


def bins(f: DataFrame, value: str) -> DataFrame:
    """(GROUP..., k, c, s, lo, hi) for every level of GROUP incl. roll-ups."""
    base = (f.withColumn("k", fine_bin(value)).groupBy(*GROUP, "k")
            .agg(F.count(F.lit(1)).alias("c"), F.sum(value).alias("s"), F.min(value).alias("lo"), F.max(value).alias("hi")))
    sets = [[F.col(c) for c in (*s, "k")] for s in SETS]
    out = base.groupingSets(sets, *GROUP, "k").agg(F.sum("c").alias("c"), F.sum("s").alias("s"),
                                                   F.min("lo").alias("lo"), F.max("hi").alias("hi"))
    # hour, direction and class are never null in the flows: null here means rolled up
    return out.withColumns({c: F.coalesce(F.col(c), F.lit(v)) for c, v in ROLLED.items()}).localCheckpoint(eager=True)


def targets(b: DataFrame, prefix: str, top_share: bool) -> DataFrame:
    """Per group and wanted rank: the bin it falls in and its position inside the bin
    (`pos`, 1-based from the bin's smallest value; for 'top' from the largest)."""
    up = Window.partitionBy(*GROUP).orderBy("k").rowsBetween(Window.unboundedPreceding, -1)
    whole = Window.partitionBy(*GROUP)
    t = b.withColumn("below", F.coalesce(F.sum("c").over(up), F.lit(0))).withColumn("n", F.sum("c").over(whole))
    wanted = [F.struct(F.lit(f"{prefix}_{name}").alias("what"),
                       F.floor((F.col("n") * permille + 999) / 1000).alias("r")) for name, permille in PERCENTILES]
    if top_share:
        # the ceil(n/100)-th largest is the (n - ceil(n/100) + 1)-th smallest
        wanted.append(F.struct(F.lit("top").alias("what"), (F.col("n") - F.floor((F.col("n") + 99) / 100) + 1).alias("r")))
    t = t.withColumn("w", F.explode(F.array(*wanted))).select("*", "w.what", "w.r").drop("w")
    return (t.where((F.col("r") > F.col("below")) & (F.col("r") <= F.col("below") + F.col("c")))
            .withColumn("pos", F.col("r") - F.col("below"))
            .select(*GROUP, "what", "k", "pos", "c", "lo", "hi"))


def resolve(f: DataFrame, value: str, tg: DataFrame) -> DataFrame:
    """(GROUP..., what, v, tail): the value at each target and `tail`, the sum of the
    values of its bin from it up to the bin's largest (for the top-1% share). Flows
    are read only for target bins that hold more than one distinct value."""
    done = tg.where(F.col("lo") == F.col("hi")).select(
        *GROUP, "what", F.col("lo").alias("v"), ((F.col("c") - F.col("pos") + 1) * F.col("lo")).alias("tail"))
    open_ = tg.where(F.col("lo") != F.col("hi")).localCheckpoint(eager=True)
    if open_.isEmpty():
        return done
    # the finest cells (hour, direction, class, bin) whose flows some open target needs:
    # a rolled-up target needs that bin of every hour / direction / class under it
    cells = f.select(*GROUP).distinct()
    need = (open_.select(*[F.col(c).alias(f"_{c}") for c in GROUP], "k").distinct()
            .join(F.broadcast(cells), [(F.col(f"_{c}") == F.lit(ROLLED[c])) | (F.col(f"_{c}") == F.col(c)) for c in GROUP])
            .select(*GROUP, "k").distinct())
    member = F.explode(F.array(*[F.struct(*[(F.col(c) if c in s else F.lit(ROLLED[c])).alias(c) for c in GROUP])
                                 for s in SETS]))
    cand = (f.select(*GROUP, F.col(value).alias("v"), fine_bin(value).alias("k"))
            .join(F.broadcast(need), [*GROUP, "k"])
            .select(member.alias("g"), "v", "k").select("g.*", "v", "k")
            .join(F.broadcast(open_.select(*GROUP, "k").distinct()), [*GROUP, "k"]))
    inside = Window.partitionBy(*GROUP, "k")
    ranked = (cand.withColumn("pos", F.row_number().over(inside.orderBy("v")))
              .withColumn("tail", F.sum("v").over(inside.orderBy(F.col("v").desc(), F.col("pos").desc())
                                                  .rowsBetween(Window.unboundedPreceding, 0))))
    hit = ranked.join(F.broadcast(open_.select(*GROUP, "k", "pos", "what")), [*GROUP, "k", "pos"])
    return done.unionByName(hit.select(*GROUP, "what", "v", "tail"))


def ccdf(b: DataFrame, prefix: str) -> DataFrame:
    """Per group arrays x = 10^(k/4) for occupied bins k >= 0 and y = P(value >= x)."""
    coarse = (b.where(F.col("k") >= 0).groupBy(*GROUP, F.floor(F.col("k") / (FINE // BINS_PER_DECADE)).alias("k"))
              .agg(F.sum("c").alias("c")))
    n = b.groupBy(*GROUP).agg(F.sum("c").alias("n"))
    down = Window.partitionBy(*GROUP).orderBy(F.col("k").desc()).rowsBetween(Window.unboundedPreceding, 0)
    points = (coarse.withColumn("at_least", F.sum("c").over(down)).join(n, GROUP)
              .withColumn("x", F.pow(F.lit(10.0), F.col("k") / BINS_PER_DECADE))
              .withColumn("y", F.col("at_least") / F.col("n")))
    pts = F.sort_array(F.collect_list(F.struct("k", "x", "y")))
    return (points.groupBy(*GROUP).agg(pts.alias("pts"))
            .select(*GROUP, F.col("pts.x").alias(f"ccdf_{prefix}_x"), F.col("pts.y").alias(f"ccdf_{prefix}_y")))


def top_share(b: DataFrame, tg: DataFrame, resolved: DataFrame) -> DataFrame:
    """Bytes of the ceil(n/100) largest flows / all bytes: the bins above the bin of the
    ceil(n/100)-th largest value, plus that bin's values from it upwards (`tail`)."""
    t = tg.where(F.col("what") == "top").select(*GROUP, F.col("k").alias("tk"))
    above = (b.join(t, GROUP).groupBy(*GROUP).agg(
        F.sum(F.when(F.col("k") > F.col("tk"), F.col("s")).otherwise(0)).alias("above"), F.sum("s").alias("total")))
    tail = resolved.where(F.col("what") == "top").select(*GROUP, "tail")
    share = F.when(F.col("total") > 0, (F.col("above") + F.col("tail")) / F.col("total")).otherwise(F.lit(0.0))
    return above.join(tail, GROUP).select(*GROUP, share.alias("top1pct_bytes_share"))


def flow_size_dist(flows: DataFrame) -> DataFrame:
    """flows (with `direction` and `hour`) -> flow_size_dist rows (hour null: whole day)."""
    f = flows.select("hour", "direction", flow_class(F.col("proto")).alias("flow_class"), "bytes", "packets")
    bb, bp = bins(f, "bytes"), bins(f, "packets")
    tb, tp = targets(bb, "bytes", top_share=True), targets(bp, "packets", top_share=False)
    rb, rp = resolve(f, "bytes", tb).localCheckpoint(eager=True), resolve(f, "packets", tp)
    pct = rb.unionByName(rp).where(F.col("what") != "top").groupBy(*GROUP).pivot(
        "what", [f"{v}_{name}" for v in ("bytes", "packets") for name, _ in PERCENTILES]).agg(F.first("v"))
    totals = (bb.groupBy(*GROUP).agg(F.sum("c").alias("flows"), F.sum("s").alias("bytes"))
              .join(bp.groupBy(*GROUP).agg(F.sum("s").alias("packets")), GROUP))
    out = (totals.join(pct, GROUP)
           .withColumn("bytes_mean", F.col("bytes") / F.col("flows"))
           .withColumn("packets_mean", F.col("packets") / F.col("flows"))
           .join(top_share(bb, tb, rb), GROUP, "left")
           .join(ccdf(bb, "bytes"), GROUP, "left").join(ccdf(bp, "packets"), GROUP, "left"))
    empty = F.array().cast("array<double>")
    for col in ("ccdf_bytes_x", "ccdf_bytes_y", "ccdf_packets_x", "ccdf_packets_y"):
        out = out.withColumn(col, F.coalesce(F.col(col), empty))  # groups of zero-size flows only
    out = out.withColumn("top1pct_bytes_share", F.coalesce("top1pct_bytes_share", F.lit(0.0)))
    for name, _ in PERCENTILES:
        out = out.withColumn(f"bytes_{name}", F.col(f"bytes_{name}").cast("long")).withColumn(
            f"packets_{name}", F.col(f"packets_{name}").cast("long"))
    return common.hour_to_null(out)


def run(ctx) -> None:
    if engines.for_reports(ctx) == "local":
        from . import flow_size_dist_duckdb

        if flow_size_dist_duckdb.run(ctx):
            return
    ctx.write(flow_size_dist(common.shared_flows(ctx)), NAME)
