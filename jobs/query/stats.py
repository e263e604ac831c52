"""Top-N statistics (`nfdump -s KEY/ORDER`) and aggregation (`nfdump -A`) as DataFrame
transforms. Rates use the aggregate's span (last seen - first seen), truncated to
integers like nfdump; `top` returns the filtered totals beside each row, and
spec.with_shares turns them into nfdump's percentages for every engine.
"""
from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from .spec import AGG_KEYS, ORDERS, RECORD_KEYS, STAT_KEYS, TOP_COLUMNS, StatError, parse_aggregate, parse_stat  # noqa: F401 (re-exported)


def _measures(df: DataFrame, group: list) -> DataFrame:
    out = df.groupBy(*group).agg(
        F.count(F.lit(1)).alias("flows"), F.sum("packets").alias("packets"), F.sum("bytes").alias("bytes"),
        F.min("time_start").alias("first_seen"), F.max("time_end").alias("last_seen"))
    span = (F.unix_millis("last_seen") - F.unix_millis("first_seen")) / 1000.0
    return (out.withColumn("duration_s", span)
            .withColumn("pps", F.when(span > 0, F.floor(F.col("packets") / span)).otherwise(0))
            .withColumn("bps", F.when(span > 0, F.floor(F.col("bytes") * 8 / span)).otherwise(0))
            .withColumn("bpp", F.when(F.col("packets") > 0, F.floor(F.col("bytes") / F.col("packets"))).otherwise(0)))


def aggregate(flows: DataFrame, keys: list[str], order: str = "flows") -> DataFrame:
    """`nfdump -A keys`: one row per distinct key combination with its totals."""
    cols = [F.col(AGG_KEYS[k]).alias(k) for k in keys]
    return _measures(flows.select(*cols, "packets", "bytes", "time_start", "time_end"), keys).orderBy(F.desc(order), *keys)


def top(flows: DataFrame, key: str, order: str = "flows", n: int = 10) -> DataFrame:
    """`nfdump -s key/order -n n` (n=0: all): rank, val, measures and rates, and the
    filtered totals t_flows, t_packets, t_bytes on every row (spec.with_shares)."""
    if key == "record":
        ranked = aggregate(flows, list(RECORD_KEYS), order)
        val = F.concat_ws(" ", *[F.col(k).cast("string") for k in RECORD_KEYS])
        base = ranked.withColumn("val", val)
    else:
        cols = STAT_KEYS[key]
        parts = [flows.select(F.col(c).cast("string").alias("val"), "packets", "bytes", "time_start", "time_end")
                 for c in cols]
        both = parts[0] if len(parts) == 1 else parts[0].unionByName(parts[1])
        base = _measures(both, ["val"])
    totals = flows.agg(F.count(F.lit(1)).alias("t_flows"), F.sum("packets").alias("t_packets"),
                       F.sum("bytes").alias("t_bytes"))
    out = base.crossJoin(totals)
    w = Window.orderBy(F.desc(order), F.col("val"))
    out = out.withColumn("rank", F.row_number().over(w))
    if n:
        out = out.where(F.col("rank") <= n)
    return out.select(*[c for c in TOP_COLUMNS if not c.endswith("_pct")], "t_flows", "t_packets",
                      "t_bytes").orderBy("rank")
