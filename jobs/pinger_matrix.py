"""pinger_matrix: PingER region-to-region matrices (issue 26) from the active RTT tests:
median RTT, loss, IPDV IQR, unreachability, derived TCP throughput and sample counts per
monitoring region x remote region, for the report date and for its month to date, each
cell with its PingER quality bands by name.

Definitions, as PingER's documentation gives them:
- A sample is one RTT test (PingER: 10 pings). Unreachable: a sample none of whose pings
  got a reply (PingER's CHEP97 slide, www-zeuthen.desy.de/CHEP97/slide/d334/tsld005.htm).
- IPDV IQR: PingER reports, for a period, the mean of the IQRs of its samples (PingER
  history tables' help, www-iepm.slac.stanford.edu/pinger/tools/table.html), so
  ipdv_iqr_ms is the mean of the samples' IQRs (collectors/active/pinger.py: jitter_ms).
- Derived TCP throughput: Mathis et al. as PingER applies it (tutorial,
  www.slac.stanford.edu/comp/net/wan-mon/tutorial.html, "TCP throughput"): MSS/RTT * C/sqrt(loss)
  with MSS 1460 bytes, the average RTT and C = 1 ([pinger] mathis_constant). With no loss
  PingER has no loss to put in; [active] zero_loss_rule decides as in active_summary.
- Quality bands (edges and names in [pinger]; a value below edge i is band i, at or above
  the last edge the last name). Where each default comes from:
  loss: PingER defines these bands, in the tutorial's packet-loss section
        (www.slac.stanford.edu/comp/net/wan-mon/tutorial.html#loss): excellent below 0.1 %,
        good below 1 %, acceptable below 2.5 %, poor below 5 %, very poor below 12 %, bad from
        12 % on. (The search tool stores only the opening of that page, so the table itself
        was not re-read for this module.) The edges are confirmed by PingER's other pages:
        Examples of the use of PingER (www-iepm.slac.stanford.edu/pinger/uses.html) calls loss
        above 5 % very poor, above 2.5 % poor and above 1 % no longer acceptable; the SLAC-RAL
        loss history (www.slac.stanford.edu/comp/net/wan-mon/ral.html) calls loss above 12 %
        bad and below 1 % low; Wikipedia's Packet loss article, citing PingER, gives below 1 %
        as good and 1 to 2.5 % as acceptable for streaming audio and video.
  RTT:  SLAC's region-to-region RTT bands (Cottrell et al., SLAC, "Passive and active
        monitoring on a high-performance network", PAM 2001; the PingER talk flowlake's
        lineage reports follow): White 0-64 ms, Green 64-128 ms, Yellow 128-256 ms (these
        three "OK"), Pink 256-512 ms, Red > 512 ms ("NOT OK"). These are the defaults, with
        those names: edges 64 / 128 / 256 / 512 ms. (An earlier version of this module said
        PingER defines no RTT bands: it does, in that talk.) As for every band here a value
        at an edge is in the band above it (64 ms is Green, 512 ms is Red): the talk's ranges
        do not say on which side an exact edge falls.
  IPDV: the talk's jitter is IQR(ipdv), ipdv(i) = RTT(i) - RTT(i-1): per sample the
        inter-quartile range of the inter-packet delay differences (collectors/active/
        pinger.py: jitter_ms; www.slac.stanford.edu/comp/net/wan-mon/daily-jitter.html), the
        period's value the mean of the samples' IQRs (table.html, the IQR entry). Its bands,
        which the talk takes from ETSI DTR/TIPHON-05001 V1.2.5 (1998-09): 75 ms good, 125 ms
        medium, 225 ms poor (good speech below 75 ms), i.e. the upper limits of good, medium
        and poor. These are the defaults: edges 75 / 125 / 225 ms, names good, medium, poor and
        a fourth, "bad", because the band mechanics put a value at or above the last edge in
        the last name and ETSI's 225 ms is the limit of poor, not its start; neither the talk
        nor ETSI names what lies beyond it, so "bad" is flowlake's word (the same the loss
        bands use for what lies past PingER's worst named band). A value at an edge is in the
        band above (75 ms is medium: "good speech < 75 ms").
  Unreachability: PingER defines it (a sample with no reply at all: the CHEP97 slide
        www-zeuthen.desy.de/CHEP97/slide/d334/tsld005.htm; www.slac.stanford.edu/comp/net/
        wan-mon/availability.htm) and compares regions by it (developed regions below about
        0.3 %, others 0.7 to 2 %: SLAC Confluence, PingER Africa report, pageId 32784), but it
        names no quality bands for it, so pinger_matrix reports unreachable_pct without a band.
"""
from __future__ import annotations

import datetime as dt
import logging

from flowlake.schemas.pinger import PINGER_MATRIX

from . import pinger_regions
from .active_summary import rtt_tests

log = logging.getLogger(__name__)
NAME = "pinger_matrix"
TABLES = (PINGER_MATRIX,)


def bands_of(cfg, metric: str) -> tuple[list[float], list[str]]:
    """([pinger] <metric>_band_edges_*, names) checked: ascending edges, one name more."""
    p = cfg.pinger
    unit = {"loss": "pct", "rtt": "ms", "ipdv": "ms"}[metric]
    key = f"{metric}_band_edges_{unit}"
    try:
        edges = [float(e) for e in getattr(p, key)]
    except (TypeError, ValueError) as exc:
        raise ValueError(f"[pinger] {key}: numbers expected ({exc})") from None
    names = [str(n) for n in getattr(p, f"{metric}_band_names")]
    if any(b <= a for a, b in zip(edges, edges[1:])):
        raise ValueError(f"[pinger] {key} = {edges}: edges must increase")
    if len(names) != len(edges) + 1:
        raise ValueError(f"[pinger] {metric}_band_names has {len(names)} names for {len(edges)} edges: "
                         f"give one more name than edges")
    return edges, names


def band(col, edges, names):
    """Spark column: the band name of col (null stays null)."""
    from pyspark.sql import functions as F  # noqa: PLC0415  (start-up: pyspark)

    expr = F.when(col.isNull(), F.lit(None).cast("string"))
    for edge, name in zip(edges, names):
        expr = expr.when(col < edge, F.lit(name))
    return expr.otherwise(F.lit(names[-1]))


def with_regions(spark, tests, regions: pinger_regions.Regions):
    """tests (rtt_tests rows + `source`) -> + src_region, dst_region; unknown hosts listed."""
    from pyspark.sql import functions as F  # noqa: PLC0415  (start-up: pyspark)

    rows = [(h, r["region"]) for h, r in regions.hosts.items()] or [("", pinger_regions.UNKNOWN)]
    m = spark.createDataFrame(rows, "host string, region string")
    src = m.select(F.col("host").alias("_s"), F.col("region").alias("src_region"))
    dst = m.select(F.col("host").alias("_d"), F.col("region").alias("dst_region"))
    out = (tests.withColumn("_s", F.lower(F.trim("source"))).withColumn("_d", F.lower(F.trim("target")))
           .join(F.broadcast(src), "_s", "left").join(F.broadcast(dst), "_d", "left")
           .fillna(pinger_regions.UNKNOWN, ["src_region", "dst_region"]).drop("_s", "_d"))
    return out


def unknown_hosts(tests, regions: pinger_regions.Regions) -> list[str]:
    """Hosts (sources and targets) of the tests that the regions file does not map."""
    from pyspark.sql import functions as F  # noqa: PLC0415  (start-up: pyspark)

    hosts = tests.select(F.col("source").alias("h")).union(tests.select(F.col("target").alias("h"))).distinct()
    return sorted({r.h or "" for r in hosts.collect() if (r.h or "").strip().lower() not in regions.hosts})


def matrix(tests, cfg, mss_bytes: int, zero_loss_rule: str):
    """tests (with src_region, dst_region, period, month) -> PINGER_MATRIX rows without date."""
    from pyspark.sql import functions as F  # noqa: PLC0415  (start-up: pyspark)

    g = (tests.groupBy("period", "month", "src_region", "dst_region")
         .agg(F.count("*").cast("long").alias("samples"),
              F.sum("sent").alias("sent"), F.sum("received").alias("received"),
              F.percentile("rtt_median_ms", 0.5).alias("rtt_median_ms"),
              (F.sum(F.col("rtt_avg_ms") * F.col("received")) /
               F.sum(F.when(F.col("rtt_avg_ms").isNotNull(), F.col("received")))).alias("rtt_avg_ms"),
              F.avg("jitter_ms").alias("ipdv_iqr_ms"),
              (100.0 * F.avg(F.when(F.col("received") > 0, 0.0).otherwise(1.0))).alias("unreachable_pct")))
    loss = F.when(F.col("sent") > 0, (F.col("sent") - F.col("received")) / F.col("sent")).otherwise(F.lit(1.0))
    g = g.withColumn("loss", loss).withColumn("loss_pct", 100.0 * F.col("loss"))
    if zero_loss_rule == "upper_bound":
        p = F.when(F.col("loss") == 0, 1.0 / (F.col("sent") + 1)).otherwise(F.col("loss"))
    elif zero_loss_rule == "null":
        p = F.when(F.col("loss") == 0, F.lit(None)).otherwise(F.col("loss"))
    else:
        raise ValueError(f"[active] zero_loss_rule = {zero_loss_rule!r}: use 'upper_bound' or 'null'")
    rtt_s = F.col("rtt_avg_ms") / 1000.0
    c = float(cfg.pinger.mathis_constant)
    g = g.withColumn("throughput_mbps", F.when((rtt_s > 0) & (F.col("loss") < 1),
                                               c * mss_bytes * 8.0 / rtt_s / F.sqrt(p) / 1e6))
    for metric, col in (("rtt", "rtt_median_ms"), ("loss", "loss_pct"), ("ipdv", "ipdv_iqr_ms")):
        edges, names = bands_of(cfg, metric)
        g = g.withColumn(f"{metric}_band", band(F.col(col), edges, names))
    return g.select(*[f.name for f in PINGER_MATRIX.fields if f.name != "date"])


def month_tests(ctx):
    """RTT tests of the report date (period 'day') and of its month up to it ('month')."""
    from pyspark.sql import functions as F  # noqa: PLC0415  (start-up: pyspark)

    day = ctx.date
    first = day.replace(day=1)
    month = f"{day:%Y-%m}"
    frames = []
    d = first
    while d <= day:
        if (ctx.lake / "active" / f"date={d.isoformat()}").exists():
            frames.append(ctx.active(d))
        d += dt.timedelta(days=1)
    if not frames:
        frames = [ctx.active(day)]  # an empty frame of the right shape
    active = frames[0]
    for f in frames[1:]:
        active = active.unionByName(f)
    tests = rtt_tests(active, keep=("source", "date")).withColumn("month", F.lit(month))
    days = tests.where(F.col("date") == day.isoformat()).withColumn("period", F.lit("day"))
    return days.unionByName(tests.withColumn("period", F.lit("month"))).drop("date")


def run(ctx) -> None:
    a = ctx.cfg.active
    regions = pinger_regions.load(ctx.cfg)
    tests = with_regions(ctx.spark, month_tests(ctx), regions).cache()
    unknown = unknown_hosts(tests, regions)
    if unknown:
        where = regions.path or "no [pinger] regions file set"
        log.warning("pinger_matrix %s: %d host(s) not in the regions file (%s), region 'unknown': %s",
                    ctx.date, len(unknown), where, ", ".join(h or "''" for h in unknown))
    ctx.shared["pinger_unknown_hosts"] = unknown
    try:
        ctx.write(matrix(tests, ctx.cfg, int(a.mss_bytes), a.zero_loss_rule), NAME)
    finally:
        tests.unpersist()
