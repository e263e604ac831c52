"""bulk_transfers: flows that are bulk transfers, with their rate and share of the link.

A flow is bulk when bytes, duration and rate all reach the [active] bulk_min_*
thresholds, or when it uses a known bulk port (bbftp 5021, GridFTP 2811, iperf3 5201)
and moved at least bulk_port_min_bytes (so a tool's control connection is not bulk).
The link is the flow's output interface; its speed comes from [active] interface_speeds
("exporter/ifindex=bps", "*" matches anything), else default_interface_speed_bps.
"""
from __future__ import annotations

from flowlake.pipelines.interface_speeds import parse_speeds  # noqa: F401  (shared with the stream's volume detector)
from flowlake.schemas.active_reports import BULK_TRANSFERS

from . import common

NAME = "bulk_transfers"
TABLES = (BULK_TRANSFERS,)




def classify(flows, min_bytes: int, min_duration_s: float, min_rate_bps: float, ports,
             port_min_bytes: int, speeds=(), default_speed_bps: float = 1e9):
    """flows (FLOWS_TABLE rows) -> BULK_TRANSFERS rows (without date)."""
    from pyspark.sql import functions as F  # noqa: PLC0415  (start-up: pyspark)

    ports = [int(p) for p in ports]
    dur = (F.col("time_end").cast("double") - F.col("time_start").cast("double"))
    df = flows.withColumn("duration_s", dur)
    df = df.withColumn("rate_bps", F.when(F.col("duration_s") > 0, F.col("bytes") * 8.0 / F.col("duration_s")))
    by_size = ((F.col("bytes") >= min_bytes) & (F.col("duration_s") >= min_duration_s)
               & (F.col("rate_bps") >= min_rate_bps))
    by_port = ((F.col("src_port").isin(ports) | F.col("dst_port").isin(ports))
               & F.col("proto").isin(6, 17) & (F.col("bytes") >= port_min_bytes))
    df = df.where(by_size | by_port).withColumn(
        "reason", F.when(by_size & by_port, "thresholds+port").when(by_size, "thresholds").otherwise("port"))
    speed = F.lit(float(default_speed_bps))
    # Most specific entry wins: evaluate wildcards first so exact matches override them.
    for exporter, ifindex, bps in sorted(parse_speeds(speeds), key=lambda s: (s[0] != "*") + (s[1] != "*")):
        cond = F.lit(True)
        if exporter != "*":
            cond = cond & (F.col("exporter") == exporter)
        if ifindex != "*":
            cond = cond & (F.col("output_if") == int(ifindex))
        speed = F.when(cond, F.lit(bps)).otherwise(speed)
    df = df.withColumn("link_speed_bps", speed).withColumn("link_share", F.col("rate_bps") / F.col("link_speed_bps"))
    cols = [f.name for f in BULK_TRANSFERS.fields if f.name not in ("date", "count_at")]
    return df.select(*cols)


def run(ctx) -> None:
    a = ctx.cfg.active
    df = classify(common.site_flows(ctx), int(a.bulk_min_bytes), float(a.bulk_min_duration_s),
                  float(a.bulk_min_rate_bps), a.bulk_ports, int(a.bulk_port_min_bytes), a.interface_speeds,
                  float(a.default_interface_speed_bps))
    ctx.results[NAME] = ctx.write(df, NAME)
