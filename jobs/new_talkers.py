"""New talkers: addresses seen today but in none of the previous N days.

History comes from the compact `daily_hosts` table this job also writes (one row per
address and day), so a 7-day look-back reads 7 small tables, not 7 days of flows. A
previous day with flows but no daily_hosts (the job was not run then) is rebuilt
from its flows on the fly.
"""
from __future__ import annotations

import datetime as dt

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from flowlake.schemas.security import DAILY_HOSTS, NEW_TALKERS

from . import common

NAME = "new_talkers"
TABLES = (DAILY_HOSTS, NEW_TALKERS)


def _ends(flows: DataFrame) -> DataFrame:
    """Both ends of every flow as (address, role, peer, ...)."""
    cols = ["bytes", "time_start", "time_end"]
    src = flows.select(F.col("src_addr").alias("address"), F.lit("src").alias("role"),
                       F.col("dst_addr").alias("peer"), *cols)
    dst = flows.select(F.col("dst_addr").alias("address"), F.lit("dst").alias("role"),
                       F.col("src_addr").alias("peer"), *cols)
    return src.unionByName(dst)


def daily_hosts(flows: DataFrame) -> DataFrame:
    """flows -> one row per address (DAILY_HOSTS columns, no date); a flow counts once per end."""
    return _ends(flows).groupBy("address").agg(
        F.count(F.lit(1)).alias("flows"), F.sum("bytes").alias("bytes"),
        F.min("time_start").alias("first_seen"), F.max("time_end").alias("last_seen"))


def new_talkers(today: DataFrame, history: DataFrame, history_days: int) -> DataFrame:
    """today's flows, history (a frame with column `address`) -> NEW_TALKERS columns (no date)."""
    ends = _ends(today)
    per = ends.groupBy("address").agg(
        F.count(F.lit(1)).alias("flows"), F.sum("bytes").alias("bytes"),
        F.countDistinct("peer").alias("peers"),
        F.collect_set("role").alias("roles"),
        F.min("time_start").alias("first_seen"), F.max("time_end").alias("last_seen"))
    seen = history.select("address").distinct()
    role = F.when(F.size("roles") > 1, "both").otherwise(F.element_at("roles", 1))
    return (per.join(seen, "address", "left_anti")
            .withColumn("role", role).withColumn("history_days", F.lit(history_days).cast("int"))
            .select(*[n for n in NEW_TALKERS.names if n not in ("date", "count_at")])
            .orderBy(F.desc("flows"), "address"))


def run(ctx) -> None:
    today = common.site_flows(ctx)  # each flow once by [site] count_at (issue 34)
    ctx.write(daily_hosts(today), DAILY_HOSTS.name)
    frames, days = [], 0
    for back in range(1, int(ctx.cfg.security.new_talker_days) + 1):
        day = ctx.date - dt.timedelta(days=back)
        part = ctx.lake / "reports" / DAILY_HOSTS.name / f"date={day.isoformat()}"
        if part.exists() and any(part.glob("*.parquet")):
            frames.append(ctx.report(DAILY_HOSTS.name, day).select("address"))
            days += 1
            continue
        flows = ctx.flows(day)  # only whether an address was seen: every observation
        if flows.limit(1).count():
            frames.append(daily_hosts(flows).select("address"))
            days += 1
    history = frames[0] if frames else today.sparkSession.createDataFrame([], "address string")
    for f in frames[1:]:
        history = history.unionByName(f)
    ctx.write(new_talkers(today, history, days), NEW_TALKERS.name)
