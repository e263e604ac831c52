"""behaviour_needs: per behaviour class and RTT-tested path of the day, whether the
measured latency, jitter and loss (active results) meet what the class needs.

Needs (one-way latency, jitter, loss), with their sources:
- latency: the tele-immersion data-type requirements of Leigh, Johnson & DeFanti (EVL,
  "Issues in the design of a flexible distributed architecture for supporting
  persistence and interoperability in collaborative virtual environments", SC'97;
  also Leigh's CAVERN thesis, evl.uic.edu/entry.php?id=1315): tracking < 10 ms,
  audio < 30 ms, simulation < 30 ms, video < 100 ms, database < 100 ms.
- jitter and loss of the interactive, jitter-sensitive classes: ITU-T Y.1541 QoS class 0
  (IPDV 50 ms, IPLR 1e-3). EVL's own trials found jitter hurt collaborative work more
  than latency (Park & Kenyon, evl.uic.edu/cavern/users/studies.html), so it is checked.
- bulk classes and `other`: throughput-bound or best effort, no latency/jitter need.
Measured per target (RTT tests of the day): one-way latency = median RTT / 2, jitter =
median of the tests' IPDV inter-quartile ranges, loss = lost / sent.
"""
from __future__ import annotations

from flowlake.schemas.pinger import BEHAVIOUR_NEEDS

from .active_summary import rtt_tests
from .behaviour_classes import CLASSES

NAME = "behaviour_needs"
TABLES = (BEHAVIOUR_NEEDS,)
DEPENDS = ("behaviour_classes",)
LEIGH = "Leigh, Johnson, DeFanti SC'97 (EVL tele-immersion data types)"
Y1541 = "ITU-T Y.1541 class 0"
# class -> (latency ms, jitter ms, loss %, source)
NEEDS = {
    "avatar": (10.0, 50.0, 0.1, f"latency: {LEIGH}, tracking; jitter, loss: {Y1541}"),
    "audio": (30.0, 50.0, 0.1, f"latency: {LEIGH}, audio; jitter, loss: {Y1541}"),
    "video": (100.0, 50.0, 0.1, f"latency: {LEIGH}, video; jitter, loss: {Y1541}"),
    "realtime_state": (30.0, 50.0, 0.1, f"latency: {LEIGH}, simulation; jitter, loss: {Y1541}"),
    "state_update": (100.0, None, None, f"latency: {LEIGH}, database (reliable transport: no jitter/loss need)"),
    "small_bulk": (None, None, None, "throughput-bound: no latency/jitter need"),
    "large_bulk": (None, None, None, "throughput-bound: no latency/jitter need"),
    "streaming_bulk": (None, None, None, "throughput-bound (paced): no latency/jitter need"),
    "other": (None, None, None, "best effort: no need stated"),
}


def paths(active):
    """Per target: latency_ms (median RTT / 2), jitter_ms, loss_pct of the day's RTT tests."""
    from pyspark.sql import functions as F

    return (rtt_tests(active).groupBy("target")
            .agg((F.percentile("rtt_median_ms", 0.5) / 2).alias("latency_ms"),
                 F.percentile("jitter_ms", 0.5).alias("jitter_ms"),
                 (100.0 * (F.sum("sent") - F.sum("received")) / F.sum("sent")).alias("loss_pct")))


def needs(class_flows, measured):
    """class_flows (class, flows) x measured paths -> BEHAVIOUR_NEEDS rows without date."""
    from pyspark.sql import functions as F

    spark = measured.sparkSession
    table = spark.createDataFrame([(c, *NEEDS[c]) for c in CLASSES],
                                  "class string, latency_need_ms double, jitter_need_ms double, "
                                  "loss_need_pct double, source string")
    df = table.join(class_flows, "class", "left").fillna(0, ["flows"]).crossJoin(measured)
    checks = []
    for need, got, out in (("latency_need_ms", "latency_ms", "meets_latency"), ("jitter_need_ms", "jitter_ms", "meets_jitter"),
                           ("loss_need_pct", "loss_pct", "meets_loss")):
        df = df.withColumn(out, F.when(F.col(need).isNotNull() & F.col(got).isNotNull(), F.col(got) <= F.col(need)))
        checks.append((F.col(need), F.col(out)))
    stated = None
    for need, ok in checks:
        stated = need.isNotNull() if stated is None else stated | need.isNotNull()
    all_ok = None
    for need, ok in checks:  # an unmeasured need (null) leaves the verdict open
        term = F.when(need.isNull(), F.lit(True)).otherwise(ok)
        all_ok = term if all_ok is None else all_ok & term
    df = df.withColumn("meets", F.when(stated, all_ok))
    return df.select(*[f.name for f in BEHAVIOUR_NEEDS.fields if f.name != "date"])


def run(ctx) -> None:
    from pyspark.sql import functions as F

    classified = ctx.shared.get("behaviour_flows")
    if classified is None:  # run alone: classify again
        from .behaviour_classes import classify

        classified = classify(ctx.flows(), ctx.cfg.behaviour)
    class_flows = classified.groupBy("class").agg(F.count("*").cast("long").alias("flows"))
    ctx.write(needs(class_flows, paths(ctx.active())), NAME)
