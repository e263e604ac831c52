"""Flow times: the distribution of flow durations per direction, flows and bytes by
duration class, and the top applications by total flow time (table flow_durations)."""
from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from flowlake.jobs import common
from flowlake.pipelines import port_map
from flowlake.schemas.border import DURATION_CLASSES, FLOW_DURATIONS

NAME = "flow_durations"
TABLES = (FLOW_DURATIONS,)
PCTS = (0.5, 0.9, 0.99)
ACCURACY = 10000  # percentile_approx: exact below this many values per group


def duration_class(seconds):
    """(label, lower edge) columns of a duration in seconds."""
    label, lower = F.lit(DURATION_CLASSES[-1][2]), F.lit(DURATION_CLASSES[-1][0])
    for lo, hi, name in reversed(DURATION_CLASSES[:-1]):
        label = F.when(seconds < hi, F.lit(name)).otherwise(label)
        lower = F.when(seconds < hi, F.lit(lo)).otherwise(lower)
    return label, lower


def _stats(df: DataFrame, keys: list[str]) -> DataFrame:
    pct = F.percentile_approx("dur", list(PCTS), ACCURACY)
    return (df.groupBy(*keys)
            .agg(F.count(F.lit(1)).alias("flows"), F.sum("packets").alias("packets"), F.sum("bytes").alias("bytes"),
                 F.sum("dur").alias("duration_total_s"), F.avg("dur").alias("duration_mean_s"),
                 pct.alias("_p"), F.max("dur").alias("duration_max_s"))
            .withColumns({f"duration_p{int(p * 100)}_s": F.col("_p")[i] for i, p in enumerate(PCTS)})
            .drop("_p"))


def flow_durations(flows: DataFrame, mapping: dict[tuple[int, int], str], top_n: int) -> DataFrame:
    """flows (with `direction`) -> flow_durations rows (without date)."""
    if top_n < 1:
        raise ValueError(f"reports.top_n must be at least 1, not {top_n}")
    dur = F.greatest(F.unix_millis("time_end") - F.unix_millis("time_start"), F.lit(0)) / 1000.0
    base = common.with_app(flows.select("time_start", "time_end", "direction", "proto", "src_port", "dst_port",
                                        "packets", "bytes"), mapping).withColumn("dur", dur)
    label, lower = duration_class(F.col("dur"))
    base = base.withColumn("duration_class", label).withColumn("class_lower_s", lower)
    both = base.unionByName(base.withColumn("direction", F.lit("all")))
    by_class = _stats(both, ["direction", "duration_class", "class_lower_s"])
    overall = (_stats(both, ["direction"]).withColumn("duration_class", F.lit("all"))
               .withColumn("class_lower_s", F.lit(0.0)))
    classes = (by_class.unionByName(overall).withColumn("section", F.lit("class"))
               .withColumn("app", F.lit(None).cast("string")).withColumn("rank", F.lit(None).cast("int")))
    order = Window.partitionBy("direction").orderBy(F.col("duration_total_s").desc(), F.col("flows").desc(), "app")
    apps = (_stats(both, ["direction", "app"]).withColumn("rank", F.row_number().over(order).cast("int"))
            .where(F.col("rank") <= top_n).withColumn("section", F.lit("app"))
            .withColumn("duration_class", F.lit(None).cast("string"))
            .withColumn("class_lower_s", F.lit(None).cast("double")))
    totals = both.groupBy("direction").agg(F.count(F.lit(1)).alias("_tf"), F.sum("bytes").alias("_tb"))
    out = classes.unionByName(apps).join(F.broadcast(totals), "direction")
    share = lambda c, t: F.when(F.col(t) > 0, F.col(c) / F.col(t)).otherwise(F.lit(0.0))  # noqa: E731
    return out.withColumn("flows_share", share("flows", "_tf")).withColumn("bytes_share", share("bytes", "_tb")).drop("_tf", "_tb")


def run(ctx) -> None:
    mapping = port_map.from_config(ctx.cfg)
    ctx.write(flow_durations(common.shared_flows(ctx), mapping, int(ctx.cfg.reports.top_n)), NAME)
