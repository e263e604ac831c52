"""Interface capacity from the SNMP counters (issue 21): utilisation per interface and side
(5-minute, hourly, daily mean/peak/p95 against ifHighSpeed) and flow coverage per hour
(sampling-corrected flow bytes / counter bytes: each flow's bytes spread over the hours it
lasted, as the counters moved; on the out side only the flows that left: a flow the router
dropped or consumed never reached its output interface's counters).

Each poll's delta covers (previous poll, poll]; it is spread evenly over the 5-minute
buckets that interval overlaps (a constant rate within one poll interval, the most the
counters say), so a late or missed poll moves bytes to the right buckets instead of
piling them into one. Rates are bytes * 8 over the seconds the polls cover. The 95th
percentile is the nearest rank among the buckets that have counter data (a bucket the
poller missed is unknown, not zero).

Runs on DuckDB in the job's process, whatever [reports] engine says: the counters are a
few thousand rows per interface and day, and the flows enter as one group-by (exporter,
interface, hour); the SQL builders below are the pure part, run() the I/O.
"""
from __future__ import annotations

import datetime as dt

from flowlake.pipelines import duck
from flowlake.schemas.snmp import FLOW_COVERAGE, INTERFACE_COUNTERS, INTERFACE_UTILISATION

NAME = "interface_capacity"
TABLES = (INTERFACE_UTILISATION, FLOW_COVERAGE)
BUCKET_MS = 300_000
FULL = 0.95  # share of an hour (day) the polls must cover for a coverage figure


def day_ms(day: dt.date) -> int:
    return int(dt.datetime(day.year, day.month, day.day, tzinfo=dt.timezone.utc).timestamp() * 1000)


def buckets_sql(counters: str, day: dt.date) -> str:
    """5-minute buckets of one UTC day per exporter, interface and side: bytes (each delta
    spread over its interval), seconds covered, speed (bit/s), name."""
    lo, hi = day_ms(day), day_ms(day) + 86_400_000
    sides = " UNION ALL ".join(
        f"""SELECT exporter, if_index, if_name, speed_mbps, epoch_ms(time) AS t1,
                   epoch_ms(time) - CAST(round(interval_s * 1000) AS BIGINT) AS t0, '{side}' AS side,
                   CAST({side}_octets AS DOUBLE) AS octets
            FROM {counters} WHERE {side}_octets IS NOT NULL AND interval_s > 0""" for side in ("in", "out"))
    return f"""
        WITH deltas AS ({sides}),
        spread AS (
            SELECT *, unnest(range(t0 // {BUCKET_MS} * {BUCKET_MS}, t1, {BUCKET_MS})) AS b FROM deltas
            WHERE t1 > {lo} AND t0 < {hi}),
        shares AS (
            SELECT *, greatest(0, least(t1, b + {BUCKET_MS}) - greatest(t0, b)) AS overlap_ms FROM spread
            WHERE b >= {lo} AND b < {hi})
        SELECT exporter, if_index, side, b AS bucket_ms,
               arg_max(if_name, t1) AS if_name, max(speed_mbps) * 1e6 AS speed_bps,
               sum(octets * overlap_ms / (t1 - t0)) AS bytes, sum(overlap_ms) / 1000.0 AS seconds
        FROM shares WHERE overlap_ms > 0
        GROUP BY exporter, if_index, side, b"""


def utilisation_sql(buckets: str) -> str:
    """interface_utilisation rows (5m, 1h, 1d) from buckets_sql's rows."""
    ratio = "CASE WHEN speed_bps > 0 THEN {x} / speed_bps END"

    def period(name: str, key: str) -> str:
        return f"""
            SELECT '{name}' AS period, make_timestamp(({key}) * 1000) AS bucket, exporter, if_index,
                   arg_max(if_name, bucket_ms) AS if_name, side, sum(bytes) AS bytes, sum(seconds) AS seconds,
                   sum(bytes) * 8 / sum(seconds) AS bps, max(bps5) AS peak_bps,
                   list_sort(list(bps5))[CAST(ceil(0.95 * count(*)) AS BIGINT)] AS p95_bps,
                   max(speed_bps) AS speed_bps
            FROM (SELECT *, bytes * 8 / seconds AS bps5 FROM {buckets})
            GROUP BY exporter, if_index, side, {key}"""
    hour_key = "bucket_ms // 3600000 * 3600000"
    return f"""
        SELECT period, bucket, exporter, if_index, if_name, side, bytes, seconds, bps, peak_bps, p95_bps, speed_bps,
               {ratio.format(x='bps')} AS utilisation, {ratio.format(x='peak_bps')} AS peak_utilisation,
               {ratio.format(x='p95_bps')} AS p95_utilisation
        FROM ({period('5m', 'bucket_ms')} UNION ALL {period('1h', hour_key)}
              UNION ALL {period('1d', 'bucket_ms // 86400000 * 86400000')})
        ORDER BY exporter, if_index, side, period, bucket"""


def flow_hours_sql(src: str, day: dt.date, leaves: str, spread: bool) -> str:
    """The day's flows as coverage_sql reads them (exporter, input_if, output_if, hour, bytes,
    leaves, flows): each flow's bytes spread evenly over the hours it lasted, as the
    counters saw them move (a 120 MB flow from 14:59:51 to 15:04:51 is 97 % 15:00's: counted
    in its first hour, one such transfer put an interface's hour at 2.2x coverage and the
    next at 0.7x), the share after the day's end left out; `flows` counts a flow once, in
    its first hour. spread False (files without time_start/time_end): by the hour it started."""
    if not spread:
        return f"SELECT exporter, input_if, output_if, hour, bytes, {leaves} AS leaves, 1 AS flows FROM {src}"
    lo, hi = day_ms(day), day_ms(day) + 86_400_000
    return f"""
        WITH f AS (SELECT exporter, input_if, output_if, bytes, {leaves} AS leaves, epoch_ms(time_start) AS ts,
                          greatest(epoch_ms(time_end), epoch_ms(time_start)) AS te FROM {src}),
        h AS (SELECT *, unnest(range(ts // 3600000 * 3600000, greatest(te, ts + 1), 3600000)) AS h0 FROM f)
        SELECT exporter, input_if, output_if, CAST((h0 - {lo}) // 3600000 AS INTEGER) AS hour,
               CASE WHEN te > ts THEN bytes * (least(te, h0 + 3600000) - greatest(ts, h0)) / (te - ts)
                    ELSE bytes END AS bytes,
               leaves, CASE WHEN h0 = ts // 3600000 * 3600000 THEN 1 ELSE 0 END AS flows
        FROM h WHERE h0 >= {lo} AND h0 < {hi}"""


def coverage_sql(buckets: str, flows: str | None) -> str:
    """flow_coverage rows: per exporter, interface, side and hour (and the day: hour null),
    flow bytes over counter bytes. `flows` has exporter, input_if, output_if, hour, bytes,
    `flows` (flows starting there) and `leaves` (false for a flow the router dropped or
    consumed, forwardingStatus 128-255: it came in but never went out, so the output
    interface's counters never saw it): flow_hours_sql's rows
    (None: no flows that day, so coverage 0 wherever the counters saw traffic)."""
    if flows:
        flow_sides = f"""
            SELECT exporter, CAST(input_if AS BIGINT) AS if_index, 'in' AS side, CAST(hour AS INTEGER) AS hour,
                   sum(bytes) AS flow_bytes, sum(flows) AS flows FROM {flows} GROUP BY ALL
            UNION ALL
            SELECT exporter, CAST(output_if AS BIGINT), 'out', CAST(hour AS INTEGER), sum(bytes), sum(flows)
            FROM {flows} WHERE leaves GROUP BY ALL"""
    else:
        flow_sides = "SELECT NULL::VARCHAR AS exporter, 0::BIGINT AS if_index, '' AS side, 0 AS hour, 0.0 AS flow_bytes, 0 AS flows WHERE false"
    return f"""
        WITH hours AS (
            SELECT exporter, if_index, side, CAST((bucket_ms // 3600000) % 24 AS INTEGER) AS hour,
                   arg_max(if_name, bucket_ms) AS if_name, sum(bytes) AS counter_bytes, sum(seconds) AS counter_seconds
            FROM {buckets} GROUP BY ALL),
        f AS ({flow_sides}),
        joined AS (
            SELECT h.exporter, h.if_index, h.if_name, h.side, h.hour, h.counter_bytes, h.counter_seconds,
                   coalesce(f.flow_bytes, 0) AS flow_bytes, coalesce(f.flows, 0) AS flows
            FROM hours h LEFT JOIN f ON f.exporter = h.exporter AND f.if_index = h.if_index
                                     AND f.side = h.side AND f.hour = h.hour),
        both_ AS (
            SELECT hour, exporter, if_index, if_name, side, flow_bytes, flows, counter_bytes, counter_seconds,
                   3600.0 AS span FROM joined
            UNION ALL
            SELECT NULL, exporter, if_index, arg_max(if_name, hour), side, sum(flow_bytes), sum(flows),
                   sum(counter_bytes), sum(counter_seconds), 86400.0 FROM joined GROUP BY exporter, if_index, side)
        SELECT hour, exporter, if_index, if_name, side, CAST(flow_bytes AS DOUBLE) AS flow_bytes, flows,
               counter_bytes, counter_seconds,
               CASE WHEN counter_bytes > 0 AND counter_seconds >= {FULL} * span
                    THEN flow_bytes / counter_bytes END AS coverage
        FROM both_ ORDER BY exporter, if_index, side, hour NULLS LAST"""


def run(ctx) -> None:
    ctx.count_at = "all"  # flow_coverage: a view per interface, every observation (issue 34)
    con = duck.connect(ctx.cfg)
    # a poll just after midnight covers the day's last minutes: read the next day's files too
    files = [f for d in (ctx.date, ctx.date + dt.timedelta(days=1))
             for f in duck.partition_files(ctx, "interface_counters", d)]
    if files:
        con.execute(f"""CREATE OR REPLACE TEMP VIEW counters AS
            SELECT * FROM read_parquet({duck.sql_list(files)}, union_by_name = true)""")
    else:  # no SNMP polling: the tables get an empty partition for the day
        cols = ", ".join(f'NULL::{t} AS "{n}"' for n, t in INTERFACE_COUNTERS.sql_columns())
        con.execute(f"CREATE OR REPLACE TEMP VIEW counters AS SELECT {cols} WHERE false")
    con.execute(f"CREATE OR REPLACE TEMP TABLE buckets AS {buckets_sql('counters', ctx.date)}")
    flow_files = duck.flow_files(ctx)
    flows = None
    if flow_files:
        src = f"read_parquet({duck.sql_list(flow_files)}, hive_partitioning = true, union_by_name = true)"
        columns = {r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {src}").fetchall()}
        # flow record revision 3's forwarding status, where the day's files have it (null: forwarded)
        leaves = "coalesce(forwarding_status, 64) < 128" if "forwarding_status" in columns else "true"
        spread = {"time_start", "time_end"} <= columns
        con.execute(f"CREATE OR REPLACE TEMP TABLE cov_flows AS {flow_hours_sql(src, ctx.date, leaves, spread)}")
        flows = "cov_flows"
    ctx.write_duckdb(con, utilisation_sql("buckets"), INTERFACE_UTILISATION.name)
    ctx.write_duckdb(con, coverage_sql("buckets", flows), FLOW_COVERAGE.name)
