"""Top talkers: the N largest sources, destinations and pairs by bytes, packets and
flows, per hour and for the whole day, per direction, with the change of rank since
the previous day. Same lists as `nfdump -s srcip/bytes`, `-s dstip/packets`, ...

Cost is what matters here (10M flows give ~7M hourly pairs and ~1,100 lists), so:
- one shuffle of the flows (to hourly pair totals); every other level is rolled up
  from those, never from the flows again;
- no full sort for ranking: a tiny histogram of each metric (log2 buckets) per list
  gives a threshold that at least N keys reach, so only keys that can be in the top N
  (typically a few hundred per list) reach the window that ranks them exactly.
"""
from __future__ import annotations

import datetime as dt
import logging

from pyspark import StorageLevel
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from flowlake.jobs import common, engines
from flowlake.schemas.reports import TOP_TALKERS

log = logging.getLogger(__name__)

NAME = "top_talkers"
TABLES = (TOP_TALKERS,)
BY = {"src": ("src_addr",), "dst": ("dst_addr",), "pair": ("src_addr", "dst_addr")}
METRICS = ("bytes", "packets", "flows")
SUMS = ["bytes", "packets", "flows"]
LIST = ["hour", "direction", "by"]  # one ranked list per value of these
SUB_BUCKETS = 4  # histogram buckets per power of two: finer = fewer survivors


def pair_totals(flows: DataFrame) -> DataFrame:
    """One row per (hour, direction, src_addr, dst_addr): the only pass over the flows."""
    return (flows.groupBy("hour", "direction", "src_addr", "dst_addr")
            .agg(F.sum("bytes").alias("bytes"), F.sum("packets").alias("packets"), F.count(F.lit(1)).alias("flows")))


def key_totals(pairs: DataFrame) -> DataFrame:
    """Totals per key for src and dst, every hour (incl. DAY_HOUR) and direction (incl. 'all')."""
    out = []
    for by in ("src", "dst"):
        keys = BY[by]
        level = pairs.groupBy("hour", "direction", *keys).agg(*[F.sum(c).alias(c) for c in SUMS])
        level = common.rollup_hour_direction(level, list(keys), SUMS)
        other = "dst_addr" if by == "src" else "src_addr"
        out.append(level.withColumn(other, F.lit(None).cast("string")).withColumn("by", F.lit(by))
                   .select("hour", "direction", "by", "src_addr", "dst_addr", *SUMS))
    return out[0].unionByName(out[1])


def pair_levels(pairs: DataFrame) -> DataFrame:
    """Pair totals per hour and for the day, per direction (no 'all' rows: a pair has one
    direction, so the 'all' list is taken from the directions' lists in rank_pairs)."""
    day = pairs.groupBy("direction", "src_addr", "dst_addr").agg(*[F.sum(c).alias(c) for c in SUMS])
    both = pairs.unionByName(day.withColumn("hour", F.lit(common.DAY_HOUR)))
    return both.withColumn("by", F.lit("pair")).select("hour", "direction", "by", "src_addr", "dst_addr", *SUMS)


def _bucket(col: str):
    """Monotone bucket of a non-negative count: floor(log2(v) * SUB_BUCKETS); -1 for 0."""
    v = F.col(col)
    return F.when(v > 0, F.floor(F.log2(v.cast("double")) * SUB_BUCKETS)).otherwise(F.lit(-1)).cast("int")


def thresholds(keys: DataFrame, top_n: int) -> DataFrame:
    """(hour, direction, by, metric, floor): per list and metric the highest bucket such
    that at least top_n keys lie in it or above. Every key of the top N lies there too
    (the N-th largest value is at least that bucket's lower bound); lists with fewer
    than top_n keys get no row and are kept whole."""
    cells = keys.select(*LIST, F.explode(F.array(*[
        F.struct(F.lit(m).alias("metric"), _bucket(m).alias("b")) for m in METRICS])).alias("x"))
    hist = cells.groupBy(*LIST, "x.metric", "x.b").agg(F.count(F.lit(1)).alias("n"))
    down = Window.partitionBy(*LIST, "metric").orderBy(F.col("b").desc()).rowsBetween(Window.unboundedPreceding, 0)
    return (hist.withColumn("at_least", F.sum("n").over(down)).where(F.col("at_least") >= top_n)
            .groupBy(*LIST, "metric").agg(F.max("b").alias("floor")))


def candidates(keys: DataFrame, top_n: int) -> DataFrame:
    """The keys that can be in some list's top N for some metric: one broadcast join
    with the per-list floors (pivoted to one column per metric) and one filter."""
    floors = thresholds(keys, top_n).groupBy(*LIST).pivot("metric", list(METRICS)).agg(F.first("floor"))
    floors = F.broadcast(floors.select(*[F.col(c).alias(f"_{c}") for c in LIST],
                                       *[F.col(m).alias(f"_floor_{m}") for m in METRICS]))
    on = F.col("hour").eqNullSafe(F.col("_hour")) & F.col("direction").eqNullSafe(F.col("_direction")) \
        & F.col("by").eqNullSafe(F.col("_by"))
    # no floor: the list has fewer than top_n keys and is kept whole
    keep = [F.col(f"_floor_{m}").isNull() | (_bucket(m) >= F.col(f"_floor_{m}")) for m in METRICS]
    return (keys.join(floors, on, "left").where(keep[0] | keep[1] | keep[2])
            .drop(*[f"_{c}" for c in LIST], *[f"_floor_{m}" for m in METRICS]))


def rank(keys: DataFrame, top_n: int) -> DataFrame:
    """Rank 1..top_n per (hour, direction, by) for each metric; ties: the metric, then the
    other metrics descending, then address text ascending (documented in the schema)."""
    keys = keys.persist(StorageLevel.MEMORY_AND_DISK)  # read twice: histogram and filter
    # the candidates are few (about top_n per list and metric): materialise them once
    cand = candidates(keys, top_n).localCheckpoint(eager=True)
    keys.unpersist()
    out = []
    for metric in METRICS:
        others = [m for m in METRICS if m != metric]
        order = [F.col(metric).desc(), *[F.col(m).desc() for m in others],
                 F.col("src_addr").asc_nulls_first(), F.col("dst_addr").asc_nulls_first()]
        w = Window.partitionBy(*LIST).orderBy(*order)
        out.append(cand.withColumn("rank", F.row_number().over(w)).where(F.col("rank") <= top_n)
                   .withColumn("metric", F.lit(metric)))
    result = out[0].unionByName(out[1]).unionByName(out[2])
    return result.withColumn("rank", F.col("rank").cast("int"))


def add_share(ranked: DataFrame, totals: DataFrame) -> DataFrame:
    """share = key's metric / all of that metric in the same hour and direction."""
    t = totals.select("hour", "direction", *[F.col(c).alias(f"total_{c}") for c in SUMS])
    joined = ranked.join(t, ["hour", "direction"], "left")
    share = F.lit(None).cast("double")
    for m in METRICS:
        share = F.when(F.col("metric") == m, F.col(m) / F.col(f"total_{m}")).otherwise(share)
    return joined.withColumn("share", share).drop(*[f"total_{c}" for c in SUMS])


def add_rank_change(today: DataFrame, previous: DataFrame | None) -> DataFrame:
    """rank_change = previous rank - today's rank (positive = climbed); null if new."""
    if previous is None:
        return today.withColumn("rank_change", F.lit(None).cast("int"))
    prev = previous.select(
        F.coalesce(F.col("hour"), F.lit(common.DAY_HOUR)).alias("p_hour"), F.col("direction").alias("p_direction"),
        F.col("by").alias("p_by"), F.col("metric").alias("p_metric"), F.col("src_addr").alias("p_src"),
        F.col("dst_addr").alias("p_dst"), F.col("rank").alias("p_rank"))
    t_hour = F.coalesce(F.col("hour"), F.lit(common.DAY_HOUR))
    cond = ((t_hour == F.col("p_hour")) & (F.col("direction") == F.col("p_direction")) & (F.col("by") == F.col("p_by"))
            & (F.col("metric") == F.col("p_metric")) & F.col("src_addr").eqNullSafe(F.col("p_src"))
            & F.col("dst_addr").eqNullSafe(F.col("p_dst")))
    joined = today.join(prev, cond, "left")
    return (joined.withColumn("rank_change", (F.col("p_rank") - F.col("rank")).cast("int"))
            .drop("p_hour", "p_direction", "p_by", "p_metric", "p_src", "p_dst", "p_rank"))


def rank_pairs(levels: DataFrame, top_n: int) -> DataFrame:
    """Rank pairs per direction, then 'all' from the union of the directions' top N:
    every pair belongs to exactly one direction, so the overall top N is among them."""
    per_dir = rank(levels, top_n)
    listed = per_dir.drop("rank", "metric").distinct().withColumn("direction", F.lit("all"))
    return per_dir.unionByName(rank(listed, top_n))


def top_talkers(flows: DataFrame, top_n: int, previous: DataFrame | None = None, pairs: DataFrame | None = None) -> DataFrame:
    """flows (with `direction` and `hour`) -> the top_talkers table (hour null = day).
    `pairs` = pair_totals(flows) when the caller has it cached."""
    pairs = pair_totals(flows) if pairs is None else pairs
    totals = common.rollup_hour_direction(pairs.groupBy("hour", "direction").agg(*[F.sum(c).alias(c) for c in SUMS]), [], SUMS)
    keyed = rank(key_totals(pairs), top_n).unionByName(rank_pairs(pair_levels(pairs), top_n))
    ranked = add_share(keyed, totals)
    ranked = common.hour_to_null(ranked)
    return add_rank_change(ranked, previous)


def run(ctx) -> None:
    top_n = int(ctx.cfg.reports.top_n)
    if top_n < 1:
        raise ValueError(f"config [reports] top_n = {top_n}: must be at least 1")
    if engines.for_reports(ctx) == "local":
        from . import top_talkers_local

        log.info("top_talkers for %s on this machine ([reports] engine)", ctx.date)
        if top_talkers_local.run(ctx):
            return
    flows = common.shared_flows(ctx)
    previous = ctx.report(NAME, ctx.date - dt.timedelta(days=1))
    # the pair totals feed five aggregations: compute them once
    pairs = pair_totals(flows).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        ctx.write(top_talkers(flows, top_n, previous, pairs=pairs), NAME)
    finally:
        pairs.unpersist()
