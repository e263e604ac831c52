"""Application mix: flows, packets and bytes per application label (port map: bbftp,
GridFTP, iperf3, AFS, SNMP, streaming, ...) for each hour and the whole day, per
direction, with shares. See pipelines/port_map.py for how a flow gets its label."""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from flowlake.jobs import common
from flowlake.pipelines import port_map
from flowlake.schemas.reports import APP_MIX

NAME = "app_mix"
TABLES = (APP_MIX,)
SUMS = ["flows", "packets", "bytes"]


def app_mix(flows: DataFrame, mapping: dict[tuple[int, int], str]) -> DataFrame:
    """flows (with `direction` and `hour`) -> app_mix rows."""
    labelled = common.with_app(flows, mapping)
    base = (labelled.groupBy("hour", "direction", "app")
            .agg(F.count(F.lit(1)).alias("flows"), F.sum("packets").alias("packets"), F.sum("bytes").alias("bytes")))
    mix = common.add_shares(common.rollup_hour_direction(base, ["app"], SUMS))
    return common.hour_to_null(mix)


def run(ctx) -> None:
    mapping = port_map.from_config(ctx.cfg)  # fails early, naming the file and line
    ctx.write(app_mix(common.shared_flows(ctx), mapping), NAME)
