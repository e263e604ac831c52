"""Job powerlaw_fits: CSN power-law fits of bytes and packets per flow, per hour and
per day, per class (tcp_in, tcp_out, udp, app:<top service>).

Spark reduces the flows to (hour, class, metric, value) -> (flows, bytes) first, so only
the distinct values travel to the driver (1e8 flows are a few 1e5 rows); the day's
histogram is the sum of its hours'. The fits themselves (xmin scan, likelihood ratios,
bootstrap p) then run as one Spark task per (hour, class, metric).
"""
from __future__ import annotations

import logging
import math
import time
import zlib

import numpy as np
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from flowlake.pipelines import port_map
from flowlake.schemas.powerlaw import POWERLAW_FITS

from . import common

log = logging.getLogger(__name__)

NAME = "powerlaw_fits"
TABLES = (POWERLAW_FITS,)
METRICS = ("bytes", "packets")
BASE_CLASSES = ("tcp_in", "tcp_out", "udp")
ALTERNATIVES = ("lognormal", "exponential", "stretched_exponential", "truncated_power_law")


# ---- pure transforms (DataFrame in -> DataFrame out) -------------------------------------------
def top_apps(flows: DataFrame, n: int) -> list[str]:
    """The n services with most flows; port-bucket fallbacks (other-...) are not services."""
    if n <= 0:
        return []
    rows = (flows.where(~F.col("app").startswith("other-"))
            .groupBy("app").count().orderBy(F.desc("count"), "app").limit(n).collect())
    return [r["app"] for r in rows]


def classify(flows: DataFrame, apps: list[str]) -> DataFrame:
    """One row per (flow, class it belongs to); needs columns proto, direction and (if apps) app.

    Direction comes from the site's local prefixes: inbound = dst local and src remote,
    outbound = src local and dst remote (common.direction)."""
    tags = [F.when((F.col("proto") == 6) & (F.col("direction") == "inbound"), F.lit("tcp_in")),
            F.when((F.col("proto") == 6) & (F.col("direction") == "outbound"), F.lit("tcp_out")),
            F.when(F.col("proto") == 17, F.lit("udp"))]
    if apps:
        tags.append(F.when(F.col("app").isin(apps), F.concat(F.lit("app:"), F.col("app"))))
    classes = F.filter(F.array(*tags), lambda c: c.isNotNull())
    return flows.withColumn("class", F.explode(classes))


def value_counts(classified: DataFrame) -> DataFrame:
    """(hour, class, metric, value) -> flows and bytes: the fits' whole input, per hour.
    Both metrics in one pass over the flows (a union of one aggregation per metric read
    them twice)."""
    metrics = F.explode(F.array(*[F.struct(F.lit(m).alias("metric"), F.col(m).cast("long").alias("value"))
                                  for m in METRICS]))
    return (classified.select("hour", "class", "bytes", metrics.alias("m"))
            .where(F.col("m.value") > 0)
            .groupBy("hour", "class", F.col("m.metric").alias("metric"), F.col("m.value").alias("value"))
            .agg(F.count(F.lit(1)).alias("flows"), F.sum("bytes").alias("bytes")))


# ---- fitting one window (runs inside a Spark task) ---------------------------------------------
def fit_group(task: dict, settings: dict) -> dict:
    """One output row (without date) from one window's value histogram."""
    from flowlake.jobs.powerlaw import Sample, fit  # noqa: PLC0415  (start-up: scipy)
    from flowlake.jobs.powerlaw.bootstrap import bootstrap_p  # noqa: PLC0415  (start-up: scipy)
    from flowlake.jobs.powerlaw.compare import compare_all  # noqa: PLC0415  (start-up: scipy)

    values = np.asarray(task["values"], dtype=np.float64)
    counts = np.asarray(task["counts"], dtype=np.int64)
    nbytes = np.asarray(task["bytes"], dtype=np.float64)
    row = {"hour": task["hour"], "class": task["class"], "metric": task["metric"],
           "flows": int(counts.sum()), "distinct_values": int(values.size), "discrete": True,
           "xmin": None, "alpha": None, "sigma": None, "n_tail": None, "tail_share_flows": None,
           "tail_share_bytes": None, "ks_d": None, "p": None, "bootstrap_replicates": 0,
           "lr_r": None, "lr_p": None, "ccdf_x": None, "ccdf_data": None, "ccdf_model": None,
           "insufficient": True, "reason": ""}
    if values.size < 2:
        row["reason"] = f"{values.size} distinct value(s): nothing to fit"
        return row
    s = Sample.from_pairs(values, counts)
    res = fit(s, discrete=True, min_tail=settings["min_tail"])
    if res.insufficient:
        row["reason"] = res.reason
        return row
    tail = values >= res.xmin
    total_bytes = float(nbytes.sum())
    row.update(xmin=res.xmin, alpha=res.alpha, sigma=res.sigma, n_tail=res.n_tail,
               tail_share_flows=res.tail_share,
               tail_share_bytes=float(nbytes[tail].sum()) / total_bytes if total_bytes > 0 else None,
               ks_d=res.D, insufficient=False)
    cmp = compare_all(res, ALTERNATIVES)
    row["lr_r"] = {k: _finite(v.R) for k, v in cmp.items()}
    row["lr_p"] = {k: _finite(v.p) for k, v in cmp.items()}
    x, data_ccdf, model_ccdf = res.ccdf_points(settings["ccdf_points"])
    row.update(ccdf_x=x, ccdf_data=data_ccdf, ccdf_model=model_ccdf)
    if settings["replicates"] > 0 and (task["hour"] is None or settings["bootstrap_hourly"]):
        # str hash() is salted per process: crc32 keeps p reproducible across runs
        seed = zlib.crc32(f'{task["hour"]}/{task["class"]}/{task["metric"]}/{settings["seed"]}'.encode())
        b = bootstrap_p(res, settings["replicates"], seed=seed)
        row["p"], row["bootstrap_replicates"] = _finite(b.p), b.replicates
    return row


def _finite(v):
    return float(v) if v is not None and math.isfinite(v) else None


def build_tasks(rows) -> list[dict]:
    """Group (hour, class, metric, value, flows, bytes) rows (tuples, or a pandas frame of
    those columns) into one task per hour window and one per day (hour None, the sum of the
    hours)."""
    import pandas as pd  # noqa: PLC0415  (start-up: pandas)

    cols = ["hour", "class", "metric", "value", "flows", "bytes"]
    df = rows[cols] if isinstance(rows, pd.DataFrame) else pd.DataFrame(rows, columns=cols)
    if df.empty:
        return []
    day = df.groupby(["class", "metric", "value"], as_index=False)[["flows", "bytes"]].sum()
    day.insert(0, "hour", -1)
    both = pd.concat([df.astype({"hour": "int64"}), day], ignore_index=True)
    # one sort, then the windows are runs of equal (hour, class, metric): a groupby with a
    # sort per group cost 3.7 s for the demo day's 1.2M pairs (0.7 s so)
    hour = both["hour"].to_numpy(np.int64)
    cls_codes, cls_names = pd.factorize(both["class"], sort=True)
    met_codes, met_names = pd.factorize(both["metric"], sort=True)
    values = both["value"].to_numpy(np.int64)
    order = np.lexsort((values, met_codes, cls_codes, hour))
    hour, cls_codes, met_codes, values = hour[order], cls_codes[order], met_codes[order], values[order]
    flows = both["flows"].to_numpy(np.int64)[order]
    nbytes = both["bytes"].to_numpy(np.float64)[order]
    change = (np.diff(hour) != 0) | (np.diff(cls_codes) != 0) | (np.diff(met_codes) != 0)
    starts = np.concatenate([[0], np.flatnonzero(change) + 1])
    ends = np.append(starts[1:], len(values))
    return [{"hour": None if hour[a] == -1 else int(hour[a]), "class": cls_names[cls_codes[a]],
             "metric": met_names[met_codes[a]], "values": values[a:b], "counts": flows[a:b], "bytes": nbytes[a:b]}
            for a, b in zip(starts, ends, strict=True)]


def settings_from(cfg) -> dict:
    pl = getattr(cfg, "powerlaw", None)
    get = (lambda k, d: getattr(pl, k, d)) if pl is not None else (lambda k, d: d)
    return {"min_tail": int(get("min_tail", 50)), "replicates": int(get("bootstrap_replicates", 20)),
            "top_apps": int(get("top_apps", 5)), "ccdf_points": int(get("ccdf_points", 40)),
            "bootstrap_hourly": bool(get("bootstrap_hourly", False)), "seed": 0}


def _expected_seconds(task: dict, settings: dict) -> float:
    """A window's fit time, roughly (measured on the demo day: ~0.07 s fixed, mostly the
    alternatives' Nelder-Mead, plus ~20 us per distinct value, doubled by a bootstrap)."""
    boot = settings["replicates"] > 0 and (task["hour"] is None or settings["bootstrap_hourly"])
    return 0.07 + 2e-5 * len(task["values"]) * (2.0 if boot else 1.0)


def balanced_groups(tasks: list[dict], settings: dict, groups: int) -> list[list[int]]:
    """Task indexes in `groups` lists of about equal expected time: the longest first, each
    to the least loaded list (LPT). One Spark task per list: a task per window cost ~0.1 s
    of Spark's own per window (59 s for the demo day's 400 against 31 s in 64 slices), and
    slices of the size-sorted list put the day windows together in the first."""
    import heapq  # noqa: PLC0415  (only here)

    cost = [_expected_seconds(t, settings) for t in tasks]
    heap = [(0.0, g) for g in range(max(1, min(groups, len(tasks))))]
    out: list[list[int]] = [[] for _ in heap]
    for i in sorted(range(len(tasks)), key=lambda i: -cost[i]):
        load, g = heapq.heappop(heap)
        out[g].append(i)
        heapq.heappush(heap, (load + cost[i], g))
    return [g for g in out if g]


def fit_tasks(spark, tasks: list[dict], settings: dict) -> list[dict]:
    if not tasks:
        return []
    from flowlake.jobs.powerlaw.bootstrap import python_workers_ready  # noqa: PLC0415  (start-up: scipy)

    sc = python_workers_ready(spark)
    groups = balanced_groups(tasks, settings, 4 * sc.defaultParallelism)
    # the histograms go to the workers once, as a broadcast: inside the tasks they made
    # Spark warn of an 8 MB task on the demo day
    windows = sc.broadcast(tasks)
    try:
        rdd = sc.parallelize(groups, len(groups))
        return rdd.flatMap(lambda group: [fit_group(windows.value[i], settings) for i in group]).collect()
    finally:
        windows.unpersist()


def run(ctx) -> None:
    settings = settings_from(ctx.cfg)
    flows = common.shared_flows(ctx)
    apps: list[str] = []
    if settings["top_apps"] > 0:
        flows = common.with_app(flows, port_map.from_config(ctx.cfg))
        apps = top_apps(flows, settings["top_apps"])
    counts = value_counts(classify(flows, apps)).select("hour", "class", "metric", "value", "flows", "bytes")
    # as Arrow, not Rows: the demo day's 1.2M pairs took 6-15 s to collect as Rows, 1-2 s so
    started = time.monotonic()
    pairs = counts.toArrow().to_pandas()
    tasks = build_tasks(pairs)
    log.info("powerlaw_fits %s: %d windows from %d (value, count) pairs in %.1f s", ctx.date, len(tasks),
             len(pairs), time.monotonic() - started)
    started = time.monotonic()
    out = fit_tasks(ctx.spark, tasks, settings)
    log.info("powerlaw_fits %s: %d windows fitted in %.1f s", ctx.date, len(out), time.monotonic() - started)
    schema = _schema_without_date()
    df = ctx.spark.createDataFrame([tuple(r[f.name] for f in schema.fields) for r in out], schema)
    ctx.write(df, NAME)


def _schema_without_date():
    from pyspark.sql.types import StructType  # noqa: PLC0415  (start-up: pyspark)

    full = POWERLAW_FITS.spark_schema()
    return StructType([f for f in full.fields if f.name not in ("date", "count_at")])  # count_at: ctx.write
