"""active_summary: PingER-style RTT/loss/jitter per target per hour and per day, with
quality bands, the Mathis TCP throughput bound and TCP responsiveness.

Mathis et al. (1997): throughput <= MSS/RTT * C/sqrt(p), C = sqrt(3/2).
Zero-loss rule: with no loss observed p is unknown but small; zero_loss_rule
"upper_bound" uses p = 1/(sent+1) (flagged mathis_bound=true: the true loss is at most
about that, so the figure is a conservative lower estimate), "null" leaves it empty.
Responsiveness (time to recover from one loss): C_link * RTT^2 / (2 * MSS), bytes and seconds.
"""
from __future__ import annotations

import math

from flowlake.schemas.active_reports import ACTIVE_SUMMARY

NAME = "active_summary"
TABLES = (ACTIVE_SUMMARY,)
C_MATHIS = math.sqrt(1.5)
RTT_BANDS = ((64, "0-64"), (128, "64-128"), (256, "128-256"), (512, "256-512"))
LOSS_BANDS = ((0.001, "0-0.1%"), (0.01, "0.1-1%"), (0.025, "1-2.5%"), (0.05, "2.5-5%"), (0.12, "5-12%"))


def rtt_tests(active, keep: tuple = ()):
    """Active records that are ping-style RTT tests, with the metrics as columns (and the
    active columns named in keep, e.g. source)."""
    from pyspark.sql import functions as F  # noqa: PLC0415  (start-up: pyspark)

    m = F.col("metrics")
    return (active.where((F.col("test_type") == "rtt") & m.getItem("sent").isNotNull())
            .select(F.col("destination").alias("target"), "start", "end",
                    m.getItem("sent").alias("sent"), F.coalesce(m.getItem("received"), F.lit(0.0)).alias("received"),
                    m.getItem("rtt_min_ms").alias("rtt_min_ms"), m.getItem("rtt_avg_ms").alias("rtt_avg_ms"),
                    F.coalesce(m.getItem("rtt_median_ms"), m.getItem("rtt_avg_ms")).alias("rtt_median_ms"),
                    m.getItem("rtt_max_ms").alias("rtt_max_ms"), m.getItem("jitter_ms").alias("jitter_ms"),
                    *keep))


def _band(col, bands, top):
    from pyspark.sql import functions as F  # noqa: PLC0415  (start-up: pyspark)

    expr = None
    for limit, label in bands:
        expr = F.when(col < limit, label) if expr is None else expr.when(col < limit, label)
    return expr.otherwise(top)


def summarise(active, mss_bytes: int, link_capacity_bps: float, zero_loss_rule: str = "upper_bound"):
    """active (ACTIVE rows) -> ACTIVE_SUMMARY rows (without date), hourly and daily."""
    from pyspark.sql import functions as F  # noqa: PLC0415  (start-up: pyspark)

    tests = rtt_tests(active)
    out = []
    for period, unit in (("hour", "hour"), ("day", "day")):
        g = (tests.withColumn("period_start", F.date_trunc(unit, "start"))
             .groupBy("target", "period_start")
             .agg(F.count("*").alias("tests"),
                  F.sum("sent").cast("long").alias("sent"),
                  F.sum("received").cast("long").alias("received"),
                  F.min("rtt_min_ms").alias("rtt_min_ms"),
                  (F.sum(F.col("rtt_avg_ms") * F.col("received")) /
                   F.sum(F.when(F.col("rtt_avg_ms").isNotNull(), F.col("received")))).alias("rtt_avg_ms"),
                  F.percentile_approx("rtt_median_ms", 0.5, 10000).alias("rtt_median_ms"),
                  F.max("rtt_max_ms").alias("rtt_max_ms"),
                  F.avg("jitter_ms").alias("jitter_ms"),
                  F.avg(F.when(F.col("received") > 0, 1.0).otherwise(0.0)).alias("reachability"))
             .withColumn("period", F.lit(period)))
        out.append(g)
    df = out[0].unionByName(out[1])
    df = df.withColumn("loss", F.when(F.col("sent") > 0, (F.col("sent") - F.col("received")) / F.col("sent"))
                       .otherwise(F.lit(1.0)))
    rtt = F.col("rtt_avg_ms")
    df = df.withColumn("rtt_band", F.when(rtt.isNull(), F.lit(None)).otherwise(_band(rtt, RTT_BANDS, ">512")))
    df = df.withColumn("loss_band", _band(F.col("loss"), LOSS_BANDS, ">12%"))
    zero = F.col("loss") == 0
    if zero_loss_rule == "upper_bound":
        p = F.when(zero, 1.0 / (F.col("sent") + 1)).otherwise(F.col("loss"))
        bound = zero
    elif zero_loss_rule == "null":
        p = F.when(zero, F.lit(None)).otherwise(F.col("loss"))
        bound = F.when(zero, F.lit(None)).otherwise(F.lit(False))
    else:
        raise ValueError(f"[active] zero_loss_rule = {zero_loss_rule!r}: use 'upper_bound' or 'null'")
    rtt_s = rtt / 1000.0
    df = (df.withColumn("mathis_loss", F.when(rtt.isNull(), F.lit(None)).otherwise(p))
          .withColumn("mathis_bound", F.when(rtt.isNull(), F.lit(None)).otherwise(bound))
          .withColumn("mathis_throughput_bps",
                      F.when(rtt_s > 0, (mss_bytes * 8.0 / rtt_s) * C_MATHIS / F.sqrt(F.col("mathis_loss"))))
          .withColumn("responsiveness_s",
                      (link_capacity_bps / 8.0) * rtt_s * rtt_s / (2.0 * mss_bytes)))
    cols = [f.name for f in ACTIVE_SUMMARY.fields if f.name != "date"]
    return df.select(*cols)


def run(ctx) -> None:
    a = ctx.cfg.active
    ctx.results[NAME] = ctx.write(
        summarise(ctx.active(), int(a.mss_bytes), float(a.link_capacity_bps), a.zero_loss_rule), NAME)
