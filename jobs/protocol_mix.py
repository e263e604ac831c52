"""Protocol mix: flows, packets and bytes per IP protocol for each hour and the whole
day, per direction, with shares of the hour's/day's totals (`nfdump -s proto/...`)."""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from flowlake.schemas.reports import PROTOCOL_MIX

from . import common

NAME = "protocol_mix"
TABLES = (PROTOCOL_MIX,)
SUMS = ["flows", "packets", "bytes"]


def protocol_mix(flows: DataFrame) -> DataFrame:
    """flows (with `direction` and `hour`) -> protocol_mix rows."""
    base = (flows.groupBy("hour", "direction", "proto")
            .agg(F.count(F.lit(1)).alias("flows"), F.sum("packets").alias("packets"), F.sum("bytes").alias("bytes")))
    mix = common.rollup_hour_direction(base, ["proto"], SUMS)
    mix = common.add_shares(mix).withColumn("proto_name", common.proto_name(F.col("proto")))
    return common.hour_to_null(mix)


def run(ctx) -> None:
    ctx.write(protocol_mix(common.shared_flows(ctx)), NAME)
