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
  they are counted with `key` (status names their exporters). Observations are matched into
  flows as for `key`, and of one flow one observation point counts (with all its records),
  also when the boundary rule keeps several: a flow that enters and leaves on external
  interfaces (transit, or contradictory direction data such as an ingress record on one
  external interface and an egress record on another) counts once, at its best point
  (ranked as for `key`); observation_points reports such flows (column `contradictory`).
  A flow that never crosses the boundary (every observation classified, none external:
  traffic between two internal hosts, e.g. internal scanning, seen on internal interfaces
  only) is not dropped: it is counted with `key`, once, at its best point, so the site's
  reports (top talkers' `internal` direction, scanners, fan_in) still see it.
- `key`: observations of one flow are matched by key (src/dst address, ports, protocol)
  across exporters and directions; observations of a key whose times overlap, or lie within
  `[site] dedup_window_seconds` of each other, are one flow. Of that flow's observation
  points (exporter and direction) the most complete one counts, with all its
  records (a long flow cut by the active timeout stays whole): the lowest sampling rate
  (unsampled first, unknown rate last), then the most packets and bytes as the lake holds
  them (already multiplied by the sampling rate: compared after scaling).
- `auto` (default): `boundary` for observations whose interfaces are classified, `key` for
  the rest: of a flow's candidates (the observations `boundary` keeps, and the unclassified
  ones) one observation point counts, a boundary-kept one preferred.
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

# the rule's names, settings and DuckDB form live in count_rule.py (no pyspark: the query
# engines use them); re-exported here for the Spark jobs
from .count_rule import (  # noqa: F401
    DEFAULT_WINDOW_SECONDS,
    KEY,
    RULES,
    CountRuleError,
    check_rule,
    counted_parquet,
    duckdb_relation,
    duckdb_sql,
    settings,
)

# helper columns (dropped by count_once)
CLASSIFIED = "_co_classified"   # the row's interfaces are classified (a boundary is set)
KEPT_BY_BOUNDARY = "_co_boundary"  # the boundary rule keeps the row (meaningful when classified)
CLUSTER = "_co_cluster"         # the flow, within its key
POINTS = "_co_points"           # distinct observation points of the row's flow
COUNTED = "_co_counted"         # the rule counts this row
CONTRADICTORY = "_co_contradictory"  # the row's flow enters and leaves on external interfaces


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
    types = {"in_if_boundary": "string", "out_if_boundary": "string", "flow_direction": "int",
             "source_file": "string", "file_seq": "long"}
    for n in names:
        if n not in flows.columns:
            flows = flows.withColumn(n, F.lit(None).cast(types[n]))
    return flows


def observed(flows: DataFrame, window_seconds: float = DEFAULT_WINDOW_SECONDS) -> DataFrame:
    """flows + CLASSIFIED, KEPT_BY_BOUNDARY, CLUSTER (the flow within its key), POINTS (its
    observation points) and the ranking columns the rules use."""
    flows = _with_columns(flows, ("in_if_boundary", "out_if_boundary", "flow_direction", "source_file", "file_seq"))
    window_ms = int(round(window_seconds * 1000))
    exp = exporter_exports(flows).select("exporter", F.col("ingress").alias("_co_ingress_exp"))
    df = flows.join(F.broadcast(exp), "exporter", "left")
    ext_in = _boundary("in_if_boundary") == "external"
    ext_out = _boundary("out_if_boundary") == "external"
    df = (df.withColumn(CLASSIFIED, (_boundary("in_if_boundary") != "") | (_boundary("out_if_boundary") != ""))
          .withColumn(KEPT_BY_BOUNDARY, (ext_in | ext_out)
                      & (_ingress() | (F.coalesce(F.col("_co_ingress_exp"), F.lit(0)) == 0))))
    start, end = F.unix_millis(F.col("time_start")), F.unix_millis(F.col("time_end"))
    # a total order (a lake row is one (source_file, file_seq)): the two windows below each
    # sort, and with ties they may order two observations of equal times differently, which
    # split one flow into two clusters, counted twice (found in DuckDB with threads)
    by_key = Window.partitionBy(*KEY).orderBy(start, end, "exporter", F.coalesce(F.col("flow_direction"), F.lit(0)),
                                              "source_file", "file_seq")
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
          .withColumn(CONTRADICTORY, (F.max(ext_in.cast("int")).over(flow_w) == 1)
                      & (F.max(ext_out.cast("int")).over(flow_w) == 1))
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
    # auto / boundary: the candidates are the rows the boundary rule keeps and the unclassified
    # ones; of a flow's candidate observation points one counts, with all its records: a
    # boundary-kept one first, then by rank. One point also when the boundary rule keeps
    # several (a flow entering and leaving on external interfaces: transit, or contradictory
    # direction data; CONTRADICTORY marks it and observation_points reports it)
    # A flow with no such candidate never crossed the boundary (scanning between two internal
    # hosts seen only on internal interfaces): every observation of it is a candidate, so it
    # counts once as under `key` instead of vanishing from the site's reports
    placed = ~F.col(CLASSIFIED) | F.col(KEPT_BY_BOUNDARY)
    cand = placed | ~F.max(placed).over(flow_w)
    pref = F.when(F.col(CLASSIFIED), F.lit(0)).otherwise(F.lit(1))
    ranked = F.when(cand, F.struct(pref.alias("pref"), F.col("_co_rank").alias("rank")))
    df = df.withColumn("_co_cand", cand).withColumn("_co_best", F.min(ranked).over(flow_w))
    return df.withColumn(COUNTED, F.col("_co_cand") & (ranked == F.col("_co_best")))


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
