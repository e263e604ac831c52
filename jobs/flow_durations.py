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


# the grouping sets, and grouping_id()'s bit per grouping column (direction, duration_class,
# class_lower_s, app; 1 = aggregated over): one aggregation over one read of the flows
# (a union with a copy as direction 'all' and four aggregations read them eight times)
_SETS = {"class": (("direction", "duration_class", "class_lower_s"), ("duration_class", "class_lower_s")),
         "overall": (("direction",), ()),
         "app": (("direction", "app"), ("app",))}
_COLS = ("direction", "duration_class", "class_lower_s", "app")


def _gid(cols) -> int:
    return sum(1 << (len(_COLS) - 1 - i) for i, c in enumerate(_COLS) if c not in cols)


def flow_durations(flows: DataFrame, mapping: dict[tuple[int, int], str], top_n: int) -> DataFrame:
    """flows (with `direction`) -> flow_durations rows (without date)."""
    if top_n < 1:
        raise ValueError(f"reports.top_n must be at least 1, not {top_n}")
    dur = F.greatest(F.unix_millis("time_end") - F.unix_millis("time_start"), F.lit(0)) / 1000.0
    base = common.with_app(flows.select("time_start", "time_end", "direction", "proto", "src_port", "dst_port",
                                        "packets", "bytes"), mapping).withColumn("dur", dur)
    label, lower = duration_class(F.col("dur"))
    base = base.withColumn("duration_class", label).withColumn("class_lower_s", lower)
    pct = F.percentile_approx("dur", list(PCTS), ACCURACY)
    stats = (base.groupingSets([s for sets in _SETS.values() for s in sets], *_COLS)
             .agg(F.count(F.lit(1)).alias("flows"), F.sum("packets").alias("packets"), F.sum("bytes").alias("bytes"),
                  F.sum("dur").alias("duration_total_s"), F.avg("dur").alias("duration_mean_s"),
                  pct.alias("_p"), F.max("dur").alias("duration_max_s"), F.grouping_id().alias("_g"))
             .withColumns({f"duration_p{int(p * 100)}_s": F.col("_p")[i] for i, p in enumerate(PCTS)})
             .withColumn("direction", F.when(F.col("_g").bitwiseAND(1 << (len(_COLS) - 1)) != 0, F.lit("all"))
                         .otherwise(F.col("direction")))
             .drop("_p"))

    def section(name):
        return stats.where(F.col("_g").isin([_gid(s) for s in _SETS[name]])).drop("_g")

    classes = section("class").drop("app")
    overall = (section("overall").drop("duration_class", "class_lower_s", "app")
               .withColumn("duration_class", F.lit("all")).withColumn("class_lower_s", F.lit(0.0)))
    classes = (classes.unionByName(overall).withColumn("section", F.lit("class"))
               .withColumn("app", F.lit(None).cast("string")).withColumn("rank", F.lit(None).cast("int")))
    order = Window.partitionBy("direction").orderBy(F.col("duration_total_s").desc(), F.col("flows").desc(), "app")
    apps = (section("app").drop("duration_class", "class_lower_s")
            .withColumn("rank", F.row_number().over(order).cast("int"))
            .where(F.col("rank") <= top_n).withColumn("section", F.lit("app"))
            .withColumn("duration_class", F.lit(None).cast("string"))
            .withColumn("class_lower_s", F.lit(None).cast("double")))
    totals = section("overall").select("direction", F.col("flows").alias("_tf"), F.col("bytes").alias("_tb"))
    out = classes.unionByName(apps).join(F.broadcast(totals), "direction")
    share = lambda c, t: F.when(F.col(t) > 0, F.col(c) / F.col(t)).otherwise(F.lit(0.0))  # noqa: E731
    return out.withColumn("flows_share", share("flows", "_tf")).withColumn("bytes_share", share("bytes", "_tb")).drop("_tf", "_tb")


def run(ctx) -> None:
    mapping = port_map.from_config(ctx.cfg)
    ctx.write(flow_durations(common.shared_flows(ctx), mapping, int(ctx.cfg.reports.top_n)), NAME)
