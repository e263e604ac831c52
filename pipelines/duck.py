"""DuckDB side of the report jobs: the lake's files, an in-process connection and the
`direction` of flows. Which engine runs a report is decided in jobs/engines.py.

Jobs whose Spark plan is dominated by big hash aggregations on one machine also have a
local implementation writing the very same table: flow_size_dist on DuckDB, top_talkers
in a Go kernel (top_talkers_local.py); tests check the engines row for row. Everything
else stays on Spark.
"""
from __future__ import annotations

import os
from pathlib import Path

from flowlake.pipelines.locality import is_local, parse_prefixes


def parquet_files(part: Path) -> list[str]:
    """The Parquet files Spark would read below `part`: hidden (. or _) paths skipped."""
    if not part.exists():
        return []
    return sorted(str(p) for p in part.rglob("*.parquet")
                  if not any(s.startswith((".", "_")) for s in p.relative_to(part).parts))


def sql_list(paths: list[str]) -> str:
    return "[" + ", ".join("'" + p.replace("'", "''") + "'" for p in paths) + "]"


def connect(cfg):
    """An in-process DuckDB: every core, spills under $FLOWLAKE_HOME/tmp/duckdb."""
    import duckdb

    tmp = Path(cfg.path("tmp", "duckdb"))
    tmp.mkdir(parents=True, exist_ok=True)
    return duckdb.connect(config={"temp_directory": str(tmp), "threads": os.cpu_count() or 1})


def partition_files(ctx, rel: str, date=None) -> list[str]:
    """The files of lake/<rel>/date=<date> (default the job's date) after quarantining
    unreadable ones, as ctx.flows() and ctx.report() do."""
    from flowlake.pipelines import lake_check

    part = f"date={(date or ctx.date).isoformat()}"
    lake_check.check(ctx.lake, rel, part)
    # one version (Delta) or pinned (Parquet): a compaction cannot take them away
    return ctx.lake_snapshot().files(rel, [ctx.lake / rel / part])[1]


def flow_files(ctx) -> list[str]:
    """The day's flow files (see partition_files)."""
    return partition_files(ctx, "flows")


def flows_view(con, ctx, name: str = "day_flows") -> str | None:
    """A view of the day's flows (hour, src_addr, dst_addr, proto, bytes, packets) after
    quarantining unreadable files, as ctx.flows() does; None when there are none."""
    files = flow_files(ctx)
    if not files:
        return None
    con.execute(f"""CREATE OR REPLACE TEMP VIEW {name} AS
        SELECT CAST(hour AS INTEGER) AS hour, src_addr, dst_addr, CAST(proto AS INTEGER) AS proto,
               CAST(bytes AS BIGINT) AS bytes, CAST(packets AS BIGINT) AS packets
        FROM read_parquet({sql_list(files)}, hive_partitioning = true, union_by_name = true)""")
    return name


def _local_udf(prefixes):
    """Vectorised DuckDB UDF: non-IPv4 address text -> in a local prefix, by the reference
    rule itself (pipelines/locality.py is_local)."""
    import pyarrow as pa

    nets = parse_prefixes(prefixes)

    def is_local_arrow(arr):
        return pa.array([is_local(a, nets) for a in arr.to_pylist()], pa.bool_())

    return is_local_arrow


def _v4_local_sql(prefixes) -> str:
    """SQL over `o` (the four octets as BIGINT, NULL when not a number): in a local IPv4 prefix."""
    nets = [n for n in parse_prefixes(prefixes) if n.version == 4]
    ip = "(o[1] * 16777216 + o[2] * 65536 + o[3] * 256 + o[4])"
    ranges = " OR ".join(f"{ip} BETWEEN {int(n.network_address)} AND {int(n.broadcast_address)}" for n in nets)
    valid = "len(o) = 4 AND len(list_filter(o, x -> x BETWEEN 0 AND 255)) = 4"
    return f"({valid} AND ({ranges}))" if nets else "false"


_V4_OCTET = r"[\x00-\x20]*[+-]?[0-9]+[\x00-\x20]*"  # an integer, as locality._V4_PART (no 1e1, no 1_0)


def _local_addresses(con, table: str, addresses: str, prefixes) -> None:
    """Create temp table `table` (a, loc): every distinct address of the relation
    `addresses` (one column `a`) and whether it lies in a local prefix. Same rules as
    pipelines/locality.py is_local (the reference): IPv4 text parsed in SQL; anything else
    (IPv6, IPv4-mapped IPv6) by is_local itself, called once per distinct address."""
    try:  # a previous call on this connection may have registered it with other prefixes
        con.remove_function("flowlake_is_local")
    except Exception:  # noqa: BLE001 - duckdb raises InvalidInputException when absent
        pass
    con.create_function("flowlake_is_local", _local_udf(prefixes), ["VARCHAR"], "BOOLEAN", type="arrow",
                        null_handling="special")
    con.execute(f"""CREATE OR REPLACE TEMP TABLE {table} AS
        WITH a AS (SELECT DISTINCT a FROM {addresses}),
             t AS (SELECT a, lower(trim(a)) AS t FROM a),
             o AS (SELECT a, list_transform(string_split(t, '.'), x -> CASE WHEN regexp_full_match(x, '{_V4_OCTET}')
                                                                             THEN TRY_CAST(x AS BIGINT) END) AS o
                   FROM t WHERE t IS NULL OR t NOT LIKE '%:%')
        SELECT a, coalesce({_v4_local_sql(prefixes)}, false) AS loc FROM o
        UNION ALL SELECT a, coalesce(flowlake_is_local(a), false) FROM t WHERE t LIKE '%:%'""")


def with_direction(con, table: str, source: str, select: str, prefixes) -> None:
    """Create temp table `table`: `select` (columns of `source` as f.<col>) plus
    `direction`, as common.with_direction labels it. Locality is decided once per
    distinct address (temp table <table>_addr), then joined to both ends."""
    _local_addresses(con, f"{table}_addr",
                     f"(SELECT src_addr AS a FROM {source} UNION ALL SELECT dst_addr FROM {source})", prefixes)
    con.execute(f"""CREATE OR REPLACE TEMP TABLE {table} AS
        SELECT {select}, CASE WHEN s.loc AND d.loc THEN 'internal' WHEN s.loc THEN 'outbound'
                              WHEN d.loc THEN 'inbound' ELSE 'transit' END AS direction
        FROM {source} f JOIN {table}_addr s ON f.src_addr IS NOT DISTINCT FROM s.a
                        JOIN {table}_addr d ON f.dst_addr IS NOT DISTINCT FROM d.a""")
