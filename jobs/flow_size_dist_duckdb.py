"""The flow_size_dist table computed by DuckDB: the same rows as
flow_size_dist.flow_size_dist (Spark), for one machine ([reports] engine, see jobs/engines.py).

Exact, like the Spark job, but simpler because DuckDB's quantile_disc is the nearest
rank (numpy's inverted_cdf) and selects rather than sorts:
- per hour/day x direction/'all' x class/'all' (eight grouping sets, one aggregation):
  flows, sums and the percentiles of bytes and packets;
- top-1% share: only flows at or above their group's p99 can be among its ceil(n/100)
  largest (p99's rank ceil(0.99 n) <= n - ceil(n/100) + 1), so those few are ranked;
- CCDF: counts per 4-per-decade log bin from the finest groups, rolled up.
"""
from __future__ import annotations

import itertools
import tempfile
from pathlib import Path

from flowlake.jobs import common, count_once
from flowlake.pipelines import duck

GROUP = ("hour", "direction", "flow_class")
ROLLED = {"hour": str(common.DAY_HOUR), "direction": "'all'", "flow_class": "'all'"}
QS = "[0.5, 0.75, 0.9, 0.99, 0.999]"
NAMES = ("p50", "p75", "p90", "p99", "p999")
SETS = [[c for c, keep in zip(GROUP, mask) if keep] for mask in itertools.product((True, False), repeat=3)]
BINS_PER_DECADE = 4


def _rolled(cols=GROUP) -> str:
    return ", ".join(f"coalesce({c}, {ROLLED[c]}) AS {c}" for c in cols)


def _sets(extra: str = "") -> str:
    return ", ".join("(" + ", ".join([*s, *([extra] if extra else [])]) + ")" for s in SETS)


def flow_size_dist_sql(con, flows: str, prefixes) -> str:
    """flows: a DuckDB relation with hour, src_addr, dst_addr, proto, bytes, packets.
    Builds temp tables on `con`; returns the query of the flow_size_dist table."""
    duck.with_direction(con, "fs", flows, """f.hour, f.bytes, f.packets,
        CASE WHEN f.proto = 6 THEN 'tcp' WHEN f.proto = 17 THEN 'udp' WHEN f.proto IN (1, 58) THEN 'icmp'
             ELSE 'other' END AS flow_class""", prefixes)
    con.execute(f"""CREATE OR REPLACE TEMP TABLE fs_stats AS
        SELECT {_rolled()}, count(*)::BIGINT AS flows, sum(bytes)::BIGINT AS bytes, sum(packets)::BIGINT AS packets,
               quantile_disc(bytes, {QS}) AS qb, quantile_disc(packets, {QS}) AS qp
        FROM fs GROUP BY GROUPING SETS ({_sets()})""")
    # top-1% share: a flow counts towards each of its eight groups; keep it for a group
    # only if it is at or above that group's p99
    tails = []
    for s in SETS:
        on = " AND ".join(f"g.{c} = f.{c}" if c in s else f"g.{c} = {ROLLED[c]}" for c in GROUP)
        tails.append(f"SELECT g.hour, g.direction, g.flow_class, f.bytes FROM fs f JOIN fs_stats g ON {on} "
                     f"WHERE f.bytes >= g.qb[4]")
    con.execute(f"""CREATE OR REPLACE TEMP TABLE fs_top AS
        WITH t AS ({" UNION ALL ".join(tails)}),
             r AS (SELECT *, row_number() OVER (PARTITION BY hour, direction, flow_class ORDER BY bytes DESC) AS rn FROM t)
        SELECT r.hour, r.direction, r.flow_class, sum(r.bytes)::BIGINT AS top_bytes
        FROM r JOIN fs_stats g USING (hour, direction, flow_class)
        WHERE r.rn <= (g.flows + 99) // 100 GROUP BY ALL""")
    ccdf = {}
    for v in ("bytes", "packets"):
        con.execute(f"""CREATE OR REPLACE TEMP TABLE fs_ccdf_{v} AS
            WITH fine AS (SELECT hour, direction, flow_class, floor(log10({v}::DOUBLE) * {BINS_PER_DECADE})::INTEGER AS k,
                                 count(*) AS c FROM fs WHERE {v} >= 1 GROUP BY ALL),
                 bins AS (SELECT {_rolled()}, k, sum(c) AS c FROM fine GROUP BY GROUPING SETS ({_sets("k")})),
                 pts AS (SELECT b.*, sum(b.c) OVER (PARTITION BY hour, direction, flow_class ORDER BY k DESC) AS at_least
                         FROM bins b)
            SELECT p.hour, p.direction, p.flow_class,
                   list(pow(10.0, p.k / {BINS_PER_DECADE}.0) ORDER BY p.k) AS x,
                   list(p.at_least / g.flows ORDER BY p.k) AS y
            FROM pts p JOIN fs_stats g USING (hour, direction, flow_class) GROUP BY ALL""")
        ccdf[v] = f"fs_ccdf_{v}"
    pct = ", ".join(f"g.q{v[0]}[{i + 1}] AS {v}_{name}" for v in ("bytes", "packets") for i, name in enumerate(NAMES))
    return f"""SELECT CASE WHEN g.hour = {common.DAY_HOUR} THEN NULL ELSE g.hour END AS hour, g.direction, g.flow_class,
            g.flows, g.packets, g.bytes, g.bytes / g.flows AS bytes_mean, g.packets / g.flows AS packets_mean, {pct},
            CASE WHEN g.bytes > 0 THEN t.top_bytes / g.bytes ELSE 0.0 END AS top1pct_bytes_share,
            coalesce(cb.x, []::DOUBLE[]) AS ccdf_bytes_x, coalesce(cb.y, []::DOUBLE[]) AS ccdf_bytes_y,
            coalesce(cp.x, []::DOUBLE[]) AS ccdf_packets_x, coalesce(cp.y, []::DOUBLE[]) AS ccdf_packets_y
        FROM fs_stats g LEFT JOIN fs_top t USING (hour, direction, flow_class)
             LEFT JOIN {ccdf["bytes"]} cb USING (hour, direction, flow_class)
             LEFT JOIN {ccdf["packets"]} cp USING (hour, direction, flow_class)"""


def flow_size_dist(con, flows: str, prefixes):
    """The flow_size_dist table as a pyarrow Table (see flow_size_dist_sql)."""
    return con.execute(flow_size_dist_sql(con, flows, prefixes)).fetch_arrow_table()


def run(ctx) -> bool:
    """Write the flow_size_dist table with DuckDB; False when there are no flow files."""
    con = duck.connect(ctx.cfg)
    try:
        if common.count_at(ctx) == "all":
            flows = duck.flows_view(con, ctx)
            if flows is None:
                return False
            ctx.write_duckdb(con, flow_size_dist_sql(con, flows, ctx.cfg.site.local_prefixes), "flow_size_dist")
            return True
        files = duck.flow_files(ctx)
        if not files:
            return False
        # each flow once, by [site] count_at (jobs/count_once.py): the view over the counted rows,
        # those of the run (common.counted_files) or, without a run, its own
        with tempfile.TemporaryDirectory(dir=ctx.cfg.path("tmp")) as tmp:
            counted = common.counted_files(ctx)
            if counted is None:
                counted = count_once.counted_parquet(con, files, ctx.cfg, Path(tmp) / "counted")
            if not counted:
                return False
            con.execute(f"""CREATE OR REPLACE TEMP VIEW day_flows AS
                SELECT CAST(hour AS INTEGER) AS hour, src_addr, dst_addr, CAST(proto AS INTEGER) AS proto,
                       CAST(bytes AS BIGINT) AS bytes, CAST(packets AS BIGINT) AS packets
                FROM read_parquet({duck.sql_list(counted)}, hive_partitioning = true, union_by_name = true)""")
            ctx.write_duckdb(con, flow_size_dist_sql(con, "day_flows", ctx.cfg.site.local_prefixes), "flow_size_dist")
    finally:
        con.close()
    return True
