"""Top-N statistics (`nfdump -s KEY/ORDER`) and aggregation (`nfdump -A`) as DataFrame
transforms. Percentages are of the filtered totals, as nfdump prints them; rates use
the aggregate's span (last seen - first seen), truncated to integers like nfdump.
"""
from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

# nfdump statistic name -> lake column(s); two columns mean "either" (a flow counts for both)
STAT_KEYS = {
    "srcip": ("src_addr",), "dstip": ("dst_addr",), "ip": ("src_addr", "dst_addr"),
    "srcport": ("src_port",), "dstport": ("dst_port",), "port": ("src_port", "dst_port"),
    "proto": ("proto",), "srcas": ("src_as",), "dstas": ("dst_as",), "as": ("src_as", "dst_as"),
    "inif": ("input_if",), "outif": ("output_if",), "if": ("input_if", "output_if"),
    "router": ("exporter",), "exporter": ("exporter",), "tos": ("tos",), "srctos": ("tos",),
}
ORDERS = ("flows", "packets", "bytes", "pps", "bps", "bpp")
# `-A` / record keys
AGG_KEYS = {"srcip": "src_addr", "dstip": "dst_addr", "srcport": "src_port", "dstport": "dst_port",
            "proto": "proto", "srcas": "src_as", "dstas": "dst_as", "inif": "input_if", "outif": "output_if",
            "router": "exporter", "exporter": "exporter", "tos": "tos"}
RECORD_KEYS = ("srcip", "dstip", "srcport", "dstport", "proto")


class StatError(ValueError):
    pass


def parse_stat(spec: str) -> tuple[str, str]:
    """'srcip/bytes' -> ('srcip', 'bytes'); order defaults to flows as in nfdump."""
    key, _, order = spec.strip().lower().partition("/")
    order = order or "flows"
    if key not in STAT_KEYS and key != "record":
        raise StatError(f"unknown statistic '{key}' (one of: record, {', '.join(sorted(STAT_KEYS))})")
    if order not in ORDERS:
        raise StatError(f"unknown order '{order}' in '{spec}' (one of: {', '.join(ORDERS)})")
    return key, order


def parse_aggregate(spec: str) -> list[str]:
    keys = [k.strip().lower() for k in spec.split(",") if k.strip()]
    bad = [k for k in keys if k not in AGG_KEYS]
    if bad or not keys:
        raise StatError(f"unknown aggregation key '{bad[0] if bad else spec}' (one of: {', '.join(sorted(AGG_KEYS))})")
    return keys


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
    """`nfdump -s key/order -n n` (n=0: all): rank, val, totals, shares and rates."""
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
    for m in ("flows", "packets", "bytes"):
        out = out.withColumn(f"{m}_pct", F.round(F.col(m) * 100.0 / F.col(f"t_{m}"), 1))
    w = Window.orderBy(F.desc(order), F.col("val"))
    out = out.withColumn("rank", F.row_number().over(w))
    if n:
        out = out.where(F.col("rank") <= n)
    return out.select("rank", "val", "flows", "flows_pct", "packets", "packets_pct", "bytes", "bytes_pct",
                      "first_seen", "last_seen", "duration_s", "pps", "bps", "bpp").orderBy("rank")
