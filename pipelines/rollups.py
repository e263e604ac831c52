"""Rollups for capacity planning: flows -> 1m/5m/1h buckets (tables in schemas/rollups.py).

Pure part (`build`): DuckDB SQL from any relation holding flow columns (an hour of the
lake, or the traffic model's flows in memory) to the three resolutions. 1m rows come from
the flows, 5m and 1h rows from the 1m rows (sums of overlaps are additive, so this is
exact). I/O part (`update_hour`): an hour of the lake replaces that hour's rows in the
date's file of each resolution (`lake/rollups/<res>/date=D/rollup.parquet`), written
beside it and renamed over it, so readers see the old or the new file, whole.
"""
from __future__ import annotations

import logging
import os
import shutil
import uuid
from pathlib import Path

import datetime as dt

from flowlake.pipelines import duck, lake_read, port_map
from flowlake.schemas.protocols import PROTO_NAMES
from flowlake.schemas.rollups import DAILY_BUCKETS, ENRICHMENT, P95_RANK, RESOLUTIONS, ROLLUP_1D, ROLLUPS

log = logging.getLogger("flowlake.rollups")

KEYS = ("exporter", "input_if", "output_if", "direction", "proto", "app", "src_as", "dst_as", *ENRICHMENT)
SUMS = ("flows", "packets", "bytes", "sampled_packets", "sampled_bytes")
FILE = "rollup.parquet"
PORTED = (6, 17, 132)


def _proto_name_sql(col: str) -> str:
    whens = " ".join(f"WHEN {k} THEN '{v.lower()}'" for k, v in PROTO_NAMES.items())
    return f"coalesce(CASE {col} {whens} END, CAST({col} AS VARCHAR))"


def _app_table(con, cfg) -> None:
    """Temp table flowlake_ports(k, svc): the port map, keyed proto * 65536 + port."""
    import pyarrow as pa  # noqa: PLC0415  (start-up: pyarrow)

    mapping = port_map.from_config(cfg)
    table = pa.table({"k": pa.array([p * 65536 + port for (p, port) in mapping], pa.int64()),
                      "svc": pa.array(list(mapping.values()), pa.string())})
    con.register("flowlake_ports_arrow", table)
    con.execute("CREATE OR REPLACE TEMP TABLE flowlake_ports AS SELECT * FROM flowlake_ports_arrow")
    con.unregister("flowlake_ports_arrow")


def build(con, cfg, source: str) -> dict[str, str]:
    """Temp tables rollup_1m/_5m/_1h from the relation `source` (flow columns, plus `hour`
    and `date` of the lake partition). Returns {resolution: temp table name}."""
    cols = {r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()}
    _app_table(con, cfg)
    enrich = ", ".join(f'"{c}"' if c in cols else f'CAST(NULL AS VARCHAR) AS "{c}"' for c in ENRICHMENT)
    duck.with_direction(con, "rollup_flows", source, f"f.*", list(cfg.site.local_prefixes))
    unit = RESOLUTIONS["1m"]
    top_n = int(cfg.rollups.as_top_n)
    bucket = ("CASE WHEN proto IN (6, 17, 132) THEN 'other-' || " + _proto_name_sql("proto") +
              " || '-' || CASE WHEN least(src_port, dst_port) < 1024 THEN 'wellknown' "
              "WHEN least(src_port, dst_port) < 49152 THEN 'registered' ELSE 'dynamic' END "
              "ELSE " + _proto_name_sql("proto") + " END")
    con.execute(f"""CREATE OR REPLACE TEMP TABLE rollup_1m AS
        WITH f AS (
            SELECT epoch_ms(time_start) / 1000.0 AS s, epoch_ms(time_end) / 1000.0 AS e,
                   CAST(hour AS INTEGER) AS hour, CAST(date AS VARCHAR) AS date,
                   exporter, CAST(input_if AS BIGINT) AS input_if, CAST(output_if AS BIGINT) AS output_if,
                   direction, CAST(proto AS INTEGER) AS proto,
                   coalesce(d.svc, s.svc, {bucket}) AS app,
                   CAST(src_as AS BIGINT) AS src_as, CAST(dst_as AS BIGINT) AS dst_as, {enrich},
                   CAST(packets AS DOUBLE) AS packets, CAST(bytes AS DOUBLE) AS bytes,
                   coalesce(sampling_rate, 0) AS sampling_rate
            FROM rollup_flows
            LEFT JOIN flowlake_ports d ON d.k = CAST(proto AS BIGINT) * 65536 + dst_port
            LEFT JOIN flowlake_ports s ON s.k = CAST(proto AS BIGINT) * 65536 + src_port),
        -- Bounded: per lake hour, ASes outside the top N by bytes fold into null ("other").
        top_src AS (SELECT date, hour, src_as, true AS keep FROM f GROUP BY date, hour, src_as
                    QUALIFY row_number() OVER (PARTITION BY date, hour ORDER BY sum(bytes) DESC, src_as) <= {top_n}),
        top_dst AS (SELECT date, hour, dst_as, true AS keep FROM f GROUP BY date, hour, dst_as
                    QUALIFY row_number() OVER (PARTITION BY date, hour ORDER BY sum(bytes) DESC, dst_as) <= {top_n}),
        folded AS (SELECT f.* REPLACE (CASE WHEN ts.keep THEN f.src_as END AS src_as,
                                       CASE WHEN td.keep THEN f.dst_as END AS dst_as)
                   FROM f LEFT JOIN top_src ts USING (date, hour, src_as) LEFT JOIN top_dst td USING (date, hour, dst_as)),
        g AS (SELECT *, greatest(e - s, 0) AS dur, CAST(floor(s / {unit}) AS BIGINT) AS b0 FROM folded),
        spread AS (
            SELECT g.*, b,
                   CASE WHEN dur = 0 THEN 1.0
                        ELSE (least(e, (b + 1) * {unit}) - greatest(s, b * {unit})) / dur END AS frac
            FROM g, LATERAL (SELECT unnest(range(b0, CASE WHEN dur = 0 THEN b0 + 1
                                                     ELSE greatest(b0 + 1, CAST(ceil(e / {unit}) AS BIGINT)) END)) AS b))
        SELECT make_timestamp(b * {unit} * 1000000) AS bucket, hour, {", ".join(KEYS)},
               CAST(sum(CASE WHEN b = b0 THEN 1 ELSE 0 END) AS BIGINT) AS flows,
               sum(packets * frac) AS packets, sum(bytes * frac) AS bytes,
               sum(packets / greatest(sampling_rate, 1) * frac) AS sampled_packets,
               sum(bytes / greatest(sampling_rate, 1) * frac) AS sampled_bytes,
               CAST(max(sampling_rate) AS INTEGER) AS sampling_rate, date
        FROM spread GROUP BY ALL""")
    out = {"1m": "rollup_1m"}
    for res, seconds in RESOLUTIONS.items():
        if res == "1m":
            continue
        con.execute(f"""CREATE OR REPLACE TEMP TABLE rollup_{res} AS
            SELECT time_bucket(INTERVAL {seconds} SECOND, bucket) AS bucket, hour, {", ".join(KEYS)},
                   {", ".join(f"sum({c}) AS {c}" if c != "flows" else "CAST(sum(flows) AS BIGINT) AS flows" for c in SUMS)},
                   max(sampling_rate) AS sampling_rate, date
            FROM rollup_1m GROUP BY ALL""")
        out[res] = f"rollup_{res}"
    return out


def _select(res: str, relation: str, extra: str = "") -> str:
    """The relation's rows with the declared columns and types (plus `extra`), in order."""
    record = ROLLUP_1D if res == "1d" else ROLLUPS[res]
    cols = [f"CAST({n} AS {t}) AS {n}" for n, t in record.sql_columns() if n != "date"] + ([extra] if extra else [])
    order = "exporter, if_index, side, direction" if res == "1d" else "bucket, exporter, input_if, output_if"
    return f"SELECT {', '.join(cols)} FROM {relation} ORDER BY {order}"


def daily_sql(five_min: str, day: str | None = None) -> str:
    """rollup_1d rows from 5-minute rollup rows: of `day` only (buckets outside it are
    ignored), or of every day they hold. Pure SQL: per bucket and interface side, then per day."""
    seconds = RESOLUTIONS["5m"]
    where = "true"
    if day is not None:
        d0 = dt.date.fromisoformat(day)
        where = f"bucket >= TIMESTAMP '{d0}' AND bucket < TIMESTAMP '{d0 + dt.timedelta(days=1)}'"
    sums = "sum(flows) AS flows, sum(packets) AS packets, sum(bytes) AS bytes"
    return f"""
        WITH r AS (SELECT * EXCLUDE (date), strftime(bucket, '%Y-%m-%d') AS date FROM {five_min} WHERE {where}),
        b AS (SELECT date, bucket, exporter, input_if AS if_index, 'in' AS side, direction, {sums} FROM r GROUP BY ALL
              UNION ALL
              SELECT date, bucket, exporter, output_if AS if_index, 'out' AS side, direction, {sums} FROM r GROUP BY ALL),
        a AS (SELECT * FROM b
              UNION ALL
              SELECT date, bucket, exporter, if_index, side, 'all' AS direction, {sums} FROM b GROUP BY ALL)
        SELECT exporter, if_index, side, direction, sum(flows) AS flows, sum(packets) AS packets, sum(bytes) AS bytes,
               sum(bytes) * 8 / 86400 AS mean_bps, max(bytes) * 8 / {seconds} AS peak_bps,
               CASE WHEN {DAILY_BUCKETS} - count(*) >= {P95_RANK} THEN 0.0
                    ELSE list_sort(list(bytes))[{P95_RANK} - ({DAILY_BUCKETS} - count(*))] * 8 / {seconds} END AS p95_bps,
               date
        FROM a GROUP BY ALL"""


def update_days(con, lake: Path, days: list[str]) -> int:
    """Recompute rollup_1d of `days` from the 5-minute rollup files of each day and the
    day before (traffic of flows that started before midnight)."""
    written = 0
    for day in days:
        d0 = dt.date.fromisoformat(day)
        files = [Path(lake) / "rollups" / "5m" / f"date={d.isoformat()}" / FILE for d in (d0 - dt.timedelta(days=1), d0)]
        files = [f for f in files if f.exists()]
        if not files:
            continue
        src = "read_parquet([" + ", ".join("'" + _q(f) + "'" for f in files) + "], hive_partitioning = true)"
        written += write_date(con, lake, "1d", day, f"({daily_sql(src, day)})", None)
    return written


def write_date(con, lake: Path, res: str, date: str, relation: str, replace_hours: list[int] | None) -> int:
    """Replace in lake/rollups/<res>/date=<date>/rollup.parquet the rows of `replace_hours`
    (None: all of them) by the rows of `relation`; atomic rename. Returns rows written."""
    folder = Path(lake) / "rollups" / res / f"date={date}"
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / FILE
    tmp = folder / f".{FILE}.{os.getpid()}.tmp"
    rel = f"(SELECT * EXCLUDE (date) FROM {relation})"
    if final.exists() and replace_hours is not None:
        keep = ", ".join(str(int(h)) for h in replace_hours) or "-1"
        old = f"read_parquet('{_q(final)}', hive_partitioning = false)"
        rel = f"(SELECT * FROM {old} WHERE hour NOT IN ({keep}) UNION ALL BY NAME {rel})"
    con.execute(f"COPY ({_select(res, rel)}) TO '{_q(tmp)}' (FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE 262144)")
    os.replace(tmp, final)
    return con.execute(f"SELECT count(*) FROM read_parquet('{_q(final)}')").fetchone()[0]


def _q(path) -> str:
    return str(path).replace("'", "''")


def connect():
    import duckdb  # noqa: PLC0415  (start-up: duckdb)

    return duckdb.connect(config={"threads": 1, "memory_limit": "1GB"})


def update_hour(cfg, date: str, hour: int, hour_dir: Path) -> dict[str, int]:
    """Recompute the rollup rows of one lake hour (after its compaction), then the daily
    rows of the days its traffic touched."""
    _version, files = lake_read.lake_files(cfg, "flows", [Path(hour_dir)])  # the table's current files of the hour
    con = connect()
    try:
        out = {}
        if files:
            src = ", ".join("'" + _q(f) + "'" for f in files)
            con.execute(f"""CREATE OR REPLACE TEMP VIEW hour_flows AS
                SELECT *, {int(hour)} AS hour, '{date}' AS date
                FROM read_parquet([{src}], union_by_name = true, hive_partitioning = false)""")
            tables = build(con, cfg, "hour_flows")
            out = {res: write_date(con, cfg.lake, res, date, t, [hour]) for res, t in tables.items()}
            days = [d for (d,) in con.execute(
                "SELECT DISTINCT strftime(bucket, '%Y-%m-%d') FROM rollup_5m ORDER BY 1").fetchall()]
        else:  # the hour was emptied: its rows go
            for res in RESOLUTIONS:
                final = Path(cfg.lake) / "rollups" / res / f"date={date}" / FILE
                if final.exists():
                    empty = f"(SELECT * FROM read_parquet('{_q(final)}') WHERE false)"
                    out[res] = write_date(con, cfg.lake, res, date, empty, [hour])
            days = [date]
        out["1d"] = update_days(con, cfg.lake, sorted(set(days) | {date}))
        return out
    finally:
        con.close()


def write_all_dates(con, lake: Path, res: str, relation: str) -> int:
    """Every date of `relation` at once: one partitioned write into staging, then each
    date's file renamed over lake/rollups/<res>/date=D/rollup.parquet."""
    base = Path(lake) / "rollups" / res
    staging = Path(lake) / "rollups" / f".staging-{res}-{uuid.uuid4().hex[:8]}"
    staging.parent.mkdir(parents=True, exist_ok=True)
    try:
        con.execute(f"COPY ({_select(res, relation, 'date AS part')}) TO '{_q(staging)}' "
                    "(FORMAT parquet, COMPRESSION zstd, PARTITION_BY (part))")
        for part in staging.glob("part=*"):
            folder = base / f"date={part.name[5:]}"
            folder.mkdir(parents=True, exist_ok=True)
            os.replace(next(part.glob("*.parquet")), folder / FILE)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return con.execute(f"SELECT count(*) FROM {relation}").fetchone()[0]


def write_days(cfg, flows_relation: str, con=None) -> dict[str, int]:
    """Fast path (backfills, the traffic model): rollups of every date in a relation of
    flows with `date` and `hour` columns, each date's files replaced whole, then rollup_1d."""
    con = con or connect()
    tables = build(con, cfg, flows_relation)
    out = {res: write_all_dates(con, cfg.lake, res, t) for res, t in tables.items()}
    con.execute(f"CREATE OR REPLACE TEMP TABLE rollup_1d AS {daily_sql('rollup_5m')}")
    out["1d"] = write_all_dates(con, cfg.lake, "1d", "rollup_1d")
    return out
