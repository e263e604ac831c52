"""Observation points: each exporter, its external interfaces, what it exports on and how
`[site] count_at` counted it, and the site's share of flows seen at more than one point
(issue 34; schemas/count_once.py). Reads every observation (ctx.flows()), as the rule does."""
from __future__ import annotations

import logging

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from flowlake.schemas.count_once import OBSERVATION_POINTS

from . import count_once as co
from . import engines

log = logging.getLogger(__name__)

NAME = "observation_points"
TABLES = (OBSERVATION_POINTS,)


def observation_points(flows: DataFrame, rule: str, window_seconds: float) -> DataFrame:
    """flows (every observation) -> observation_points rows (per exporter, then 'all')."""
    rule = co.check_rule(rule)
    m = co.mark(flows, rule, window_seconds)
    if "exporter_name" not in m.columns:
        m = m.withColumn("exporter_name", F.lit(None).cast("string"))
    if "in_if_name" not in m.columns:
        m = m.withColumn("in_if_name", F.lit(None).cast("string")).withColumn("out_if_name", F.lit(None).cast("string"))
    ingress = F.col("flow_direction").isNull() | (F.col("flow_direction") == 0)
    multi = (F.col(co.POINTS) > 1).cast("double")
    counted = F.col(co.COUNTED)
    ext = F.array_compact(F.array(
        F.when(F.col("in_if_boundary") == "external",
               F.concat_ws(" ", F.col("input_if").cast("string"), F.coalesce("in_if_name", F.lit("")))),
        F.when(F.col("out_if_boundary") == "external",
               F.concat_ws(" ", F.col("output_if").cast("string"), F.coalesce("out_if_name", F.lit(""))))))
    # One aggregation over the marked observations (the rule's windows are the cost: each
    # further pass over `m` ran them again); the site's row adds up the exporters' rows (Spark
    # reuses the aggregation's exchange for both).
    per = m.groupBy("exporter").agg(
        F.max(F.coalesce("exporter_name", F.lit(""))).alias("exporter_name"),
        F.array_join(F.array_sort(F.array_distinct(F.flatten(F.collect_set(ext)))), ", ").alias("external_ifs"),
        F.max(ingress.cast("int")).alias("_in"), F.max((~ingress).cast("int")).alias("_out"),
        F.max(F.col(co.CLASSIFIED).cast("int")).alias("_classified"),
        F.count(F.lit(1)).alias("observations"), F.sum(counted.cast("long")).alias("counted"),
        F.sum("bytes").alias("bytes_observed"),
        F.sum(F.when(counted, F.col("bytes")).otherwise(0)).alias("bytes_counted"),
        F.avg(multi).alias("multi_point_share"),
        F.sum(F.col(co.CONTRADICTORY).cast("long")).alias("contradictory"),
        # for the site's row: of the counted records, those seen at more than one point, and
        # those contradictory (multi is 0 or 1: the sums are exact in a double)
        F.sum(F.when(counted, multi).otherwise(0.0)).alias("_counted_multi"),
        F.sum((counted & F.col(co.CONTRADICTORY)).cast("long")).alias("_counted_contradictory"))
    exports = (F.when((F.col("_in") == 1) & (F.col("_out") == 1), "both")
               .when(F.col("_in") == 1, "ingress").otherwise("egress"))
    applied = (F.lit("all") if rule == "all" else F.lit("key") if rule == "key"
               else F.when(F.col("_classified") == 1, "boundary").otherwise("key"))
    site = per.agg(F.sum("observations").alias("observations"), F.sum("counted").alias("counted"),
                   F.sum("bytes_observed").alias("bytes_observed"), F.sum("bytes_counted").alias("bytes_counted"),
                   F.max("_classified").alias("_classified"), F.max("_in").alias("_in"), F.max("_out").alias("_out"),
                   F.sum("_counted_contradictory").alias("contradictory"),
                   F.sum("_counted_multi").alias("_multi"))
    site = (site.where(F.col("observations") > 0)
            .select(F.lit("all").alias("exporter"), F.lit("all").alias("exporter_name"),
                    F.lit("").alias("external_ifs"),
                    exports.alias("exports"), (F.col("_classified") == 1).alias("classified"),
                    F.lit(rule).alias("count_at"), "observations", "counted", "bytes_observed", "bytes_counted",
                    F.when(F.col("counted") > 0, F.col("_multi") / F.col("counted")).otherwise(F.lit(0.0))
                    .alias("multi_point_share"), "contradictory"))
    per = (per.withColumn("exports", exports).withColumn("classified", F.col("_classified") == 1)
           .withColumn("count_at", applied))
    cols = [f.name for f in OBSERVATION_POINTS.fields if f.name != "date"]
    return per.select(*cols).unionByName(site.select(*cols))


def observation_points_sql(con, files: list[str], rule: str, window_seconds: float) -> str:
    """observation_points() on DuckDB over the day's flow files: the same rows (held equal
    by tests/jobs/test_count_once.py for every rule, and by the golden set). Why a second engine: on
    Spark the rule's windows over every observation took 24-27 s of the daily set (the
    demo day, bench/jobs.py --set all); DuckDB sorts only the columns the table needs."""
    from flowlake.pipelines import duck  # noqa: PLC0415  (the local engine only)

    from .count_rule import _RULE_COLUMNS, check_rule, duckdb_marks_sql, with_rule_columns  # noqa: PLC0415

    rule = check_rule(rule)
    src = f"read_parquet({duck.sql_list(files)}, hive_partitioning = true, union_by_name = true)"
    have = {r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {src}").fetchall()}
    extra = {"exporter_name": "VARCHAR", "in_if_name": "VARCHAR", "out_if_name": "VARCHAR",
             "input_if": "BIGINT", "output_if": "BIGINT"}
    cols = [c for c in dict.fromkeys((*_RULE_COLUMNS, *extra)) if c in have]
    cols += [f"CAST(NULL AS {t}) AS {c}" for c, t in extra.items() if c not in have]
    narrow = with_rule_columns(f"(SELECT {', '.join(cols)} FROM {src})", have | set(extra))
    con.execute(f"CREATE OR REPLACE TEMP TABLE op_marked AS {duckdb_marks_sql(narrow, rule, window_seconds)}")
    ext = """list_filter([
        CASE WHEN in_if_boundary = 'external' THEN concat_ws(' ', input_if::VARCHAR, coalesce(in_if_name, '')) END,
        CASE WHEN out_if_boundary = 'external' THEN concat_ws(' ', output_if::VARCHAR, coalesce(out_if_name, '')) END
        ], x -> x IS NOT NULL)"""
    ingress = "(flow_direction IS NULL OR flow_direction = 0)"
    con.execute(f"""CREATE OR REPLACE TEMP TABLE op_per AS
        SELECT exporter, max(coalesce(exporter_name, '')) AS exporter_name,
               coalesce(array_to_string(list_sort(list_distinct(flatten(list({ext})))), ', '), '') AS external_ifs,
               max({ingress}::INTEGER) AS _in, max((NOT {ingress})::INTEGER) AS _out,
               max(_co_classified::INTEGER) AS _classified,
               count(*) AS observations, sum(_co_counted::BIGINT) AS counted,
               sum(bytes) AS bytes_observed, sum(CASE WHEN _co_counted THEN bytes ELSE 0 END) AS bytes_counted,
               avg((_co_points > 1)::DOUBLE) AS multi_point_share,
               sum(_co_contradictory::BIGINT) AS contradictory,
               sum(CASE WHEN _co_counted THEN (_co_points > 1)::DOUBLE ELSE 0.0 END) AS _counted_multi,
               sum((_co_counted AND _co_contradictory)::BIGINT) AS _counted_contradictory
        FROM op_marked GROUP BY exporter""")
    exports = "CASE WHEN _in = 1 AND _out = 1 THEN 'both' WHEN _in = 1 THEN 'ingress' ELSE 'egress' END"
    applied = ("'all'" if rule == "all" else "'key'" if rule == "key"
               else "CASE WHEN _classified = 1 THEN 'boundary' ELSE 'key' END")
    return f"""
        SELECT exporter, exporter_name, external_ifs, {exports} AS exports, _classified = 1 AS classified,
               {applied} AS count_at, observations, counted, bytes_observed, bytes_counted, multi_point_share,
               contradictory
        FROM op_per
        UNION ALL
        SELECT 'all', 'all', '', {exports}, _classified = 1, '{rule}', observations, counted, bytes_observed,
               bytes_counted, CASE WHEN counted > 0 THEN _multi / counted ELSE 0.0 END, contradictory
        FROM (SELECT sum(observations) AS observations, sum(counted) AS counted,
                     sum(bytes_observed) AS bytes_observed, sum(bytes_counted) AS bytes_counted,
                     max(_classified) AS _classified, max(_in) AS _in, max(_out) AS _out,
                     sum(_counted_contradictory) AS contradictory, sum(_counted_multi) AS _multi
              FROM op_per) WHERE observations > 0"""


def run(ctx) -> None:
    rule, window = co.settings(ctx.cfg)
    if engines.for_reports(ctx) == "local":
        import duckdb  # noqa: PLC0415  (the local engine only)

        from flowlake.pipelines import duck  # noqa: PLC0415  (the local engine only)

        files = duck.flow_files(ctx)
        if files:
            con = duck.connect(ctx.cfg)
            try:
                ctx.write_duckdb(con, observation_points_sql(con, files, rule, window), NAME)
                return
            except duckdb.OutOfMemoryException as exc:
                # the rule's windows do not spill in DuckDB (count once splits a day too big
                # into passes; this table needs every observation at once): Spark's do
                log.warning("observation_points %s: DuckDB ran out of memory (%s); running it on Spark",
                            ctx.date, str(exc).splitlines()[0])
            finally:
                con.close()
    ctx.write(observation_points(ctx.flows(), rule, window), NAME)
