"""VLAN mix: flows, packets and bytes by ingress VLAN (side 'in', src_vlan) and egress
VLAN (side 'out', dst_vlan) for each hour and the whole day, per direction, with shares
(`nfdump -s srcvlan/bytes`, `-s dstvlan/bytes`)."""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from flowlake.schemas.border import VLAN_MIX

from . import common

NAME = "vlan_mix"
TABLES = (VLAN_MIX,)
SUMS = ["flows", "packets", "bytes"]


def vlan_mix(flows: DataFrame) -> DataFrame:
    """flows (with `direction` and `hour`) -> vlan_mix rows. Flows landed before the lake
    carried VLANs (null) count as VLAN 0, none, as the shipper writes for them."""
    sides = None
    for side, col in (("in", "src_vlan"), ("out", "dst_vlan")):
        part = (flows.withColumn("vlan", F.coalesce(F.col(col), F.lit(0)).cast("int")).groupBy("hour", "direction", "vlan")
                .agg(F.count(F.lit(1)).alias("flows"), F.sum("packets").alias("packets"), F.sum("bytes").alias("bytes"))
                .withColumn("side", F.lit(side)))
        sides = part if sides is None else sides.unionByName(part)
    mix = common.rollup_hour_direction(sides, ["side", "vlan"], SUMS)
    return common.hour_to_null(common.add_shares(mix, by=("hour", "direction", "side")))


def run(ctx) -> None:
    ctx.write(vlan_mix(common.shared_flows(ctx)), NAME)
