"""Traffic time series: 5-minute bits/s and packets/s per exporter+interface, per
protocol and in total, each per direction; plus per day the peak, mean and 95th
percentile of those 288 rates (kind = 'daily').

A flow's bytes and packets are spread evenly over [time_start, time_end]: a 20-minute
transfer then shows as 20 minutes of traffic, not as a spike in its first bucket.
A flow with zero duration lands entirely in the bucket of its start.
"""
from __future__ import annotations

import datetime as dt
import math

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from flowlake.schemas.reports import TRAFFIC_TS

from . import common, count_once

NAME = "traffic_ts"
TABLES = (TRAFFIC_TS,)
BUCKET_SECONDS = 300
DAY_SECONDS = 86400
BUCKETS = DAY_SECONDS // BUCKET_SECONDS  # 288
P95_RANK = math.ceil(0.95 * BUCKETS)  # nearest rank, 1-based: 274 of 288
SERIES = {"interface": ("exporter", "input_if"), "proto": ("proto",), "total": ()}


def day_start(date: dt.date) -> int:
    return int(dt.datetime(date.year, date.month, date.day, tzinfo=dt.timezone.utc).timestamp())


def spread(flows: DataFrame, date: dt.date) -> DataFrame:
    """One row per (flow, 5-minute bucket of `date` it overlaps) with its share of the
    flow's bytes and packets; `b` = bucket index 0..287."""
    d0 = day_start(date)
    d1 = d0 + DAY_SECONDS
    s = F.unix_millis("time_start") / 1000.0
    e = F.unix_millis("time_end") / 1000.0
    dur = F.greatest(e - s, F.lit(0.0))
    lo, hi = F.greatest(s, F.lit(float(d0))), F.least(e, F.lit(float(d1)))
    keep = F.when(dur == 0, (s >= d0) & (s < d1)).otherwise(hi > lo)
    b0 = F.floor((lo - d0) / BUCKET_SECONDS)
    b1 = F.when(dur == 0, b0).otherwise(F.greatest(b0, F.ceil((hi - d0) / BUCKET_SECONDS) - 1))
    out = (flows.where(keep)
           .withColumn("_dur", dur).withColumn("_s", s).withColumn("_e", e)
           .withColumn("b", F.explode(F.when(b0 == b1, F.array(b0)).otherwise(F.sequence(b0, b1)))))
    b_lo = F.col("b") * BUCKET_SECONDS + d0
    overlap = F.least(F.col("_e"), b_lo + BUCKET_SECONDS) - F.greatest(F.col("_s"), b_lo)
    frac = F.when(F.col("_dur") == 0, F.lit(1.0)).otherwise(overlap / F.col("_dur"))
    return (out.withColumn("bytes", F.col("bytes") * frac).withColumn("packets", F.col("packets") * frac)
            .select("b", "direction", "exporter", "input_if", "proto", "bytes", "packets"))


def series_rows(parts: DataFrame, date: dt.date) -> DataFrame:
    """kind='ts' rows for every series, direction (incl. 'all') and bucket."""
    base = parts.groupBy("b", "direction", "exporter", "input_if", "proto").agg(
        F.sum("bytes").alias("bytes"), F.sum("packets").alias("packets"))
    # small (buckets x series keys) but feeds three roll-ups and the daily summary:
    # materialise once instead of re-spreading every flow four times
    base = base.localCheckpoint(eager=True)
    base = base.unionByName(base.withColumn("direction", F.lit("all")))
    out = None
    for name, keys in SERIES.items():
        level = base.groupBy("b", "direction", *keys).agg(F.sum("bytes").alias("bytes"), F.sum("packets").alias("packets"))
        for col, typ in (("exporter", "string"), ("input_if", "long"), ("proto", "int")):
            if col not in keys:
                level = level.withColumn(col, F.lit(None).cast(typ))
        level = level.withColumn("series", F.lit(name))
        out = level if out is None else out.unionByName(level)
    d0 = day_start(date)
    return (out.withColumn("kind", F.lit("ts"))
            .withColumn("hour", (F.col("b") / (3600 // BUCKET_SECONDS)).cast("int"))
            .withColumn("bucket", F.timestamp_seconds(F.col("b") * BUCKET_SECONDS + d0))
            .withColumn("bps", F.col("bytes") * 8 / BUCKET_SECONDS)
            .withColumn("pps", F.col("packets") / BUCKET_SECONDS)
            .drop("b"))


def daily_rows(ts: DataFrame) -> DataFrame:
    """kind='daily' rows: mean, peak and nearest-rank p95 over all 288 buckets, the
    buckets without traffic counting as zero."""
    def p95(col: str):
        values = F.sort_array(F.collect_list(col))
        zeros = BUCKETS - F.size(values)
        return F.when(zeros >= P95_RANK, F.lit(0.0)).otherwise(F.element_at(values, (P95_RANK - zeros).cast("int")))

    keys = ["series", "direction", "exporter", "input_if", "proto"]
    return (ts.groupBy(*keys).agg(
                F.sum("bytes").alias("bytes"), F.sum("packets").alias("packets"),
                F.max("bps").alias("peak_bps"), p95("bps").alias("p95_bps"),
                F.max("pps").alias("peak_pps"), p95("pps").alias("p95_pps"))
            .withColumn("kind", F.lit("daily"))
            .withColumn("hour", F.lit(None).cast("int"))
            .withColumn("bucket", F.lit(None).cast("timestamp"))
            .withColumn("bps", F.col("bytes") * 8 / DAY_SECONDS)
            .withColumn("pps", F.col("packets") / DAY_SECONDS))


def traffic_ts(flows: DataFrame, date: dt.date) -> DataFrame:
    """flows (with `direction`) -> traffic_ts rows ('ts' and 'daily')."""
    ts = series_rows(spread(flows, date), date)
    nulls = {c: F.lit(None).cast("double") for c in ("peak_bps", "p95_bps", "peak_pps", "p95_pps")}
    ts_full = ts.withColumns(nulls)
    daily = daily_rows(ts)
    return ts_full.unionByName(daily)


def run(ctx) -> None:
    cols = ["time_start", "time_end", "exporter", "input_if", "proto", "packets", "bytes", "direction"]
    today = common.shared_flows(ctx).select(*cols)
    # Flows of the previous day still running after midnight contribute to today.
    d0 = dt.datetime(ctx.date.year, ctx.date.month, ctx.date.day, tzinfo=dt.timezone.utc)
    # Counted by the site's rule as today's are (issue 34): the previous day's observations that
    # end within the rule's window of midnight, so every observation of a flow still running is
    # matched with its siblings; those running after midnight are kept.
    rule, window = count_once.settings(ctx.cfg)
    prev = ctx.flows(ctx.date - dt.timedelta(days=1))
    prev = count_once.count_once(prev.where(F.col("time_end") > F.lit(d0 - dt.timedelta(seconds=window))), rule, window)
    prev = prev.where(F.col("time_end") > F.lit(d0))
    prev = common.with_direction(prev, ctx.cfg.site.local_prefixes).select(*cols)
    ctx.write(traffic_ts(today.unionByName(prev), ctx.date), NAME)
