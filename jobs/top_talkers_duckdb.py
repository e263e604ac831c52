"""The top_talkers table computed by DuckDB: the same rows as top_talkers.top_talkers
(Spark), for one machine.

Why a second engine: on two cores Spark needs ~134 s for the 1,125 lists of 10M flows
(one hash aggregation into ~7M hourly address pairs is itself ~15 s of Spark there);
DuckDB writes the same table in ~13.5 s (bench/jobs.py --spark-engine prints both).
`[reports] engine` picks it: `auto` (default) uses DuckDB when Spark runs in local mode,
Spark on a cluster. tests/test_jobs.py checks that both engines write identical tables,
and the table against nfdump's `-s` statistics.

Same definitions as the Spark job: direction from [site] local_prefixes (IPv4 text parsed
in SQL like common.add_local_flag; anything else, e.g. IPv6 and IPv4-mapped IPv6, by
Python's ipaddress on the distinct addresses only); rank ties broken by the other metrics
descending, then address text ascending; share against the hour's and direction's total;
rank_change against the previous day's table. One known difference: an IPv4-mapped
address written in hex (`::ffff:a01:203`) counts as IPv4 here but as IPv6 in Spark's
parser; addresses reach the lake in canonical text (`::ffff:10.1.2.3`), where both agree.
"""
from __future__ import annotations

from . import common, duck

METRICS = ("bytes", "packets", "flows")
OTHERS = {m: [o for o in METRICS if o != m] for m in METRICS}  # tie order, as in top_talkers.rank


def top_talkers(con, flows: str, prefixes, top_n: int, previous: str | None = None):
    """The top_talkers table as a pyarrow Table (see top_talkers_sql)."""
    return con.execute(top_talkers_sql(con, flows, prefixes, top_n, previous)).fetch_arrow_table()


def top_talkers_sql(con, flows: str, prefixes, top_n: int, previous: str | None = None) -> str:
    """flows: a DuckDB relation (table, view or read_parquet(...)) with hour, src_addr,
    dst_addr, bytes, packets. previous: the same for the previous day's top_talkers
    table, or None. Builds temporary tables on `con` and returns the query of the
    top_talkers table (valid on `con` until the next call)."""
    top_n = int(top_n)
    if top_n < 1:
        raise ValueError(f"config [reports] top_n = {top_n}: must be at least 1")
    day = common.DAY_HOUR
    sums = "sum(bytes)::BIGINT AS bytes, sum(packets)::BIGINT AS packets, sum(flows)::BIGINT AS flows"
    # the one pass over the flows: hourly totals per (src, dst); direction depends on the
    # addresses only, so it is derived afterwards from the (far fewer) distinct addresses
    con.execute(f"""CREATE OR REPLACE TEMP TABLE tt_raw AS
        SELECT CAST(hour AS INTEGER) AS hour, src_addr, dst_addr, sum(bytes)::BIGINT AS bytes,
               sum(packets)::BIGINT AS packets, count(*)::BIGINT AS flows
        FROM {flows} GROUP BY ALL""")
    duck.with_direction(con, "tt_pairs", "tt_raw", "f.hour, f.src_addr, f.dst_addr, f.bytes, f.packets, f.flows",
                        prefixes)
    con.execute("DROP TABLE tt_raw")
    # keyed lists: src and dst per hour/day and direction/'all' (rolled up from per-hour
    # key totals, not from the pairs again); pairs per hour/day and direction
    levels = []
    for by, key, null in (("src", "src_addr", "dst_addr"), ("dst", "dst_addr", "src_addr")):
        levels.append(f"""SELECT coalesce(hour, {day}) AS hour, coalesce(direction, 'all') AS direction, '{by}' AS "by",
            {key}, NULL::VARCHAR AS {null}, {sums}
            FROM (SELECT hour, direction, {key}, {sums} FROM tt_pairs GROUP BY ALL)
            GROUP BY GROUPING SETS ((hour, direction, {key}), (direction, {key}), (hour, {key}), ({key}))""")
    con.execute("CREATE OR REPLACE TEMP TABLE tt_hosts AS " + " UNION ALL BY NAME ".join(levels))
    con.execute(f"""CREATE OR REPLACE TEMP TABLE tt_pair_day AS
        SELECT {day} AS hour, direction, src_addr, dst_addr, {sums} FROM tt_pairs GROUP BY direction, src_addr, dst_addr""")
    con.execute("""CREATE OR REPLACE TEMP VIEW tt_pair_keys AS
        SELECT hour, direction, 'pair' AS "by", src_addr, dst_addr, bytes, packets, flows FROM tt_pairs
        UNION ALL SELECT hour, direction, 'pair', src_addr, dst_addr, bytes, packets, flows FROM tt_pair_day""")
    con.execute(f"""CREATE OR REPLACE TEMP TABLE tt_totals AS
        SELECT coalesce(hour, {day}) AS hour, coalesce(direction, 'all') AS direction, {sums} FROM tt_pairs
        GROUP BY GROUPING SETS ((hour, direction), (direction), (hour), ())""")
    # No sort of every key: per list the N-th largest value of each metric (a bounded
    # max(x, N)) is a floor every top-N key reaches; only keys at or above a floor are
    # ranked. A pair has one direction, so the 'all' pair lists are the pairs of every
    # direction taken together (floors per hour only).
    floors = ", ".join(f"max({m}, {top_n})[-1] AS floor_{m}" for m in METRICS)
    reach = " OR ".join(f"k.{m} >= f.floor_{m}" for m in METRICS)
    con.execute(f"""CREATE OR REPLACE TEMP TABLE tt_cand AS
        WITH fh AS (SELECT hour, direction, "by", {floors} FROM tt_hosts GROUP BY ALL),
             fp AS (SELECT hour, direction, {floors} FROM tt_pair_keys GROUP BY ALL),
             fa AS (SELECT hour, {floors} FROM tt_pair_keys GROUP BY ALL)
        SELECT k.* FROM tt_hosts k JOIN fh f USING (hour, direction, "by") WHERE {reach}
        UNION ALL SELECT k.* FROM tt_pair_keys k JOIN fp f USING (hour, direction) WHERE {reach}
        UNION ALL SELECT k.hour, 'all', k."by", k.src_addr, k.dst_addr, k.bytes, k.packets, k.flows
                  FROM tt_pair_keys k JOIN fa f USING (hour) WHERE {reach}""")
    ranked = " UNION ALL ".join(
        f"""SELECT *, '{m}' AS metric, row_number() OVER (PARTITION BY hour, direction, "by" ORDER BY {m} DESC,
                {OTHERS[m][0]} DESC, {OTHERS[m][1]} DESC, src_addr ASC NULLS FIRST, dst_addr ASC NULLS FIRST) AS rank
            FROM tt_cand QUALIFY rank <= {top_n}""" for m in METRICS)
    share = " ".join(f"WHEN '{m}' THEN x.{m} / t.{m}" for m in METRICS)
    prev_join, change = "", "NULL::INTEGER"
    if previous is not None:
        prev_join = f"""LEFT JOIN {previous} p ON coalesce(p.hour, {day}) = x.hour AND p.direction = x.direction
            AND p."by" = x."by" AND p.metric = x.metric AND p.src_addr IS NOT DISTINCT FROM x.src_addr
            AND p.dst_addr IS NOT DISTINCT FROM x.dst_addr"""
        change = "CAST(p.rank - x.rank AS INTEGER)"
    sql = f"""SELECT CASE WHEN x.hour = {day} THEN NULL ELSE x.hour END::INTEGER AS hour, x.direction, x."by", x.metric,
            x.rank::INTEGER AS rank, x.src_addr, x.dst_addr, x.bytes, x.packets, x.flows,
            CAST(CASE x.metric {share} END AS DOUBLE) AS share, {change} AS rank_change
        FROM ({ranked}) x JOIN tt_totals t ON t.hour = x.hour AND t.direction = x.direction {prev_join}
        ORDER BY x.hour, x.direction, x."by", x.metric, x.rank"""
    return sql


def run(ctx) -> bool:
    """Write the top_talkers table with DuckDB; False when there are no flow files (the
    caller's Spark path then writes the empty table)."""
    import datetime as dt

    from flowlake.pipelines import lake_check

    prev_date = (ctx.date - dt.timedelta(days=1)).isoformat()
    lake_check.check(ctx.lake, "reports/top_talkers", f"date={prev_date}")
    prev_files = duck.parquet_files(ctx.lake / "reports" / "top_talkers" / f"date={prev_date}")
    con = duck.connect(ctx.cfg)
    try:
        flows = duck.flows_view(con, ctx)
        if flows is None:
            return False
        previous = None
        if prev_files:
            con.execute(f"""CREATE TEMP VIEW tt_previous AS SELECT hour, direction, "by", metric, rank, src_addr, dst_addr
                            FROM read_parquet({duck.sql_list(prev_files)}, union_by_name = true)""")
            previous = "tt_previous"
        query = top_talkers_sql(con, flows, ctx.cfg.site.local_prefixes, int(ctx.cfg.reports.top_n), previous)
        ctx.write_duckdb(con, query, "top_talkers")
    finally:
        con.close()
    return True
