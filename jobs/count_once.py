"""One flow, counted once (issue 34): the counting rule every report of site traffic applies
to the flows it reads, in one place.

A site with several border routers, or routers exporting on both the ingress and the egress
interface, sees the same packets at several observation points. `[site] count_at` says which
observations count:

- `boundary`: a flow counts where it crosses the site's external boundary, once: an
  observation counts when its input or output interface is `external` (the interface
  classification rules, `[[enrich.interface_rules]]`, columns in_if_boundary /
  out_if_boundary) and it is an ingress record (flow_direction 0, or null: NetFlow's
  default), or an egress record of an exporter that exports no ingress records that day.
  Observations whose interfaces are unclassified (both boundaries empty) cannot be placed:
  they are counted with `key` (status names their exporters).
- `key`: observations of one flow are matched by key (src/dst address, ports, protocol)
  across exporters and directions; observations of a key whose times overlap, or lie within
  `[site] dedup_window_seconds` of each other, are one flow. Of that flow's observation
  points (exporter and direction) the most complete one counts, with all its
  records (a long flow cut by the active timeout stays whole): the lowest sampling rate
  (unsampled first, unknown rate last), then the most packets and bytes as the lake holds
  them (already multiplied by the sampling rate: compared after scaling).
- `auto` (default): `boundary` for observations whose interfaces are classified, `key` for
  the rest; a flow whose matched observations are all classified keeps what `boundary` keeps,
  and a flow with an unclassified observation among them counts once, preferring an
  observation that `boundary` keeps.
- `all`: every observation counts (today's sum; per-device accounting).

`boundary` and `auto` compute the same rows: `boundary` names the operator's intent (and
status warns when some exporters are unclassified), `auto` accepts the fallback silently.

count_once() is a pure transform (DataFrame -> DataFrame, the flows' own columns kept);
observed() adds the matching columns the observation_points report summarises. The views
of devices (Collection, Capacity per interface, exporter health, interface_capacity) read
ctx.flows() and keep every observation.
"""
from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

RULES = ("auto", "boundary", "key", "all")
DEFAULT_WINDOW_SECONDS = 60.0

# helper columns (dropped by count_once)
CLASSIFIED = "_co_classified"   # the row's interfaces are classified (a boundary is set)
KEPT_BY_BOUNDARY = "_co_boundary"  # the boundary rule keeps the row (meaningful when classified)
CLUSTER = "_co_cluster"         # the flow, within its key
POINTS = "_co_points"           # distinct observation points of the row's flow
COUNTED = "_co_counted"         # the rule counts this row
KEY = ("src_addr", "dst_addr", "src_port", "dst_port", "proto")


class CountRuleError(ValueError):
    """`[site] count_at` or `--count-at` is not one of RULES (the message names the input)."""


def check_rule(rule: str, where: str = "[site] count_at") -> str:
    r = str(rule).strip().lower()
    if r not in RULES:
        raise CountRuleError(f"{where} = {rule!r}: expected one of {', '.join(RULES)}")
    return r


def settings(cfg, override: str | None = None) -> tuple[str, float]:
    """(rule, window seconds) from the config's [site], `override` (e.g. --count-at) winning."""
    site = getattr(cfg, "site", None)
    rule = override if override else getattr(site, "count_at", "auto")
    window = getattr(site, "dedup_window_seconds", DEFAULT_WINDOW_SECONDS)
    try:
        window = float(window)
    except (TypeError, ValueError):
        raise CountRuleError(f"[site] dedup_window_seconds = {window!r}: expected a number of seconds") from None
    if window < 0:
        raise CountRuleError(f"[site] dedup_window_seconds = {window!r}: expected 0 or more seconds")
    return check_rule(rule, "--count-at" if override else "[site] count_at"), window


def _boundary(name: str) -> Column:
    return F.coalesce(F.col(name), F.lit(""))


def _ingress() -> Column:
    return F.col("flow_direction").isNull() | (F.col("flow_direction") == 0)


def exporter_exports(flows: DataFrame) -> DataFrame:
    """Per exporter: ingress / egress records seen and whether any interface is classified."""
    return flows.groupBy("exporter").agg(
        F.max(_ingress().cast("int")).alias("ingress"),
        F.max((F.col("flow_direction") == 1).cast("int")).alias("egress"),
        F.max(((_boundary("in_if_boundary") != "") | (_boundary("out_if_boundary") != "")).cast("int"))
        .alias("classified"))


def _with_columns(flows: DataFrame, names) -> DataFrame:
    """Lake days from before enrichment or revision 3 lack these columns: null, as a reader sees them."""
    types = {"in_if_boundary": "string", "out_if_boundary": "string", "flow_direction": "int"}
    for n in names:
        if n not in flows.columns:
            flows = flows.withColumn(n, F.lit(None).cast(types[n]))
    return flows


def observed(flows: DataFrame, window_seconds: float = DEFAULT_WINDOW_SECONDS) -> DataFrame:
    """flows + CLASSIFIED, KEPT_BY_BOUNDARY, CLUSTER (the flow within its key), POINTS (its
    observation points) and the ranking columns the rules use."""
    flows = _with_columns(flows, ("in_if_boundary", "out_if_boundary", "flow_direction"))
    window_ms = int(round(window_seconds * 1000))
    exp = exporter_exports(flows).select("exporter", F.col("ingress").alias("_co_ingress_exp"))
    df = flows.join(F.broadcast(exp), "exporter", "left")
    ext_in = _boundary("in_if_boundary") == "external"
    ext_out = _boundary("out_if_boundary") == "external"
    df = (df.withColumn(CLASSIFIED, (_boundary("in_if_boundary") != "") | (_boundary("out_if_boundary") != ""))
          .withColumn(KEPT_BY_BOUNDARY, (ext_in | ext_out)
                      & (_ingress() | (F.coalesce(F.col("_co_ingress_exp"), F.lit(0)) == 0))))
    start, end = F.unix_millis(F.col("time_start")), F.unix_millis(F.col("time_end"))
    by_key = Window.partitionBy(*KEY).orderBy(start, end, "exporter")
    prev_end = F.max(end).over(by_key.rowsBetween(Window.unboundedPreceding, -1))
    new = (prev_end.isNull() | (start > prev_end + F.lit(window_ms))).cast("long")
    df = df.withColumn("_co_new", new).withColumn(
        CLUSTER, F.sum("_co_new").over(by_key.rowsBetween(Window.unboundedPreceding, Window.currentRow)))
    # an observation point: exporter and direction (the interface may change within a flow's
    # records, e.g. a route change, and is one point still)
    point = F.struct(F.col("exporter"), F.coalesce(F.col("flow_direction"), F.lit(0)).alias("d"))
    flow_w = Window.partitionBy(*KEY, CLUSTER)
    rate = F.col("sampling_rate")
    rate_rank = F.when(rate.isNull() | (rate <= 0), F.lit(2 ** 31 - 1)).otherwise(rate)
    point_w = Window.partitionBy(*KEY, CLUSTER, "_co_point")
    df = df.withColumn("_co_point", point)
    df = (df
          .withColumn(POINTS, F.size(F.collect_set("_co_point").over(flow_w)))
          .withColumn("_co_rank", F.struct(
              F.max(rate_rank).over(point_w).alias("rate"),
              (-F.sum("packets").over(point_w)).alias("packets"),
              (-F.sum("bytes").over(point_w)).alias("bytes"),
              F.col("_co_point").alias("point")))
          .drop("_co_new"))
    return df


def mark(flows: DataFrame, rule: str, window_seconds: float = DEFAULT_WINDOW_SECONDS) -> DataFrame:
    """flows + the observed() columns + COUNTED: whether `rule` counts the row."""
    rule = check_rule(rule)
    if rule == "all":
        return observed(flows, window_seconds).withColumn(COUNTED, F.lit(True))
    df = observed(flows, window_seconds)
    flow_w = Window.partitionBy(*KEY, CLUSTER)
    if rule == "key":
        best = F.min("_co_rank").over(flow_w)
        return df.withColumn(COUNTED, F.col("_co_rank") == best)
    # auto / boundary: classified rows by the boundary rule; a flow with an unclassified
    # candidate among its observations counts once (a boundary-kept observation preferred)
    cand = ~F.col(CLASSIFIED) | F.col(KEPT_BY_BOUNDARY)
    pref = F.when(F.col(CLASSIFIED), F.lit(0)).otherwise(F.lit(1))
    ranked = F.when(cand, F.struct(pref.alias("pref"), F.col("_co_rank").alias("rank")))
    df = (df.withColumn("_co_cand", cand)
          .withColumn("_co_cluster_unclassified",
                      F.max((cand & ~F.col(CLASSIFIED)).cast("int")).over(flow_w) == 1)
          .withColumn("_co_best", F.min(ranked).over(flow_w)))
    counted = F.col("_co_cand") & (~F.col("_co_cluster_unclassified") | (ranked == F.col("_co_best")))
    return df.withColumn(COUNTED, counted)


def count_once(flows: DataFrame, rule: str = "auto", window_seconds: float = DEFAULT_WINDOW_SECONDS) -> DataFrame:
    """The observations `rule` counts, with the flows' own columns (the same frame for `all`)."""
    rule = check_rule(rule)
    if rule == "all":
        return flows
    cols = flows.columns
    return mark(flows, rule, window_seconds).where(F.col(COUNTED)).select(*cols)


def site_flows(flows: DataFrame, cfg, override: str | None = None) -> DataFrame:
    """The config's rule (or `override`) applied: what every report of site traffic reads."""
    rule, window = settings(cfg, override)
    return count_once(flows, rule, window)


# ---- the DuckDB twin (the local report engines: top_talkers_local, flow_size_dist_duckdb) ----
_SQL_HELPERS = ("_co_ib", "_co_ob", "_co_ing", "_co_s", "_co_e", "_co_d", "_co_rate", "_co_ing_exp", "_co_cls",
                "_co_kb", "_co_pe", "_co_cl", "_co_pr", "_co_pp", "_co_pb", "_co_cand", "_co_unc", "_co_bx",
                "_co_bd", "_co_counted")


def duckdb_sql(relation: str, rule: str, window_seconds: float = DEFAULT_WINDOW_SECONDS) -> str:
    """The rows of `relation` (a DuckDB table expression with the lake's flow columns) that
    `rule` counts, as a query with the relation's own columns: count_once() in SQL, held
    equal to it row for row by tests/jobs/test_count_once.py."""
    rule = check_rule(rule)
    if rule == "all":
        return f"SELECT * FROM {relation}"
    w = int(round(window_seconds * 1000))
    key = ", ".join(KEY)
    by_key = f"PARTITION BY {key} ORDER BY _co_s, _co_e, exporter"
    point = f"PARTITION BY {key}, _co_cl, exporter, _co_d"
    cand = "TRUE" if rule == "key" else "_co_cand"
    first = f"(NOT {cand}), " + ("" if rule == "key" else "(NOT _co_cls), ")
    best = (f"PARTITION BY {key}, _co_cl ORDER BY {first}_co_pr, -_co_pp, -_co_pb, exporter, _co_d "
            "ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING")
    is_best = "(exporter = _co_bx AND _co_d = _co_bd)"
    counted = is_best if rule == "key" else f"(_co_cand AND (NOT _co_unc OR {is_best}))"
    return f"""
    WITH co_f AS (SELECT *, coalesce(in_if_boundary, '') AS _co_ib, coalesce(out_if_boundary, '') AS _co_ob,
                         (flow_direction IS NULL OR flow_direction = 0) AS _co_ing,
                         epoch_ms(time_start) AS _co_s, epoch_ms(time_end) AS _co_e,
                         coalesce(flow_direction, 0) AS _co_d,
                         CASE WHEN sampling_rate IS NULL OR sampling_rate <= 0 THEN 2147483647
                              ELSE sampling_rate END AS _co_rate
                  FROM {relation}),
    co_x AS (SELECT exporter, max(_co_ing::INTEGER) AS _co_ing_exp FROM co_f GROUP BY exporter),
    co_g AS (SELECT co_f.*, co_x._co_ing_exp, (_co_ib <> '' OR _co_ob <> '') AS _co_cls,
                    ((_co_ib = 'external' OR _co_ob = 'external')
                     AND (_co_ing OR coalesce(co_x._co_ing_exp, 0) = 0)) AS _co_kb
             FROM co_f LEFT JOIN co_x USING (exporter)),
    co_p AS (SELECT *, max(_co_e) OVER ({by_key} ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS _co_pe
             FROM co_g),
    co_c AS (SELECT *, sum(CASE WHEN _co_pe IS NULL OR _co_s > _co_pe + {w} THEN 1 ELSE 0 END)
                       OVER ({by_key} ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS _co_cl
             FROM co_p),
    co_r AS (SELECT *, max(_co_rate) OVER ({point}) AS _co_pr, sum(packets) OVER ({point}) AS _co_pp,
                    sum(bytes) OVER ({point}) AS _co_pb, (NOT _co_cls OR _co_kb) AS _co_cand
             FROM co_c),
    co_u AS (SELECT *, max((_co_cand AND NOT _co_cls)::INTEGER) OVER (PARTITION BY {key}, _co_cl) = 1 AS _co_unc,
                    first_value(exporter) OVER ({best}) AS _co_bx, first_value(_co_d) OVER ({best}) AS _co_bd
             FROM co_r)
    SELECT * EXCLUDE ({", ".join(h for h in _SQL_HELPERS if h != "_co_counted")})
    FROM co_u WHERE {counted}"""


def duckdb_relation(con, relation: str) -> str:
    """`relation` with the columns the rule reads that its files lack (lake days from before
    enrichment or revision 3) as NULL, as Spark's reader gives them."""
    have = {r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {relation}").fetchall()}
    missing = [f"CAST(NULL AS {t}) AS {c}" for c, t in (("in_if_boundary", "VARCHAR"), ("out_if_boundary", "VARCHAR"),
                                                        ("flow_direction", "INTEGER")) if c not in have]
    return f"(SELECT *, {', '.join(missing)} FROM {relation})" if missing else relation


def counted_parquet(con, files: list[str], cfg, out_dir) -> list[str]:
    """The day's flow files `files` (hive paths hour=NN) as the config's rule counts them:
    `files` unchanged for `all`, else Parquet files of the counted rows under `out_dir`, in
    hive paths hour=N as the local engines read them (the Go top-talkers kernel, DuckDB)."""
    from pathlib import Path  # noqa: PLC0415  (only for the local engines)

    rule, window = settings(cfg)
    if rule == "all" or not files:
        return list(files)
    listed = ", ".join("'" + str(f).replace("'", "''") + "'" for f in files)
    rel = duckdb_relation(con, f"read_parquet([{listed}], hive_partitioning = true, union_by_name = true)")
    target = str(out_dir).replace("'", "''")
    con.execute(f"COPY (SELECT * EXCLUDE (date) FROM ({duckdb_sql(rel, rule, window)})) TO '{target}' "
                "(FORMAT parquet, COMPRESSION zstd, PARTITION_BY (hour))")
    return sorted(str(p) for p in Path(out_dir).glob("hour=*/*.parquet"))
