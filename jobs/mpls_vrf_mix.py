"""MPLS/VRF mix: flows, packets and bytes by MPLS top label (side 'mpls'), ingress VRF
('vrf_in') and egress VRF ('vrf_out') for each hour and the whole day, per direction, with
shares: the Border dashboard's split of provider-network traffic (vlan_mix's shape)."""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from flowlake.schemas.forwarding import MPLS_VRF_MIX

from . import common

NAME = "mpls_vrf_mix"
TABLES = (MPLS_VRF_MIX,)
SUMS = ["flows", "packets", "bytes"]
SIDES = ("mpls", "vrf_in", "vrf_out")
OTHER = -1   # the value of the row that adds up every label or VRF beyond the top N (ids are >= 0)


def mpls_vrf_mix(flows: DataFrame, top_n: int = 100) -> DataFrame:
    """flows (with `direction` and `hour`) -> mpls_vrf_mix rows. Flows without a label stack
    or VRF (and every flow of a lake from before flow record revision 3) count as none (null).

    Per hour (and day), direction and side the top_n labels or VRFs by bytes are kept and the
    rest add up in one row (value -1, '(other)'): a provider edge sees thousands of labels
    (the demo's day: 1.56M rows unbounded for 1.1M flows), and every list still adds up."""
    if top_n < 1:
        raise ValueError(f"reports.mpls_vrf_top_n must be at least 1, not {top_n}")
    flows = common.with_columns_or_null(flows, {"mpls_labels": "array<int>", "ingress_vrf": "bigint",
                                                "egress_vrf": "bigint"})
    values = {"mpls": F.get(F.col("mpls_labels"), 0).cast("long"), "vrf_in": F.col("ingress_vrf").cast("long"),
              "vrf_out": F.col("egress_vrf").cast("long")}
    sides = None
    for side in SIDES:
        part = (flows.withColumn("value", values[side]).groupBy("hour", "direction", "value")
                .agg(F.count(F.lit(1)).alias("flows"), F.sum("packets").alias("packets"), F.sum("bytes").alias("bytes"))
                .withColumn("side", F.lit(side)))
        sides = part if sides is None else sides.unionByName(part)
    mix = common.rollup_hour_direction(sides, ["side", "value"], SUMS)
    # none (null) is not a label: it stays its own row
    mix = common.fold_beyond_top(mix, ["hour", "direction", "side"], "value", top_n, OTHER, SUMS,
                                 always=F.col("value").isNull())
    prefix = F.when(F.col("side") == "mpls", F.lit("label ")).otherwise(F.lit("vrf "))
    mix = mix.withColumn("value_label", F.when(F.col("value").isNull(), F.lit("(none)"))
                         .when(F.col("value") == OTHER, F.lit("(other)"))
                         .otherwise(F.concat(prefix, F.col("value").cast("string"))))
    return common.hour_to_null(common.add_shares(mix, by=("hour", "direction", "side")))


def run(ctx) -> None:
    ctx.write(mpls_vrf_mix(common.shared_flows(ctx), int(ctx.cfg.reports.mpls_vrf_top_n)), NAME)
