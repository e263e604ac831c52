"""bulk_impact: did bulk transfers hurt everyone else?

An RTT test is *loaded* when its [start, end] overlaps any bulk transfer of the day
(bulk_transfers table), else *unloaded*. Per target: median and p95 of the tests'
mean RTT, loss (lost/sent), jitter (median IPDV IQR), loaded - unloaded differences,
and a one-sided Mann-Whitney U test "loaded RTTs are higher" (scipy; null with fewer
than 2 tests on either side). `significant` means degradation an operator should care
about: the p-value, Holm-corrected for the day's tested targets, below
[active] bulk_impact_alpha AND the median RTT rising by at least
[active] bulk_impact_min_rtt_ms. An improvement is never significant. Throughput tests are set against the cross-traffic
the flows show during them (bytes pro-rated by overlap, flows between the test's own
endpoints excluded).
"""
from __future__ import annotations

from flowlake.schemas.active_reports import BULK_IMPACT, BULK_IMPACT_THROUGHPUT

from . import common
from .active_summary import rtt_tests

NAME = "bulk_impact"
TABLES = (BULK_IMPACT, BULK_IMPACT_THROUGHPUT)
DEPENDS = ("bulk_transfers",)


def mark_loaded(tests, bulk):
    """tests (target,start,end,...) + bulk (time_start,time_end) -> tests with boolean `loaded`."""
    from pyspark.sql import functions as F  # noqa: PLC0415  (start-up: pyspark)

    b = bulk.select(F.col("time_start").alias("b_start"), F.col("time_end").alias("b_end"))
    t = tests.withColumn("_tid", F.monotonically_increasing_id())
    hits = (t.join(b, (t.start <= b.b_end) & (t.end >= b.b_start), "inner")
            .select("_tid").distinct().withColumn("loaded", F.lit(True)))
    return (t.join(hits, "_tid", "left").withColumn("loaded", F.coalesce("loaded", F.lit(False))).drop("_tid"))


def holm(pvalues):
    """Holm-Bonferroni adjusted p-values (None stays None), in input order.

    Holm rather than Benjamini-Hochberg: every target's loaded tests share the same bulk
    windows, so the tests are dependent in ways BH's guarantee does not cover, and an
    operator acts on each flagged target; Holm bounds the chance of even one false flag
    per day under any dependence and is uniformly more powerful than Bonferroni.
    """
    idx = sorted((p, i) for i, p in enumerate(pvalues) if p is not None)
    out: list = [None] * len(pvalues)
    m, running = len(idx), 0.0
    for rank, (p, i) in enumerate(idx):
        running = max(running, min(1.0, (m - rank) * p))  # step-down, kept monotone
        out[i] = running
    return out


def _stats(pdf):
    import numpy as np  # noqa: PLC0415  (start-up: numpy)
    import pandas as pd  # noqa: PLC0415  (start-up: pandas)
    from scipy.stats import mannwhitneyu  # noqa: PLC0415  (start-up: scipy)

    row = {"target": pdf["target"].iloc[0]}
    sides = {}
    for flag, name in ((False, "unloaded"), (True, "loaded")):
        part = pdf[pdf["loaded"] == flag]
        rtt = part["rtt_avg_ms"].dropna().to_numpy(dtype=float)
        sent = float(part["sent"].sum())
        jit = part["jitter_ms"].dropna().to_numpy(dtype=float)
        sides[name] = rtt
        row[f"tests_{name}"] = int(len(part))
        row[f"rtt_median_{name}_ms"] = float(np.median(rtt)) if len(rtt) else None
        row[f"rtt_p95_{name}_ms"] = float(np.percentile(rtt, 95)) if len(rtt) else None
        row[f"loss_{name}"] = (sent - float(part["received"].sum())) / sent if sent else None
        row[f"jitter_{name}_ms"] = float(np.median(jit)) if len(jit) else None

    def diff(a, b):
        return None if row[a] is None or row[b] is None else row[a] - row[b]

    row["rtt_median_diff_ms"] = diff("rtt_median_loaded_ms", "rtt_median_unloaded_ms")
    row["loss_diff"] = diff("loss_loaded", "loss_unloaded")
    row["jitter_diff_ms"] = diff("jitter_loaded_ms", "jitter_unloaded_ms")
    u = p = None
    if len(sides["loaded"]) >= 2 and len(sides["unloaded"]) >= 2:
        res = mannwhitneyu(sides["loaded"], sides["unloaded"], alternative="greater")
        u, p = float(res.statistic), float(res.pvalue)
    row.update(mannwhitney_u=u, p_value=p, p_adjusted=None, significant=None)
    cols = [f.name for f in BULK_IMPACT.fields if f.name != "date"]
    return pd.DataFrame([row], columns=cols)


def judge(out, alpha: float, min_rtt_ms: float):
    """Per-target rows (pandas) -> p_adjusted (Holm over the targets tested) and
    `significant` = p_adjusted < alpha and median RTT up by at least min_rtt_ms."""
    out["p_adjusted"] = holm([None if v is None or v != v else float(v) for v in out["p_value"]])
    out["significant"] = [None if pa is None else bool(pa < alpha and d is not None and d == d and d >= min_rtt_ms)
                          for pa, d in zip(out["p_adjusted"], out["rtt_median_diff_ms"])]
    return out


def impact(active, bulk, alpha: float = 0.05, min_rtt_ms: float = 1.0):
    """active (ACTIVE rows) + bulk (BULK_TRANSFERS rows) -> BULK_IMPACT rows (without date).

    The statistics run on the driver: a day's active tests are small (thousands of
    rows), and this keeps Python UDFs (and a worker interpreter that must import
    flowlake) out of the job.
    """
    import pandas as pd  # noqa: PLC0415  (start-up: pandas)

    tests = mark_loaded(rtt_tests(active), bulk).select(
        "target", "loaded", "sent", "received", "rtt_avg_ms", "jitter_ms")
    pdf = pd.DataFrame([r.asDict() for r in tests.collect()],
                       columns=["target", "loaded", "sent", "received", "rtt_avg_ms", "jitter_ms"])
    rows = [_stats(g) for _, g in pdf.groupby("target", sort=True)] if len(pdf) else []
    out = judge(pd.concat([r.astype(object) for r in rows], ignore_index=True), alpha, min_rtt_ms) if rows else None
    schema = BULK_IMPACT.spark_ddl().split(", `date`")[0].replace(" NOT NULL", "")
    spark = active.sparkSession
    if out is None:
        return spark.createDataFrame([], schema)
    records = [tuple(None if (isinstance(v, float) and v != v) else v for v in rec)
               for rec in out.astype(object).itertuples(index=False, name=None)]
    return spark.createDataFrame(records, schema)


def throughput_vs_cross(active, flows, bulk):
    """Throughput tests + the day's flows -> BULK_IMPACT_THROUGHPUT rows (without date)."""
    from pyspark.sql import functions as F  # noqa: PLC0415  (start-up: pyspark)

    m = F.col("metrics")
    t = (active.where((F.col("test_type") == "throughput") & m.getItem("throughput_bps").isNotNull())
         .select(F.col("destination").alias("target"), "source", "start", "end", "tool",
                 m.getItem("throughput_bps").alias("throughput_bps"))
         .withColumn("_tid", F.monotonically_increasing_id()))
    f = flows.select("time_start", "time_end", "src_addr", "dst_addr", "bytes")
    fdur = F.greatest(F.col("time_end").cast("double") - F.col("time_start").cast("double"), F.lit(0.001))
    ov = (F.least("end", "time_end").cast("double") - F.greatest("start", "time_start").cast("double"))
    own = (((F.col("src_addr") == F.col("source")) & (F.col("dst_addr") == F.col("target")))
           | ((F.col("src_addr") == F.col("target")) & (F.col("dst_addr") == F.col("source"))))
    cross = (t.join(f, (t.start <= f.time_end) & (t.end >= f.time_start), "inner").where(~own)
             .withColumn("part", F.col("bytes") * F.least(F.lit(1.0), F.greatest(ov, F.lit(0.0)) / fdur))
             .groupBy("_tid").agg(F.sum("part").alias("cross_bytes")))
    b = bulk.select(F.col("time_start").alias("b_start"), F.col("time_end").alias("b_end"))
    nb = (t.join(b, (t.start <= b.b_end) & (t.end >= b.b_start), "inner").groupBy("_tid")
          .agg(F.count("*").alias("bulk_flows")))
    secs = F.greatest(F.col("end").cast("double") - F.col("start").cast("double"), F.lit(0.001))
    out = (t.join(cross, "_tid", "left").join(nb, "_tid", "left")
           .withColumn("cross_bytes", F.coalesce("cross_bytes", F.lit(0.0)))
           .withColumn("bulk_flows", F.coalesce("bulk_flows", F.lit(0)).cast("long"))
           .withColumn("cross_bps", F.col("cross_bytes") * 8.0 / secs))
    return out.select(*[f.name for f in BULK_IMPACT_THROUGHPUT.fields if f.name not in ("date", "count_at")])


def run(ctx) -> None:
    active, bulk = ctx.active(), ctx.report("bulk_transfers")
    a = ctx.cfg.active
    ctx.results[NAME] = ctx.write(impact(active, bulk, float(a.bulk_impact_alpha), float(a.bulk_impact_min_rtt_ms)),
                                  NAME)
    ctx.results["bulk_impact_throughput"] = ctx.write(
        throughput_vs_cross(active, common.site_flows(ctx), bulk), "bulk_impact_throughput")
