"""Scan detection: sources probing many hosts or many ports with small flows.

Evidence kept per source: counts, a sample of targets and ports, first/last seen.
Thresholds: flowlake.toml [security] scan_*; see the `scanners` table doc.
"""
from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from flowlake.pipelines.security_rules import ScanRule
from flowlake.schemas.security import SCANNERS

from . import common

NAME = "scanners"
TABLES = (SCANNERS,)


def _sample(col: str, n: int, sort: bool = False):
    values = F.array_distinct(F.collect_list(F.col(col).cast("string")))
    if sort:  # ports: numeric order reads better than text order
        values = F.transform(F.sort_array(F.array_distinct(F.collect_list(F.col(col)))), lambda x: x.cast("string"))
    else:
        values = F.sort_array(values)
    return F.array_join(F.slice(values, 1, n), ",")


def find_scanners(flows: DataFrame, small_packets: int = 3, min_destinations: int = 20, min_ports: int = 20,
                  min_small_share: float = 0.8, sample_size: int = 10) -> DataFrame:
    """flows (FLOWS_TABLE columns) -> one row per scanning source (SCANNERS columns, no date)."""
    per_src = flows.groupBy("src_addr").agg(F.count(F.lit(1)).alias("flows"))
    # the router's own count (sampling undone): see security_rules.ScanRule
    probes = flows.where(F.col("packets") <= F.lit(small_packets) * F.greatest(F.col("sampling_rate"), F.lit(1)))
    per_dst = (probes.groupBy("src_addr", "dst_addr")
               .agg(F.countDistinct("dst_port").alias("ports_on_dst")))
    vertical = per_dst.groupBy("src_addr").agg(F.max("ports_on_dst").alias("max_ports_per_destination"))
    stats = probes.groupBy("src_addr").agg(
        F.count(F.lit(1)).alias("probe_flows"),
        F.countDistinct("dst_addr").alias("distinct_destinations"),
        F.countDistinct("dst_port").alias("distinct_ports"),
        F.sum("packets").alias("packets"), F.sum("bytes").alias("bytes"),
        F.min("time_start").alias("first_seen"), F.max("time_end").alias("last_seen"))
    found = (stats.join(per_src, "src_addr").join(vertical, "src_addr")
             .withColumn("small_share", F.col("probe_flows") / F.col("flows")))
    horizontal = F.col("distinct_destinations") >= min_destinations
    vert = F.col("max_ports_per_destination") >= min_ports
    found = found.where((horizontal | vert) & (F.col("small_share") >= min_small_share))
    # the evidence (samples, the top port) only for the sources found: gathering every
    # source's targets first cost the most and kept a list per source (3x on a day of
    # 200k remote hosts)
    theirs = probes.join(F.broadcast(found.select("src_addr")), "src_addr", "left_semi")
    port_counts = theirs.groupBy("src_addr", "dst_port").agg(F.count(F.lit(1)).alias("n"))
    w = Window.partitionBy("src_addr").orderBy(F.desc("n"), F.asc("dst_port"))
    top_port = (port_counts.withColumn("r", F.row_number().over(w)).where("r = 1")
                .select("src_addr", F.col("dst_port").cast("int").alias("top_port")))
    samples = theirs.groupBy("src_addr").agg(_sample("dst_addr", sample_size).alias("sample_targets"),
                                             _sample("dst_port", sample_size, sort=True).alias("sample_ports"))
    out = found.join(samples, "src_addr").join(top_port, "src_addr")
    kind = F.when(horizontal & vert, "both").when(horizontal, "horizontal").otherwise("vertical")
    return out.withColumn("kind", kind).select(*[n for n in SCANNERS.names if n not in ("date", "count_at")]) \
        .orderBy(F.desc("distinct_destinations"), F.desc("max_ports_per_destination"), "src_addr")


def run(ctx) -> None:
    r = ScanRule.from_config(ctx.cfg)  # the same rule the live scan detector applies
    ctx.write(find_scanners(common.site_flows(ctx), r.small_packets, r.min_destinations, r.min_ports,
                            r.min_small_share, ctx.cfg.security.sample_size), SCANNERS.name)
