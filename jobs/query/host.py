"""Host profile: who a host talks to, on which ports, how much per hour, first/last seen,
and its NAT translations (jobs/query/nat.py).

`profile()` is pure (flows DataFrame in, plain dict out) so tests and notebooks call it
on small frames; the CLI only adds reading the lake and printing.
"""
from __future__ import annotations

import ipaddress

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from .compiler import address_in
from .nat import translations


def host_flows(flows: DataFrame, address: str) -> DataFrame:
    """The host's flows with its role: out (host is source) or in (host is destination)."""
    net = (ipaddress.ip_network(ipaddress.ip_address(address)),)
    is_src, is_dst = address_in(F.col("src_addr"), net), address_in(F.col("dst_addr"), net)
    return (flows.where(is_src | is_dst)
            .withColumn("role", F.when(is_src, F.lit("out")).otherwise(F.lit("in")))
            .withColumn("peer", F.when(is_src, F.col("dst_addr")).otherwise(F.col("src_addr")))
            # the peer's service port when the host is the client, the host's own when it serves
            .withColumn("local_port", F.when(is_src, F.col("src_port")).otherwise(F.col("dst_port")))
            .withColumn("remote_port", F.when(is_src, F.col("dst_port")).otherwise(F.col("src_port"))))


def _rows(df: DataFrame) -> list[dict]:
    return [r.asDict() for r in df.collect()]


def profile(flows: DataFrame, address: str, top_n: int = 10, nat_rows: int = 50) -> dict:
    nat, nat_total = translations(flows, address, nat_rows)
    hf = host_flows(flows, address).cache()
    try:
        totals = hf.agg(
            F.count(F.lit(1)).alias("flows"), F.min("time_start").alias("first_seen"),
            F.max("time_end").alias("last_seen"),
            F.sum(F.when(F.col("role") == "out", F.col("bytes")).otherwise(0)).alias("bytes_out"),
            F.sum(F.when(F.col("role") == "in", F.col("bytes")).otherwise(0)).alias("bytes_in"),
            F.sum("packets").alias("packets"), F.countDistinct("peer").alias("peers"),
        ).first().asDict()
        if not totals["flows"]:
            return {"address": address, **totals, "bytes_out": 0, "bytes_in": 0, "packets": 0,
                    "top_peers": [], "top_ports": [], "hourly": [], "nat": nat, "nat_total": nat_total}
        peers = (hf.groupBy("peer").agg(
            F.count(F.lit(1)).alias("flows"), F.sum("bytes").alias("bytes"), F.sum("packets").alias("packets"),
            F.sum(F.when(F.col("role") == "out", F.col("bytes")).otherwise(0)).alias("bytes_out"),
            F.sum(F.when(F.col("role") == "in", F.col("bytes")).otherwise(0)).alias("bytes_in"),
            F.countDistinct("remote_port").alias("ports"), F.min("time_start").alias("first_seen"),
            F.max("time_end").alias("last_seen"))
            .orderBy(F.desc("bytes"), "peer").limit(top_n))
        # the service side: the peer's port when the host is the client (out), its own when it serves (in)
        ports = (hf.withColumn("port", F.when(F.col("role") == "out", F.col("remote_port")).otherwise(F.col("local_port")))
                 .groupBy("proto", "port", "role").agg(
                     F.count(F.lit(1)).alias("flows"), F.sum("bytes").alias("bytes"),
                     F.countDistinct("peer").alias("peers"))
                 .orderBy(F.desc("flows"), F.desc("bytes"), "proto", "port").limit(top_n))
        hourly = (hf.groupBy(F.date_trunc("hour", "time_start").alias("hour"))
                  .agg(F.count(F.lit(1)).alias("flows"),
                       F.sum(F.when(F.col("role") == "out", F.col("bytes")).otherwise(0)).alias("bytes_out"),
                       F.sum(F.when(F.col("role") == "in", F.col("bytes")).otherwise(0)).alias("bytes_in"),
                       F.countDistinct("peer").alias("peers"))
                  .orderBy("hour"))
        return {"address": address, **totals, "top_peers": _rows(peers), "top_ports": _rows(ports),
                "hourly": _rows(hourly), "nat": nat, "nat_total": nat_total}
    finally:
        hf.unpersist()
